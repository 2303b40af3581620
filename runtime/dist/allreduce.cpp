// allreduce and broadcast of Tensors: realize, reach the bytes (host memory directly, else a host
// copy), run the collective, and rebind the tensor to a fresh buffer of its device holding the
// result. A fresh buffer, not the old one written over: other tensors and captured steps may share
// the old buffer, and a collective must change only the tensor it was given.
#include "metagrad/dist/allreduce.hpp"
#include "metagrad/detail/cat.hpp"

#include "host_memory.hpp"

namespace metagrad::dist {

using metagrad::detail::cat;

std::string describe(const Dims& shape, DType dtype) { return cat(to_string(shape), " ", dtype.name); }

namespace {

std::vector<std::string> descriptions(const std::vector<Tensor>& ts) {
  std::vector<std::string> out;
  for (const Tensor& t : ts) out.push_back(describe(t.shape(), t.dtype()));
  return out;
}

// The result's buffer: new, of t's size, dtype and device.
std::shared_ptr<RawBuffer> fresh(const Tensor& t) {
  return Device::get(t.device()).alloc(static_cast<std::size_t>(t.numel()), t.dtype());
}

// After check_same, so that every rank throws alike (a rank that threw alone would leave the
// others waiting in a collective).
void check_op(ReduceOp op, DType dtype) {
  if (op == ReduceOp::MEAN && !(dtype == dtypes::float32 || dtype == dtypes::float64))
    throw Error(cat("dist: allreduce: MEAN needs float32 or float64, not ", dtype.name, " (use SUM)"));
}

}  // namespace

void allreduce(Tensor& t, ReduceOp op) {
  not_in_jit("allreduce");
  check_same("allreduce", {describe(t.shape(), t.dtype())});
  check_op(op, t.dtype());
  std::shared_ptr<RawBuffer> in = realized_whole(t), out = fresh(t);
  auto n = static_cast<std::size_t>(t.numel());
  void *src = host_pointer(*in), *dst = host_pointer(*out);
  if (src && dst) {
    allreduce_sum(src, dst, n, t.dtype(), "allreduce");  // straight from one buffer into the other
  } else {
    std::vector<std::byte> host(in->nbytes());
    in->copyout(host.data());
    allreduce_sum(host.data(), n, t.dtype(), "allreduce");
    if (op == ReduceOp::MEAN) scale_by_world(host.data(), n, t.dtype(), "allreduce");
    out->copyin(host.data());
    return rebind(t, out);
  }
  if (op == ReduceOp::MEAN) scale_by_world(dst, n, t.dtype(), "allreduce");
  rebind(t, out);
}

void allreduce(const std::vector<Tensor>& ts, ReduceOp op) {
  not_in_jit("allreduce");
  check_same("allreduce", descriptions(ts));
  if (ts.empty()) return;
  for (const Tensor& t : ts)
    if (t.dtype() != ts[0].dtype())
      throw Error(cat("dist: allreduce: fused tensors must share one dtype: ", ts[0].dtype().name, " and ",
                      t.dtype().name, " (reduce them in two calls)"));
  DType dtype = ts[0].dtype();
  check_op(op, dtype);
  auto item = static_cast<std::size_t>(dtype.itemsize);
  std::size_t total = 0;
  for (const Tensor& t : ts) total += static_cast<std::size_t>(t.numel());
  std::vector<std::byte> flat(total * item);
  std::size_t at = 0;
  for (const Tensor& t : ts) {
    copy_to_host(*realized_whole(t), flat.data() + at);
    at += static_cast<std::size_t>(t.numel()) * item;
  }
  allreduce_sum(flat.data(), total, dtype, "allreduce");
  if (op == ReduceOp::MEAN) scale_by_world(flat.data(), total, dtype, "allreduce");
  at = 0;
  for (Tensor t : ts) {
    std::shared_ptr<RawBuffer> out = fresh(t);
    copy_from_host(*out, flat.data() + at);
    at += static_cast<std::size_t>(t.numel()) * item;
    rebind(t, out);
  }
}

void broadcast(Tensor& t, int root) { broadcast(std::vector<Tensor>{t}, root); }

void broadcast(const std::vector<Tensor>& ts, int root) {
  not_in_jit("broadcast");
  check_same("broadcast", descriptions(ts));
  std::size_t total = 0;
  for (const Tensor& t : ts) total += t.numel() * t.dtype().itemsize;
  std::vector<std::byte> flat(total);
  std::size_t at = 0;
  if (rank() == root)
    for (const Tensor& t : ts) {
      copy_to_host(*realized_whole(t), flat.data() + at);
      at += static_cast<std::size_t>(t.numel() * t.dtype().itemsize);
    }
  broadcast_bytes(flat.data(), total, root, "broadcast");
  at = 0;
  for (Tensor t : ts) {
    std::shared_ptr<RawBuffer> out = fresh(t);
    copy_from_host(*out, flat.data() + at);
    at += static_cast<std::size_t>(t.numel() * t.dtype().itemsize);
    rebind(t, out);
  }
}

}  // namespace metagrad::dist
