#pragma once
// The internals of fixed/eigen.hpp: which Eigen objects have memory fx can view, and the Eigen::Map
// over a tensor's memory.
#include <Eigen/Core>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "metagrad/fixed/shape.hpp"

namespace metagrad::fixed::detail {

template <class M>
concept EigenDense = std::is_base_of_v<Eigen::DenseBase<std::remove_cvref_t<M>>, std::remove_cvref_t<M>>;

// The element type of m's memory, const where m is read-only (a const matrix, a Map of const).
template <class M>
using eigen_element_t = std::remove_pointer_t<decltype(std::declval<M&>().data())>;

// A Map or block whose rows (or columns) are not back to back is no row-major array.
template <class M>
void check_contiguous(const M& m, const char* what) {
  if (m.innerStride() != 1 || (m.outerSize() > 1 && m.outerStride() != m.innerSize()))
    throw std::invalid_argument(std::string(what) + ": the Eigen object (" + std::to_string(m.rows()) + ", " +
                                std::to_string(m.cols()) +
                                ") is strided (a block or a strided Map): copy it into a matrix first");
}

// Rank 0 and 1 as a column vector, rank 2 as a row-major matrix; const where T is.
template <class T, index_t... D>
auto eigen_map(T* p) {
  static_assert(
      sizeof...(D) <= 2,
      "fixed::to_eigen: Eigen matrices have rank 1 or 2: view the memory with the shape wanted first, "
      "fx::to_eigen(fx::TensorMap<T, R, C>(t.data()))");
  constexpr index_t d[] = {D..., 1, 1};
  using V = std::remove_const_t<T>;
  constexpr int r = sizeof...(D) == 0 ? 1 : static_cast<int>(d[0]);
  constexpr int c = sizeof...(D) == 2 ? static_cast<int>(d[1]) : 1;
  using Matrix = Eigen::Matrix<V, r, c, (c == 1 && r != 1) ? Eigen::ColMajor : Eigen::RowMajor>;
  if constexpr (std::is_const_v<T>)
    return Eigen::Map<const Matrix>(p);
  else
    return Eigen::Map<Matrix>(p);
}

}  // namespace metagrad::fixed::detail
