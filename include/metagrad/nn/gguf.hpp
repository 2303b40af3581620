#pragma once
// GGUF (version 3) files read in place: the file is memory-mapped, its header, metadata and tensor
// infos parsed, and each tensor's data is a pointer into the mapping (pages read as they are
// touched). Tensor types F32, F16, BF16, Q8_0 and Q4_0 (cpu/quant.hpp's blocks, which
// cpu::gemm_q and cpu::gemv_q multiply as they lie). A damaged or truncated file throws
// std::runtime_error naming the file and the key or tensor where it ends or goes wrong.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace metagrad::nn {

// ggml's type numbers.
enum class GgufType : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30 };
std::string to_string(GgufType t);

// A metadata value: one of the scalars, a string, or an array of values (kind says which).
struct GgufValue {
  enum class Kind : std::uint8_t { integer, unsigned_integer, floating, boolean, string, array } kind{};
  std::uint32_t type = 0;  // GGUF's value type (0 uint8 ... 12 float64)
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> array;
};

struct GgufTensor {
  std::string name;
  std::vector<std::int64_t> dims;  // GGUF's order: dims[0] the innermost (a row's length)
  GgufType type{};
  const void* data = nullptr;  // into the mapping
  std::size_t bytes = 0;
  std::int64_t elements() const;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // The tensor of that name (std::out_of_range naming it if there is none).
  const GgufTensor& tensor(const std::string& name) const;

 private:
  std::string path_;
  const char* map_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace metagrad::nn
