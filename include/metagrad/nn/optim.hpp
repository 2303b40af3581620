#pragma once
// Optimizers (tinygrad's nn/optim.py): SGD, and LAMB with Adam and AdamW as its trust-ratio-free
// cases. step() updates the parameters in place with Tensor::assign under Tensor::NoGradGuard, so
// no graph grows across steps, and realizes the parameters and the optimizer's state.
//
//   nn::optim::Adam opt(nn::get_parameters(net), 1e-3);
//   opt.zero_grad();
//   loss.backward();
//   opt.step();
//
// Hyperparameters that change during training (lr) and the step count live in 0-d float64 tensors,
// not in kernels' constants, so a captured step can replay with new values; each update casts them
// to the parameter's dtype and computes in that dtype.
#include <optional>
#include <vector>

#include "metagrad/tensor.hpp"

namespace metagrad::nn::optim {

// Parameters sharing a weight decay (PyTorch's param_groups): AdamW({{decay, 0.1}, {no_decay, 0.0}}).
// A group without one uses the optimizer's.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay = {};
};
// GPT-style groups: tensors of 2 or more axes (matmul and embedding weights) decay by weight_decay,
// the others (biases, LayerNorm's scale and shift) do not.
std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& params, double weight_decay);

class Optimizer {
 public:
  Optimizer(const std::vector<ParamGroup>& groups, double lr);
  // Float tensors with requires_grad unset become trainable; those with requires_grad = false
  // (running statistics) and integer ones are buffers: not updated, but realized with each step so
  // their graphs stay short. A tensor given twice counts once.
  Optimizer(const std::vector<Tensor>& params, double lr);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  void zero_grad();
  virtual void step() = 0;
  // Realizes extra, then the parameters and buffers.
  void realize(const std::vector<Tensor>& extra = {});

  double get_lr() const;
  void set_lr(double lr);

  std::vector<Tensor> params, buffers;
  std::vector<std::optional<double>> param_wd;  // each parameter's group's weight decay, if it set one
  Tensor lr;                                    // 0-d float64

 protected:
  Tensor grad_of(std::size_t i, const char* who) const;  // the gradient, or a clear error
};

// https://pytorch.org/docs/stable/generated/torch.optim.SGD.html (no dampening):
// g = grad + wd * p; b = momentum * b + g; g = nesterov ? g + momentum * b : b; p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(const std::vector<Tensor>& params, double lr = 0.001, double momentum = 0, double weight_decay = 0,
      bool nesterov = false);
  void step() override;

  double momentum, wd;
  bool nesterov;
  std::vector<Tensor> b;  // momentum buffers (none without momentum)
};

// LAMB (https://arxiv.org/abs/1904.00962), as tinygrad writes it: Adam's step plus decoupled weight
// decay, scaled by the trust ratio |p| / |update| (1 with adam = true, which makes it Adam/AdamW).
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; up = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p;
// p -= lr * r * up.
class LAMB : public Optimizer {
 public:
  LAMB(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
       double eps = 1e-6, double wd = 0.0, bool adam = false)
      : LAMB(std::vector<ParamGroup>{{params}}, lr, b1, b2, eps, wd, adam) {}
  LAMB(const std::vector<ParamGroup>& groups, double lr, double b1, double b2, double eps, double wd,
       bool adam);
  void step() override;

  double b1, b2, eps, wd;
  bool adam;
  Tensor t;                  // steps taken, 0-d float64
  std::vector<Tensor> m, v;  // first and second moments
};

class Adam : public LAMB {
 public:
  Adam(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
       double eps = 1e-8)
      : LAMB(params, lr, b1, b2, eps, 0.0, true) {}
};

// Adam with decoupled weight decay: the same update as PyTorch's AdamW.
class AdamW : public LAMB {
 public:
  AdamW(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
        double eps = 1e-8, double wd = 0.01)
      : LAMB(params, lr, b1, b2, eps, wd, true) {}
  AdamW(const std::vector<ParamGroup>& groups, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
        double eps = 1e-8, double wd = 0.01)
      : LAMB(groups, lr, b1, b2, eps, wd, true) {}
};

// ---- training utilities ----

// Scales the gradients of params in place so that their global 2-norm is at most max_norm
// (PyTorch's clip_grad_norm_: coefficient min(1, max_norm / (norm + 1e-6))); returns the norm before
// clipping as a 0-d float32 tensor, lazily (no realize). Parameters without a gradient are skipped.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// The learning rate at `step` (0-based) of linear warm-up from 0 to max_lr over warmup steps, then a
// cosine decay to min_lr at total steps (and min_lr after), as nanoGPT's get_lr.
double cosine_lr(long step, long warmup, long total, double max_lr, double min_lr = 0);
// Sets an optimizer's lr by cosine_lr before each step: sched.step() once per training step.
class CosineWarmup {
 public:
  CosineWarmup(Optimizer& opt, long warmup, long total, double max_lr, double min_lr = 0)
      : opt_(opt), warmup_(warmup), total_(total), max_lr_(max_lr), min_lr_(min_lr) {
    opt_.set_lr(cosine_lr(0, warmup_, total_, max_lr_, min_lr_));
  }
  // Moves to the next step's learning rate; returns it.
  double step() {
    double lr = cosine_lr(++t_, warmup_, total_, max_lr_, min_lr_);
    opt_.set_lr(lr);
    return lr;
  }
  long steps() const { return t_; }

 private:
  Optimizer& opt_;
  long warmup_, total_, t_ = 0;
  double max_lr_, min_lr_;
};

}  // namespace metagrad::nn::optim
