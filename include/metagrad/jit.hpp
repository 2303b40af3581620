#pragma once
// TinyJit (the seed's jit.py): wraps a step function of Tensors. The first call runs it normally
// (kernels compile, optimizer state appears); the second runs it again and captures every kernel
// it launches with the buffers it touched; later calls replay those kernels on the new inputs
// with no scheduling, no codegen and no graph:
//
//   TinyJit step([&](Tensor x, Tensor y) {
//     Tensor loss = model(x).sparse_categorical_crossentropy(y);
//     opt.zero_grad(), loss.backward(), opt.step();
//     return loss;
//   });
//   for (...) float l = step(x, y).item();
//
// Rules, as in tinygrad: the arguments are Tensors on one compiled device (CLANG, LLVM, OPENCL) and
// keep their shapes, dtypes and devices (a change throws, naming both shapes); the step does the
// same work every call, all of it in compiled kernels or in the host gathers of gather, index_select
// and Embedding (random numbers, another custom load, a copy from a compiled device or a kernel on
// CPU inside the step throw at capture); the returned tensors share
// the JIT's memory and are overwritten by the next call. Tensors the step replaces with
// Tensor::assign (parameters, momentum) carry over between calls; anything else it reads but does
// not compute (frozen weights, host data it uploads such as arange's) is read from its memory as it
// was at capture.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "metagrad/device.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

// One captured step: an ordered list of kernel calls on numbered buffer slots, complete enough to
// replay it here or to emit it ahead of time as C (each kernel's source, launch sizes, arguments).
struct CapturedStep {
  enum class Role : std::uint8_t {
    Input,    // argument `index` of the step, rebound to the caller's buffer on each call
    Output,   // returned tensor `index`
    State,    // read, then replaced through Tensor::assign by slot `index` (its next value)
    Param,    // read only, never written: weights of an inference step, constants
    Scratch,  // written and read within the step (activations, gradients, next states)
  };
  struct Slot {
    std::shared_ptr<RawBuffer> buf;
    Role role;
    std::size_t index = 0;
  };
  struct Kernel {
    ASTRunner runner;                // name, source (runner.prg), global/local sizes, program
    std::vector<std::size_t> slots;  // the arguments: output first, as ASTRunner::exec takes them
  };
  struct StateUpdate {
    std::size_t read, write;           // slots of the current and the next value
    std::weak_ptr<LazyBuffer> holder;  // the tensor's LazyBuffer: it gets the next value's buffer
    bool in_place = false;             // one buffer for both: the update overwrites the value it reads
  };
  std::string device;
  std::vector<Kernel> kernels;
  std::vector<Slot> slots;
  std::vector<std::optional<std::size_t>> inputs;  // per argument (none when no kernel reads it)
  std::vector<std::size_t> outputs;                // per returned tensor
  std::vector<StateUpdate> state;
  std::vector<Dims> input_shapes, output_shapes;
  std::vector<DType> input_dtypes;
  std::vector<std::string> input_devices, output_devices;
};

// The untyped core of TinyJit: steps take and return vectors of Tensors.
class JitCore {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  std::vector<Tensor> operator()(const Fn& fn, std::vector<Tensor> inputs);
  // The capture, once the second call has made it.
  const CapturedStep* captured() const { return captured_ ? &*captured_ : nullptr; }
  int calls() const { return calls_; }
  // Whether the last replay ran as one device graph (CUDA) rather than kernel by kernel.
  bool graphed() const { return graph_ != nullptr; }

 private:
  std::vector<Tensor> run(const Fn& fn, const std::vector<Tensor>& inputs, bool capture);
  std::vector<Tensor> replay(const std::vector<Tensor>& inputs);
  void capture_from(std::vector<CacheEntry> ran, const CaptureLog& log, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs);
  void prepare_replay();  // the per-kernel buffers and direct launches of captured_
  void plan_memory();     // scratch slots whose lifetimes do not overlap share one buffer
  void bind(std::size_t slot, const std::shared_ptr<RawBuffer>& buf);

  int calls_ = 0;
  bool planned_ = false;
  std::optional<CapturedStep> captured_;
  std::vector<std::vector<RawBuffer*>> bound_;                          // per kernel, its buffers
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> uses_;  // per slot: (kernel, argument)
  // Kernels replay as direct calls, not through ASTRunner::exec (which times each for DEBUG >= 2,
  // two clock reads and a getenv: a sixth of a 64 x 64 product's replay). A host kernel's function
  // is called on pointers kept current by bind (at ptrs_[first], count of them); any other program
  // (a GEMM, a GPU kernel) on bound_[kernel]. Empty for DEBUG >= 2.
  struct Launch {
    void* fn;  // null: call the kernel's program
    std::size_t kernel, first, count;
    std::int64_t global, ops;
  };
  std::vector<Launch> launches_;
  std::vector<void*> ptrs_;
  // A device that records launches (CUDA) replays the step as one graph; bind() notes the kernels
  // whose buffers changed since, which are recorded again before the next replay.
  std::unique_ptr<LaunchGraph> graph_;
  bool try_graph_ = false;
  std::vector<std::size_t> stale_;
  std::vector<bool> is_stale_;
  bool launch_graph();
  std::int64_t ops_ = 0, mem_ = 0;   // the step's GlobalCounters estimates
  std::vector<LazyBufferPtr> outs_;  // per output, the LazyBuffer the last replay returned
};

// TinyJit over a callable of Tensors that returns a Tensor or a std::vector<Tensor>.
template <class F>
class TinyJit {
 public:
  explicit TinyJit(F f) : f_(std::move(f)) {}

  template <class... A>
  auto operator()(const A&... args) {
    static_assert((std::is_same_v<A, Tensor> && ...), "TinyJit: every argument of a step must be a Tensor");
    static_assert(std::is_invocable_v<F&, const A&...>, "TinyJit: the step does not take these arguments");
    using R = std::decay_t<std::invoke_result_t<F&, const A&...>>;
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>,
                  "TinyJit: a step must return a Tensor or a std::vector<Tensor>");
    JitCore::Fn fn = [this](const std::vector<Tensor>& x) {
      return invoke(x, std::make_index_sequence<sizeof...(A)>{});
    };
    std::vector<Tensor> out = core_(fn, {args...});
    if constexpr (std::is_same_v<R, Tensor>)
      return out.at(0);
    else
      return out;
  }
  const CapturedStep* captured() const { return core_.captured(); }
  int calls() const { return core_.calls(); }
  bool graphed() const { return core_.graphed(); }

 private:
  template <std::size_t... I>
  std::vector<Tensor> invoke(const std::vector<Tensor>& x, std::index_sequence<I...>) {
    auto r = f_(x[I]...);
    if constexpr (std::is_same_v<std::decay_t<decltype(r)>, Tensor>)
      return {r};
    else
      return r;
  }

  F f_;
  JitCore core_;
};

}  // namespace metagrad
