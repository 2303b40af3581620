// aot::indexed_load: see indexed_load.hpp.
#include "indexed_load.hpp"

#include <cstring>
#include <stdexcept>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/lazy.hpp"

namespace metagrad::aot {

namespace {

// A buffer's bytes: its own memory on the host devices (CPU, CLANG, LLVM), else a copy.
struct Bytes {
  std::vector<std::byte> copy;
  std::byte* p;
  explicit Bytes(RawBuffer& b) {
    if (auto* m = dynamic_cast<RawMallocBuffer*>(&b)) {
      p = static_cast<std::byte*>(m->data());
    } else {
      copy.resize(b.nbytes());
      b.copyout(copy.data());
      p = copy.data();
    }
  }
};

}  // namespace

void IndexedLoad::operator()(RawBuffer& out, const std::vector<RawBuffer*>& in) const {
  // (a TinyJit plan may lend a source a larger buffer than its shape: only the first elements count)
  if (in.at(0)->size < static_cast<std::size_t>(outer * size * inner) ||
      in.at(1)->size < static_cast<std::size_t>(n))
    throw std::logic_error("indexed_load: a source buffer smaller than its shape");
  Bytes src(*in[0]), index(*in[1]), dst(out);
  const auto* idx = reinterpret_cast<const std::int64_t*>(index.p);
  for (std::int64_t j = 0; j < n; ++j)  // all checked before any is read
    if (idx[j] < 0 || idx[j] >= size)
      throw std::out_of_range(detail::cat("indexed_load: index value ", std::to_string(idx[j]), " (element ",
                                          std::to_string(j), ") is out of range for size ",
                                          std::to_string(size)));
  auto w = static_cast<std::size_t>(out.dtype.itemsize * inner);
  for (std::int64_t a = 0; a < outer; ++a)
    for (std::int64_t j = 0; j < n; ++j)
      std::memcpy(dst.p + static_cast<std::size_t>(a * n + j) * w,
                  src.p + static_cast<std::size_t>(a * size + idx[j]) * w, w);
  if (!dst.copy.empty()) out.copyin(dst.p);
}

Tensor indexed_load(const Tensor& x, std::int64_t axis, const Tensor& index) {
  if (index.ndim() != 1 || index.dtype() != dtypes::int64 || x.ndim() == 0)
    throw std::invalid_argument(detail::cat("indexed_load: index ", to_string(index.shape()), " ",
                                            index.dtype().name, " must be 1-D int64 and input ",
                                            to_string(x.shape()), " at least 1-D"));
  if (index.device() != x.device())
    throw std::invalid_argument(
        detail::cat("indexed_load: the index is on ", index.device(), ", the input on ", x.device()));
  Dims s = x.shape(), out = s;
  auto ax = static_cast<std::size_t>(axis);
  IndexedLoad f{1, s[ax], index.shape()[0], 1};
  for (std::size_t k = 0; k < ax; ++k) f.outer *= s[k];
  for (std::size_t k = ax + 1; k < s.size(); ++k) f.inner *= s[k];
  out[ax] = f.n;
  auto arg = std::make_shared<const CustomArg>(CustomArg{ReplayableFill{f}});
  std::vector<LazyBufferPtr> src{x.detach().lazydata->contiguous(), index.lazydata->contiguous()};
  return Tensor(LazyBuffer::loadop(LoadOps::CUSTOM, out, x.dtype(), x.device(), arg, std::move(src)), false);
}

}  // namespace metagrad::aot
