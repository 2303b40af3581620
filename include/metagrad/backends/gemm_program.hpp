#pragma once
// A contraction kernel on a host device (codegen/gemm.hpp): the runtime GEMM over the kernel's
// buffers for every batch index, and the epilogue kernel, if there is one, over C: on each block of
// C's rows as the GEMM finishes it (GemmEpilogue::unit), else after the products.
#include <functional>
#include <memory>
#include <optional>

#include "metagrad/codegen/gemm.hpp"
#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/device.hpp"
#include "metagrad/device/gemm.hpp"

namespace metagrad {

// Ops above the reduce: a kernel over C (in a scratch buffer laid out as the output) and the
// kernel's buffers; `inputs[i]` is the kernel buffer its buffer i + 1 reads (-1: C).
struct GemmEpilogue {
  ASTRunner runner;
  std::vector<int> inputs;
  std::int64_t c_size = 0;  // elements of C
  // On the host: C written into the output itself, no scratch (the epilogue writes float32, each
  // element where it read C's), and `unit`, where C's rows lie in the output in order, the elements
  // of C an index of the runner's range covers (its outermost loop): the epilogue then runs on each
  // block of C's rows as the GEMM finishes it, in cache (or, a unit past a row, after each product).
  bool in_place = false;
  std::int64_t unit = 0;
};

struct EpilogueCall;  // the epilogue's function on C's rows (gemm_program.cpp)

struct GemmWindow;  // a plan's b_window as tables (gemm_program.cpp)

class GemmProgram : public Program {
 public:
  // `blocking` is chosen once, when the kernel is built (a BEAM search runs then, not per call).
  // `packs[i]` gathers plan.packs[i] (a kernel over that one buffer). C for the epilogue and the
  // gathered operands are buffers from `scratch` (the device's pool), held for the call only: kept
  // from call to call they would hold a model's largest activations outside the pool for good.
  // A B with a window (plan.b_window) is gathered in the GEMM's packing, its copy kernel not run.
  GemmProgram(codegen::GemmPlan plan, gemm::GemmBlocking blocking, std::optional<GemmEpilogue> epilogue,
              std::vector<ASTRunner> packs, Compiled::BufferFactory scratch);
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override;
  const codegen::GemmPlan& plan() const { return plan_; }
  const std::optional<GemmEpilogue>& epilogue() const { return epilogue_; }
  const std::vector<ASTRunner>& packs() const { return packs_; }
  std::vector<const std::string*> parts() const override;

 private:
  // `gathered[i]`: plan.packs[i]'s copy.
  void products(float* c, const std::vector<RawBuffer*>& bufs, const std::shared_ptr<RawBuffer>* gathered,
                const EpilogueCall* epi) const;
  codegen::GemmPlan plan_;
  gemm::GemmBlocking blocking_;
  std::optional<GemmEpilogue> epilogue_;
  std::vector<ASTRunner> packs_;
  Compiled::BufferFactory scratch_;
  std::shared_ptr<const GemmWindow> window_;
};

using GemmCompile = std::function<std::shared_ptr<Program>(const std::string& name, const std::string& src)>;
using RunnerFn = std::function<ASTRunner(const std::shared_ptr<LazyOp>& ast, DType out_dtype)>;

// The ordinary kernels around a contraction, lowered by `lower` and built by `compile` on its
// device: the epilogue over C (when the AST has ops above the reduce) and the gathers of the
// operands the plan packs; `source` lists theirs (for the runner's source).
struct GemmParts {
  std::optional<GemmEpilogue> epilogue;
  std::vector<ASTRunner> packs;
  std::string source;
};
GemmParts gemm_parts(const codegen::Kernel& k, const codegen::GemmPlan& plan, const RunnerFn& lower,
                     const GemmCompile& compile);

// The sources of an epilogue and gathers (Program::parts).
std::vector<const std::string*> parts_of(const std::optional<GemmEpilogue>& epilogue,
                                         const std::vector<ASTRunner>& packs);

// "gemm_<batch>x<m>x<n>x<k>": the kernel name of a contraction on every device.
std::string gemm_name(const codegen::GemmPlan& plan);

// The runner of a kernel that `plan` covers: a readable description (and the epilogue's source)
// as its source, the kernel's estimates, and a GemmProgram. `render` and `compile` build the
// epilogue kernel on the device; `scratch` allocates there.
ASTRunner gemm_runner(const codegen::Kernel& k, const codegen::GemmPlan& plan,
                      const codegen::Renderer& render, const GemmCompile& compile,
                      Compiled::BufferFactory scratch);

}  // namespace metagrad
