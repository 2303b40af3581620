#pragma once
// Scratch memory for the temporaries of inline evaluation (materialised reductions, matmuls,
// aliased results): a per-thread bump allocator. Evaluation opens a Scope, takes blocks, and the
// Scope gives them back. A request that does not fit takes a separate block for now and raises the
// high-water mark; when the outermost Scope closes the arena regrows to that mark, once. So a loop
// that evaluates the same expressions (a training step) stops allocating after its first iteration.
#include <cstddef>
#include <new>

namespace metagrad::cpu::detail {

class Arena {
 public:
  static constexpr std::size_t kAlign = 64;

  // Out of line, as are the rare paths below (overflow, release, grow): inlined, the thread-local's
  // first-use setup and the operator new of an overflow were copied into every evaluation that takes
  // a block, a sixth of a header-only MLP step's code and 5% of its compile (docs/gemm.md).
  [[gnu::noinline]] static Arena& local() {
    thread_local Arena arena;
    return arena;
  }
  // The values and expressions of the cuts (fixed/cut.hpp), one Scope per fx::Tape: apart from
  // local(), whose scopes open and close within one evaluation.
  static Arena& tape() {
    thread_local Arena arena;
    return arena;
  }
  ~Arena() {
    release_overflow(nullptr);
    free(block_);
  }

  template <class T>
  T* alloc(std::size_t n) {
    std::size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    std::size_t at = used_;
    used_ += bytes;
    ++allocations_;
    if (used_ > high_) high_ = used_;
    if (used_ <= cap_) return reinterpret_cast<T*>(block_ + at);
    return static_cast<T*>(overflow(bytes));
  }
  std::size_t capacity() const { return cap_; }
  std::size_t allocations() const { return allocations_; }  // blocks taken so far (fixed::describe's test)

  class Scope {
   public:
    Scope() : Scope(local()) {}
    explicit Scope(Arena& a) : a_(a), used_(a_.used_), overflow_(a_.overflow_) { ++a_.depth_; }
    ~Scope() {
      if (a_.overflow_ != overflow_) a_.release_overflow(overflow_);
      a_.used_ = used_;
      if (--a_.depth_ == 0 && a_.high_ > a_.cap_) a_.grow();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Arena& a_;
    std::size_t used_;
    char* overflow_;
  };

 private:
  Arena() = default;
  static void free(char* p) {
    if (p) ::operator delete (p, std::align_val_t{kAlign});
  }
  [[gnu::noinline]] void* overflow(std::size_t bytes) {
    // its own block, linked through a header of kAlign bytes
    char* chunk = static_cast<char*>(::operator new (bytes + kAlign, std::align_val_t{kAlign}));
    *reinterpret_cast<char**>(chunk) = overflow_;
    overflow_ = chunk;
    return chunk + kAlign;
  }
  [[gnu::noinline]] void release_overflow(char* keep) {
    while (overflow_ != keep) {
      char* next = *reinterpret_cast<char**>(overflow_);
      free(overflow_);
      overflow_ = next;
    }
  }
  [[gnu::noinline]] void grow() {
    free(block_);
    block_ = static_cast<char*>(::operator new (high_, std::align_val_t{kAlign}));
    cap_ = high_;
  }

  char* block_ = nullptr;
  char* overflow_ = nullptr;
  std::size_t cap_ = 0, used_ = 0, high_ = 0, allocations_ = 0;
  int depth_ = 0;
};

}  // namespace metagrad::cpu::detail
