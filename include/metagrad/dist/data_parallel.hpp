#pragma once
// DataParallel: data-parallel training as PyTorch's DistributedDataParallel does it. Every rank
// holds a replica of the model and runs the same step on its own share of the batch; after
// backward(), average_gradients() makes every gradient the mean over the ranks, so each rank's
// optimizer takes the same step the one-process step on the whole batch would take.
//
//   dist::DataParallel ddp(model);       // collective: rank 0's parameters to every rank
//   nn::optim::Adam opt(nn::get_parameters(model), 1e-3);
//   ...
//   opt.zero_grad();
//   loss.backward();
//   ddp.average_gradients();             // bucketed, non-blocking allreduce
//   opt.step();
//
// Gradients travel in buckets, not one collective per parameter: parameters are taken in reverse
// order (the order backward produces their gradients) and packed into flat host buffers of at most
// bucket_bytes (25 MiB, PyTorch's default; the first bucket 1 MiB so that a small model still has
// a bucket in flight early). Each bucket's gradients are realized and its MPI_Iallreduce started
// before the next bucket's kernels are launched, so the reduction of late layers overlaps the
// backward computation of early ones. The ranks' parameter shapes and dtypes are compared once, at
// the first average (dist::check_same): a different model on one rank throws on every rank.
//
// With TinyJit, a collective cannot be part of a captured step: capture forward + backward in one
// TinyJit that returns the gradients, average them with average(grads), and pass them to a second
// TinyJit that sets each parameter's grad and calls the optimizer's step (docs/distributed.md).
#include <cstddef>
#include <vector>

#include "metagrad/dist/allreduce.hpp"
#include "metagrad/nn/state.hpp"

namespace metagrad::dist {

class DataParallel {
 public:
  static constexpr std::size_t kBucketBytes = std::size_t{25} << 20, kFirstBucketBytes = std::size_t{1} << 20;

  // The trainable tensors of `model` (float, requires_grad not false) are averaged; all its tensors
  // (running statistics too) are broadcast from rank 0 here, so the replicas start equal.
  template <nn::Model M>
  explicit DataParallel(const M& model, std::size_t bucket_bytes = kBucketBytes,
                        std::size_t first_bucket_bytes = kFirstBucketBytes)
      : DataParallel(nn::get_parameters(model), bucket_bytes, first_bucket_bytes, 0) {}

  // After backward(): each trainable parameter's grad becomes the mean over the ranks (a parameter
  // with no gradient counts as zeros, and gets a zero-filled mean).
  void average_gradients();
  // The same for gradients given explicitly, one per trainable parameter in order (a TinyJit step's
  // outputs): each tensor is rebound to the mean, as dist::allreduce does.
  void average(const std::vector<Tensor>& grads);

  struct Bucket {
    std::vector<std::size_t> params;   // indices into trainable(), in the order packed
    std::vector<std::size_t> offsets;  // element offsets of each in the flat buffer
    std::size_t count = 0;             // elements
    DType dtype = dtypes::float32;
    std::vector<std::byte> host;  // the flat buffer
    Request request;
  };
  const std::vector<Tensor>& trainable() const { return trainable_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Seconds the last average spent blocked waiting for buckets to finish (the communication the
  // backward pass did not hide).
  double wait_seconds() const { return wait_seconds_; }

 private:
  DataParallel(std::vector<Tensor> all, std::size_t bucket_bytes, std::size_t first_bucket_bytes, int);
  void reduce(const std::vector<Tensor>& grads);

  std::vector<Tensor> trainable_;
  std::vector<Bucket> buckets_;
  bool checked_ = false;
  double wait_seconds_ = 0;
};

}  // namespace metagrad::dist
