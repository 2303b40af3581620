#pragma once
// A gather whose indices are data: index_select(axis) of rows, with the indices read when it runs
// rather than when the graph is built (Tensor::index_select reads them then, to check them), so a
// graph on an input's indices (an ONNX Gather of token ids: an embedding) can be captured. On a
// device it is a replayable host fill (TinyJit replays it, checking each index as it reads it); an
// aot::Generator finds it among the kernels it records and emits it as an indexed load in C that
// returns an error, not a wild read, for an index out of range. Private to the library's sources.
#include <cstdint>
#include <vector>

#include "metagrad/tensor.hpp"

namespace metagrad::aot {

// The fill: out (outer, n, inner) = src (outer, size, inner) at rows idx[0..n) of its middle axis.
struct IndexedLoad {
  std::int64_t outer, size, n, inner;
  void operator()(RawBuffer& out, const std::vector<RawBuffer*>& in) const;
};

// x.index_select(axis, index) for a 1-D int64 `index` whose values are in [0, x.shape[axis]) when it
// runs (std::out_of_range otherwise); no gradient.
Tensor indexed_load(const Tensor& x, std::int64_t axis, const Tensor& index);

}  // namespace metagrad::aot
