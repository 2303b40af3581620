// Optimizers: tinygrad's update formulas, applied with Tensor::assign outside the autograd graph.
#include "metagrad/nn/optim.hpp"
#include "metagrad/detail/cat.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <unordered_set>

namespace metagrad::nn::optim {

using metagrad::detail::cat;

namespace {
Tensor scalar(double x, const std::string& device) {
  return Tensor(std::vector<double>{x}, Dims{}, {.device = device, .requires_grad = false});
}
// A 0-d hyperparameter tensor in the dtype and on the device of `p`.
Tensor like(const Tensor& s, const Tensor& p) { return s.to(p.device()).cast(p.dtype()); }

std::string num(double x) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}
void check(const char* who, const char* name, double x, double lo, double hi = INFINITY,
           bool hi_open = false) {
  if (!(x >= lo && (hi_open ? x < hi : x <= hi)))
    throw std::invalid_argument(cat(who, ": ", name, " must be in [", num(lo), ", ", num(hi),
                                    hi_open || std::isinf(hi) ? ")" : "]", ", got ", num(x)));
}
std::string device_of(const std::vector<Tensor>& ps) { return ps.empty() ? Device::DEFAULT : ps[0].device(); }
}  // namespace

Optimizer::Optimizer(const std::vector<Tensor>& ps, double lr_)
    : Optimizer(std::vector<ParamGroup>{{ps}}, lr_) {}
Optimizer::Optimizer(const std::vector<ParamGroup>& groups, double lr_)
    : lr(scalar(lr_, [&] {
        for (const ParamGroup& g : groups)
          if (!g.params.empty()) return g.params[0].device();
        return Device::DEFAULT;
      }())) {
  check("Optimizer", "lr", lr_, 0);
  std::unordered_set<const void*> seen;  // a tensor's identity: the address of its shared state
  for (const ParamGroup& g : groups) {
    if (g.weight_decay) check("Optimizer", "a group's weight_decay", *g.weight_decay, 0);
    for (Tensor p : g.params) {
      if (!seen.insert(&p.requires_grad.get()).second) continue;
      if (!p.requires_grad.get()) p.requires_grad = dtypes::is_float(p.dtype());
      if (*p.requires_grad.get())
        params.push_back(p), param_wd.push_back(g.weight_decay);
      else
        buffers.push_back(p);
    }
  }
}
Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (Tensor& p : params) p.grad = std::nullopt;
}

void Optimizer::realize(const std::vector<Tensor>& extra) {
  // One schedule (a cold step's kernels compile together), the states first. A realize's targets
  // are read, never recomputed, by the kernels that need them, and an elementwise kernel that reads
  // a state of its shape computes and stores it as well (the scheduler's multi-output kernels):
  // Adam's parameter, m and v are one kernel.
  std::vector<LazyBufferPtr> bufs;
  for (const std::vector<Tensor>* list : {&extra, static_cast<const std::vector<Tensor>*>(&params),
                                          static_cast<const std::vector<Tensor>*>(&buffers)})
    for (const Tensor& t : *list) bufs.push_back(t.lazydata);
  LazyBuffer::realize_all(bufs);
}

double Optimizer::get_lr() const { return lr.item<double>(); }
void Optimizer::set_lr(double x) {
  check("Optimizer.set_lr", "lr", x, 0);
  lr.assign(scalar(x, lr.device())).realize();
}

Tensor Optimizer::grad_of(std::size_t i, const char* who) const {
  if (!params[i].grad)
    throw std::runtime_error(cat(who, ": parameter ", std::to_string(i), " ", to_string(params[i]),
                                 " has no gradient (did backward() reach it?)"));
  return *params[i].grad;
}

// ---- SGD ----

SGD::SGD(const std::vector<Tensor>& ps, double lr_, double momentum_, double weight_decay, bool nesterov_)
    : Optimizer(ps, lr_), momentum(momentum_), wd(weight_decay), nesterov(nesterov_) {
  check("SGD", "momentum", momentum, 0);
  check("SGD", "weight_decay", wd, 0);
  if (nesterov && momentum == 0) throw std::invalid_argument("SGD: nesterov needs a momentum > 0");
  if (momentum != 0)
    for (const Tensor& p : params)
      b.push_back(
          Tensor::zeros(p.shape(), {.device = p.device(), .dtype = p.dtype(), .requires_grad = false}));
}

void SGD::step() {
  Tensor::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor& p = params[i];
    Tensor g = grad_of(i, "SGD.step");
    g.realize();
    if (double w = param_wd[i].value_or(wd); w != 0) g = g + w * p.detach();
    if (momentum != 0) {
      b[i].assign(momentum * b[i] + g).realize();  // b starts at zero, so the first step makes b = g
      g = nesterov ? g + momentum * b[i] : b[i];
    }
    p.assign((p.detach() - g * like(lr, p)).cast(p.dtype()));
  }
  realize(b);
}

// ---- LAMB, Adam, AdamW ----

LAMB::LAMB(const std::vector<ParamGroup>& ps, double lr_, double b1_, double b2_, double eps_, double wd_,
           bool adam_)
    : Optimizer(ps, lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), adam(adam_), t(scalar(0, lr.device())) {
  const char* who = adam ? (wd ? "AdamW" : "Adam") : "LAMB";
  check(who, "b1", b1, 0, 1, true);
  check(who, "b2", b2, 0, 1, true);
  check(who, "eps", eps, 0);
  check(who, "wd", wd, 0);
  for (const Tensor& p : params) {
    TensorOptions o{.device = p.device(), .dtype = p.dtype(), .requires_grad = false};
    m.push_back(Tensor::zeros(p.shape(), o));
    v.push_back(Tensor::zeros(p.shape(), o));
  }
}

void LAMB::step() {
  Tensor::NoGradGuard no_grad;
  t.assign(t + 1);
  // The step count and its bias corrections once a step (not once a parameter), one kernel; each
  // parameter's m, v and update are then built lazily and realized together at the end, one kernel
  // a parameter (the scheduler's multi-output kernels), the gradient's scaling (clip_grad_norm's)
  // computed inside it rather than written out.
  Tensor bias1 = 1.0 - Tensor::full_like(t, b1).pow(t), bias2 = 1.0 - Tensor::full_like(t, b2).pow(t);
  LazyBuffer::realize_all({t.lazydata, bias1.lazydata, bias2.lazydata});
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor& p = params[i];
    Tensor g = grad_of(i, adam ? "Adam.step" : "LAMB.step");
    m[i].assign(b1 * m[i] + (1.0 - b1) * g);
    v[i].assign(b2 * v[i] + (1.0 - b2) * (g * g));
    Tensor m_hat = m[i] / like(bias1, p), v_hat = v[i] / like(bias2, p);
    Tensor up = m_hat / (v_hat.sqrt() + eps);
    if (double w = param_wd[i].value_or(wd); w != 0) up = up + w * p.detach();
    Tensor step = like(lr, p) * up;
    if (!adam) {  // the trust ratio; 1 where either norm is 0 (r1 / r2 is finite in both branches)
      Tensor r1 = p.detach().square().sum().sqrt(), r2 = up.square().sum().sqrt();
      Tensor ratio = (r2 > 0).where(r1 / (r2 + (r2 <= 0).cast(r2.dtype())), r2.scalar_like(1));
      step = step * (r1 > 0).where(ratio, ratio.scalar_like(1));
    }
    p.assign((p.detach() - step).cast(p.dtype()));
  }
  std::vector<Tensor> state{t};
  state.insert(state.end(), m.begin(), m.end());
  state.insert(state.end(), v.begin(), v.end());
  realize(state);
}

// ---- parameter groups, clipping, schedules ----

std::vector<ParamGroup> decay_groups(const std::vector<Tensor>& ps, double weight_decay) {
  std::vector<ParamGroup> g{{{}, weight_decay}, {{}, 0.0}};
  for (const Tensor& p : ps) g[p.ndim() >= 2 ? 0 : 1].params.push_back(p);
  return g;
}

Tensor clip_grad_norm(const std::vector<Tensor>& ps, double max_norm) {
  check("clip_grad_norm", "max_norm", max_norm, 0);
  Tensor::NoGradGuard no_grad;
  std::vector<Tensor> gs;
  for (const Tensor& p : ps)
    if (p.grad) gs.push_back(*p.grad);
  if (gs.empty()) return Tensor::zeros({}, {.device = device_of(ps), .requires_grad = false});
  // Gradients of at most kSmall elements are summed over their concatenation, in one kernel: a
  // model's biases and norms would each be a reduce of a few hundred elements, a launch apiece.
  constexpr std::int64_t kSmall = 4096;
  std::optional<Tensor> sq;
  auto add = [&](const Tensor& s) { sq = sq ? *sq + s : s; };
  std::vector<Tensor> small;
  for (const Tensor& g : gs) {
    Tensor f = g.cast(dtypes::float32);
    if (f.numel() <= kSmall)
      small.push_back(f.reshape({-1}));
    else
      add(f.square().sum());
  }
  if (small.size() == 1) add(small[0].square().sum());
  if (small.size() > 1) add(small[0].cat({small.begin() + 1, small.end()}).square().sum());
  Tensor norm = sq->sqrt();
  Tensor coef = (max_norm / (norm + 1e-6)).minimum(1.0);
  for (const Tensor& p : ps)
    if (p.grad) {
      Tensor g = *p.grad;
      Tensor(p).grad = (g * coef.cast(g.dtype())).cast(g.dtype());
    }
  return norm;
}

double cosine_lr(long step, long warmup, long total, double max_lr, double min_lr) {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  double r = static_cast<double>(step - warmup) / static_cast<double>(std::max(total - warmup, 1L));
  return min_lr + 0.5 * (1 + std::cos(std::numbers::pi * r)) * (max_lr - min_lr);
}

}  // namespace metagrad::nn::optim
