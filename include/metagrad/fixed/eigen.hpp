#pragma once
// Zero-copy views between fixed::Tensor and Eigen, both ways, read and write. Include it after (or
// instead of) <Eigen/Core>; metagrad/fixed.hpp does not, so the static path needs no Eigen.
//
//   Eigen::Matrix<float, 3, 4, Eigen::RowMajor> m;
//   fx::TensorMap<float, 3, 4> t = fx::from_eigen(m);  // fx's view of m's memory
//   fx::from_eigen(m) = fx::matmul(x, w);              // evaluated straight into m
//   fx::to_eigen(tensor) *= 2.f;                       // an Eigen::Map of the tensor's memory
//   Eigen::Matrix3f c;                                 // column-major, Eigen's default:
//   auto ct = fx::from_eigen_transposed(c);            // c's memory read row-major: c^T
//
// fx tensors are row-major: from_eigen takes row-major matrices, vectors and Eigen::Maps of them (a
// column-major matrix is a compile error pointing at from_eigen_transposed). A fixed-size Eigen
// type's shape is checked at compile time (from_eigen<D...>(m) names the shape, any with m's
// element count); a dynamic-size one's, and the contiguity of a Map or block, at run time.
#include <Eigen/Core>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "metagrad/detail/fixed/eigen.hpp"
#include "metagrad/fixed/tensor_map.hpp"

namespace metagrad::fixed {

namespace err {
struct eigen {
  static constexpr const char* join = " viewed as ";
};
}  // namespace err

// fx's view (nothing copied, as torch.from_numpy) of a row-major Eigen matrix, array or vector (or an
// Eigen::Map of one): (rows, cols), or the shape D... when given, with the same element count.
template <index_t... D, detail::EigenDense M>
auto from_eigen(M&& m) {
  using E = std::remove_cvref_t<M>;
  using T = detail::eigen_element_t<M>;
  static_assert(E::Flags & Eigen::DirectAccessBit,
                "fixed::from_eigen: the Eigen expression has no memory of its own (a sum, a product, ...): "
                "evaluate it into a matrix first");
  static_assert(
      E::IsRowMajor || E::IsVectorAtCompileTime,
      "fixed::from_eigen: the Eigen matrix is column-major (Eigen's default) and fx tensors are row-major: "
      "declare it Eigen::Matrix<T, R, C, Eigen::RowMajor>, or take fx::from_eigen_transposed(m), its "
      "transpose over the same memory");
  constexpr index_t rows = E::RowsAtCompileTime, cols = E::ColsAtCompileTime;
  constexpr bool fixed_size = rows != Eigen::Dynamic && cols != Eigen::Dynamic;
  detail::check_contiguous(m, "fixed::from_eigen");
  if constexpr (sizeof...(D) == 0) {
    static_assert(
        fixed_size,
        "fixed::from_eigen: the Eigen object has a dynamic size: name the shape, fx::from_eigen<R, C>(m)");
    return TensorMap < T, fixed_size ? rows : 1, fixed_size ? cols : 1 > (m.data());
  } else {
    using S = Shape<D...>;
    if constexpr (fixed_size) {
      METAGRAD_FIXED_SHAPE_CHECK(rows * cols == S::size,
                                 "fixed::from_eigen: the Eigen object and the shape differ in element count",
                                 err::eigen, Shape<rows, cols>, S);
    } else if (m.size() != S::size) {
      throw std::invalid_argument("fixed::from_eigen: an Eigen object (" + std::to_string(m.rows()) + ", " +
                                  std::to_string(m.cols()) + ") viewed as " + metagrad::to_string(S::dims) +
                                  ": the element counts differ");
    }
    return TensorMap<T, D...>(m.data());
  }
}

// A column-major fixed-size Eigen matrix's memory read row-major: its transpose, (cols, rows).
template <detail::EigenDense M>
auto from_eigen_transposed(M&& m) {
  using E = std::remove_cvref_t<M>;
  using T = detail::eigen_element_t<M>;
  static_assert(
      E::Flags & Eigen::DirectAccessBit,
      "fixed::from_eigen_transposed: the Eigen expression has no memory of its own: evaluate it first");
  static_assert(
      !E::IsRowMajor,
      "fixed::from_eigen_transposed: the Eigen matrix is row-major already: take fx::from_eigen(m)");
  static_assert(E::RowsAtCompileTime != Eigen::Dynamic && E::ColsAtCompileTime != Eigen::Dynamic,
                "fixed::from_eigen_transposed: the Eigen matrix has a dynamic size: name the shape, "
                "fx::from_eigen<C, R>(Eigen::Map<RowMajorMatrix>(m.data(), C, R))");
  detail::check_contiguous(m, "fixed::from_eigen_transposed");
  constexpr bool fixed_size =
      E::RowsAtCompileTime != Eigen::Dynamic && E::ColsAtCompileTime != Eigen::Dynamic;
  return TensorMap < T, fixed_size ? E::ColsAtCompileTime : 1,
         fixed_size ? E::RowsAtCompileTime : 1 > (m.data());
}

// An Eigen::Map over a tensor's (or a TensorMap's) memory: rank 0 and 1 as a column vector, rank 2
// as a row-major matrix; const where the tensor is.
template <class T, index_t... D>
auto to_eigen(Tensor<T, D...>& t) {
  return detail::eigen_map<T, D...>(t.data());
}
template <class T, index_t... D>
auto to_eigen(const Tensor<T, D...>& t) {
  return detail::eigen_map<const T, D...>(t.data());
}
template <class T, index_t... D>
auto to_eigen(const TensorMap<T, D...>& t) {
  return detail::eigen_map<T, D...>(t.data());
}

}  // namespace metagrad::fixed
