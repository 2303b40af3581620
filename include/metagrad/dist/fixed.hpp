#pragma once
// allreduce and broadcast of the static path's fixed::Tensors, in place in their own storage (host
// memory), for gradients that fixed::grad evaluated:
//
//   fx::grad_into(std::tie(gw1, gb1, gw2, gb2), loss, w1, b1, w2, b2);
//   dist::allreduce(dist::ReduceOp::MEAN, gw1, gb1, gw2, gb2);  // one fused buffer, one collective
//
// The element types and shapes are compared across ranks first, as for Tensors (allreduce.hpp).
#include <cstring>
#include <string>
#include <vector>

#include "metagrad/dist/comm.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::dist {

template <class T, fixed::index_t... D>
void allreduce(fixed::Tensor<T, D...>& t, ReduceOp op = ReduceOp::SUM) {
  check_same("allreduce", {fixed::detail::shape_and_type(t)});
  allreduce_sum(t.data(), static_cast<std::size_t>(t.size), dtype_of<T>, "allreduce");
  if (op == ReduceOp::MEAN)
    scale_by_world(t.data(), static_cast<std::size_t>(t.size), dtype_of<T>, "allreduce");
}

// Several tensors of one element type, copied into one buffer for one collective and back.
template <class T, fixed::index_t... D, class... Rest>
void allreduce(ReduceOp op, fixed::Tensor<T, D...>& first, Rest&... rest) {
  static_assert((std::is_same_v<T, typename Rest::value_type> && ...),
                "dist::allreduce: fused fixed::Tensors must share one element type");
  check_same("allreduce", {fixed::detail::shape_and_type(first), fixed::detail::shape_and_type(rest)...});
  static thread_local std::vector<T> flat;  // grows once, then reused every step
  flat.resize(static_cast<std::size_t>(first.size + (Rest::size + ... + 0)));
  std::size_t at = 0;
  auto pack = [&](auto& t) {
    std::memcpy(flat.data() + at, t.data(), sizeof(T) * static_cast<std::size_t>(t.size));
    at += static_cast<std::size_t>(t.size);
  };
  auto unpack = [&](auto& t) {
    std::memcpy(t.data(), flat.data() + at, sizeof(T) * static_cast<std::size_t>(t.size));
    at += static_cast<std::size_t>(t.size);
  };
  pack(first), (pack(rest), ...);
  allreduce_sum(flat.data(), flat.size(), dtype_of<T>, "allreduce");
  if (op == ReduceOp::MEAN) scale_by_world(flat.data(), flat.size(), dtype_of<T>, "allreduce");
  at = 0;
  unpack(first), (unpack(rest), ...);
}

template <class T, fixed::index_t... D>
void broadcast(fixed::Tensor<T, D...>& t, int root = 0) {
  check_same("broadcast", {fixed::detail::shape_and_type(t)});
  broadcast_bytes(t.data(), sizeof(T) * static_cast<std::size_t>(t.size), root, "broadcast");
}

}  // namespace metagrad::dist
