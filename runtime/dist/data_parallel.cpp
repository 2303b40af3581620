// DataParallel: gradients packed into flat buckets, one MPI_Iallreduce per bucket started as soon
// as its gradients are realized, then unpacked into fresh buffers of the gradients' device.
#include "metagrad/dist/data_parallel.hpp"
#include "metagrad/detail/cat.hpp"

#include <chrono>

#include "host_memory.hpp"

namespace metagrad::dist {

using metagrad::detail::cat;

DataParallel::DataParallel(std::vector<Tensor> all, std::size_t bucket_bytes, std::size_t first_bucket_bytes,
                           int) {
  if (bucket_bytes == 0 || first_bucket_bytes == 0)
    throw std::invalid_argument("DataParallel: bucket sizes must be positive");
  broadcast(all, 0);
  for (const Tensor& t : all)
    if (dtypes::is_float(t.dtype()) && t.requires_grad.get().value_or(true)) trainable_.push_back(t);
  // Reverse order, one dtype per bucket, a new bucket when the next parameter would overflow it (a
  // parameter larger than the cap gets a bucket of its own).
  std::size_t cap = first_bucket_bytes;
  for (std::size_t i = trainable_.size(); i-- > 0;) {
    const Tensor& p = trainable_[i];
    auto bytes = static_cast<std::size_t>(p.numel() * p.dtype().itemsize);
    if (buckets_.empty() || buckets_.back().dtype != p.dtype() ||
        (buckets_.back().count > 0 &&
         (buckets_.back().count * static_cast<std::size_t>(p.dtype().itemsize) + bytes > cap))) {
      if (!buckets_.empty()) cap = bucket_bytes;
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
    }
    Bucket& b = buckets_.back();
    b.params.push_back(i);
    b.offsets.push_back(b.count);
    b.count += static_cast<std::size_t>(p.numel());
  }
  for (Bucket& b : buckets_) b.host.resize(b.count * static_cast<std::size_t>(b.dtype.itemsize));
}

void DataParallel::average_gradients() {
  std::vector<Tensor> grads;
  for (Tensor& p : trainable_) {
    if (!p.grad) p.grad = Tensor::zeros(p.shape(), {.device = p.device(), .dtype = p.dtype()});
    grads.push_back(*p.grad);
  }
  reduce(grads);
}

void DataParallel::average(const std::vector<Tensor>& grads) {
  if (grads.size() != trainable_.size())
    throw std::invalid_argument(cat("DataParallel.average: ", std::to_string(grads.size()), " gradients for ",
                                    std::to_string(trainable_.size()), " trainable parameters"));
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (grads[i].shape() != trainable_[i].shape() || grads[i].dtype() != trainable_[i].dtype())
      throw std::invalid_argument(cat("DataParallel.average: gradient ", std::to_string(i), " is ",
                                      describe(grads[i].shape(), grads[i].dtype()), ", its parameter ",
                                      describe(trainable_[i].shape(), trainable_[i].dtype())));
  reduce(grads);
}

void DataParallel::reduce(const std::vector<Tensor>& grads) {
  not_in_jit("DataParallel");
  if (!checked_) {
    std::vector<std::string> items;
    for (const Tensor& p : trainable_) items.push_back(describe(p.shape(), p.dtype()));
    check_same("DataParallel", items);
    checked_ = true;
  }
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    auto item = static_cast<std::size_t>(b.dtype.itemsize);
    for (std::size_t j = 0; j < b.params.size(); ++j)
      copy_to_host(*realized_whole(grads[b.params[j]]), b.host.data() + b.offsets[j] * item);
    b.request = iallreduce(b.host.data(), b.count, b.dtype, "DataParallel");
    // Open MPI progresses a collective inside MPI calls only: push this one and those before it.
    for (std::size_t e = 0; e <= k; ++e) buckets_[e].request.test();
  }
  wait_seconds_ = 0;
  for (Bucket& b : buckets_) {
    auto t0 = std::chrono::steady_clock::now();
    b.request.wait();
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    scale_by_world(b.host.data(), b.count, b.dtype, "DataParallel");
    auto item = static_cast<std::size_t>(b.dtype.itemsize);
    for (std::size_t j = 0; j < b.params.size(); ++j) {
      Tensor g = grads[b.params[j]];
      std::shared_ptr<RawBuffer> out =
          Device::get(g.device()).alloc(static_cast<std::size_t>(g.numel()), g.dtype());
      copy_from_host(*out, b.host.data() + b.offsets[j] * item);
      rebind(g, out);
    }
  }
}

}  // namespace metagrad::dist
