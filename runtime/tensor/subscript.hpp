#pragma once
// What one entry of a subscript takes from one dimension: basic indexing (movement.cpp) builds views
// from it, advanced indexing (advanced_index.cpp) the offsets of the elements it reads or writes.
// Private to the library's sources.
#include <cstdint>
#include <string>

#include "metagrad/tensor.hpp"

namespace metagrad::subscript {

// `count` elements from `start`, `step` apart.
struct Taken {
  std::int64_t start = 0, step = 1, count = 0;
};
// An integer or a Slice on dimension d of t. A slice follows Python's slice.indices (out-of-range bounds
// clamp, negative ones count from the end); an integer out of range throws.
Taken taken(const Tensor& t, const Index& i, std::size_t d);
[[noreturn]] void index_error(const Tensor& t, const std::string& why);
// The subscript holds a tensor (advanced indexing).
bool advanced(const std::vector<Index>& index);
// x[index] with tensors among the entries (PyTorch's advanced indexing).
Tensor advanced_read(const Tensor& x, const std::vector<Index>& index);

}  // namespace metagrad::subscript
