// The recurrent operators RNN, GRU and LSTM, unrolled over the sequence: the input projection of every
// step in one matmul, then one step at a time (forward, reverse or both), with sequence_lens masking the
// steps past each batch row's length.
#include <algorithm>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

struct Activation {
  std::string name;
  double alpha, beta;
  Tensor operator()(const Tensor& x) const {
    if (name == "Sigmoid") return x.sigmoid();
    if (name == "Tanh") return x.tanh();
    if (name == "Relu") return x.relu();
    if (name == "LeakyRelu") return x.leakyrelu(alpha);
    if (name == "HardSigmoid") return (x * alpha + beta).clip(0, 1);
    if (name == "Affine") return x * alpha + beta;
    if (name == "ScaledTanh") return (x * beta).tanh() * alpha;
    if (name == "ThresholdedRelu") return (x > alpha).where(x, 0.0);
    if (name == "Elu") return x.elu(alpha);
    if (name == "Softsign") return x.softsign();
    return x.softplus();  // Softplus
  }
};

enum class Kind { RNN, GRU, LSTM };

struct RnnAttrs {
  Kind kind;
  std::vector<Activation> act;  // per direction: f, g, h (as many as the kind uses)
  double clip;
  std::string direction;
  std::int64_t hidden, layout;
  bool linear_before_reset, input_forget;
};

Prepare recurrent(Kind kind) {
  return [kind](const NodeInfo& n) -> Run {
    std::size_t per = kind == Kind::RNN ? 1 : kind == Kind::GRU ? 2 : 3;
    RnnAttrs at{kind,
                {},
                n.f("clip", 0),
                n.s("direction", "forward"),
                n.i("hidden_size", 0),
                n.i("layout", 0),
                n.i("linear_before_reset", 0) != 0,
                n.i("input_forget", 0) != 0};
    if (at.direction != "forward" && at.direction != "reverse" && at.direction != "bidirectional")
      n.unsupported("direction '" + at.direction + "'");
    if (at.input_forget) n.unsupported("input_forget=1");
    std::size_t dirs = at.direction == "bidirectional" ? 2 : 1;
    std::vector<std::string> names;
    if (const auto* a = n.find("activations"))
      for (const auto& s : a->strings()) names.push_back(s);
    if (names.empty()) {
      std::vector<std::string> def = kind == Kind::RNN ? std::vector<std::string>{"Tanh"}
                                     : kind == Kind::GRU
                                         ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                         : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
      for (std::size_t d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
    }
    if (names.size() != per * dirs)
      n.unsupported(std::to_string(names.size()) + " activations for " + std::to_string(dirs) +
                    " direction(s)");
    auto alphas = n.floats("activation_alpha"), betas = n.floats("activation_beta");
    static const char* known[] = {"Sigmoid",     "Tanh",     "Relu",       "LeakyRelu",
                                  "HardSigmoid", "Affine",   "ScaledTanh", "ThresholdedRelu",
                                  "Elu",         "Softsign", "Softplus"};
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (std::none_of(std::begin(known), std::end(known), [&](const char* c) { return names[k] == c; }))
        n.unsupported("activation '" + names[k] + "'");
      double alpha = k < alphas.size() ? alphas[k]
                                       : (names[k] == "LeakyRelu"     ? 0.01
                                          : names[k] == "HardSigmoid" ? 0.2
                                                                      : 1.0);
      double beta = k < betas.size() ? betas[k]
                                     : (names[k] == "HardSigmoid" ? 0.5
                                        : names[k] == "Affine"    ? 0.0
                                                                  : 1.0);
      at.act.push_back({names[k], alpha, beta});
    }
    return [at, per, dirs](Args& a) -> std::vector<Value> {
      Tensor X = a.t(0);
      if (at.layout) X = X.transpose(0, 1);  // (seq, batch, input)
      const Tensor &W = a.t(1), &R = a.t(2);
      std::int64_t seq = X.shape()[0], batch = X.shape()[1], H = at.hidden ? at.hidden : R.shape()[2];
      std::int64_t G = at.kind == Kind::RNN ? 1 : at.kind == Kind::GRU ? 3 : 4;
      auto gate = [&](const Tensor& t, std::int64_t g) {
        return t.shrink({{0, t.shape()[0]}, {g * H, (g + 1) * H}});
      };
      std::optional<Tensor> lens;
      if (a.has(4)) lens = a.t(4).cast(dtypes::int64).reshape({batch, 1});
      auto pre = [&](Tensor t) { return at.clip > 0 ? t.clip(-at.clip, at.clip) : t; };
      std::vector<Tensor> ys, hs, cs;
      for (std::size_t d = 0; d < dirs; ++d) {
        auto di = static_cast<std::int64_t>(d);
        const Activation* f = &at.act[d * per];
        Tensor w = W[di], r = R[di];              // (G*H, input), (G*H, H)
        Tensor xw = X.matmul(w.transpose(0, 1));  // (seq, batch, G*H)
        std::optional<Tensor> wb, rb;
        if (a.has(3)) {
          Tensor b = a.t(3)[di];
          wb = b.shrink({{0, G * H}}), rb = b.shrink({{G * H, 2 * G * H}});
          xw = xw + *wb;
        }
        Tensor h = a.has(5) ? a.t(5)[di] : Tensor::zeros({batch, H}, {.dtype = X.dtype()});
        Tensor c = a.has(6) ? a.t(6)[di] : Tensor::zeros({batch, H}, {.dtype = X.dtype()});
        std::optional<Tensor> P;
        if (a.has(7)) P = a.t(7)[di];
        bool reverse = at.direction == "reverse" || d == 1;
        std::vector<Tensor> out(static_cast<std::size_t>(seq), h);
        for (std::int64_t s = 0; s < seq; ++s) {
          std::int64_t t = reverse ? seq - 1 - s : s;
          Tensor x = xw[t];  // (batch, G*H)
          Tensor hr = h.matmul(r.transpose(0, 1));
          if (rb) hr = hr + *rb;
          Tensor hn = h, cn = c;
          if (at.kind == Kind::RNN) {
            hn = f[0](pre(x + hr));
          } else if (at.kind == Kind::GRU) {  // z, r, h
            Tensor z = f[0](pre(gate(x, 0) + gate(hr, 0))), rg = f[0](pre(gate(x, 1) + gate(hr, 1)));
            Tensor hh = at.linear_before_reset
                            ? f[1](pre(gate(x, 2) + rg * gate(hr, 2)))
                            : f[1](pre(gate(x, 2) +
                                       (rg * h).matmul(r.shrink({{2 * H, 3 * H}, {0, H}}).transpose(0, 1)) +
                                       (rb ? gate(rb->reshape({1, -1}), 2)
                                           : Tensor::zeros({1, H}, {.dtype = X.dtype()}))));
            hn = (1 - z) * hh + z * h;
          } else {  // i, o, f, c
            Tensor gi = gate(x, 0) + gate(hr, 0), go = gate(x, 1) + gate(hr, 1),
                   gf = gate(x, 2) + gate(hr, 2);
            if (P) gi = gi + P->shrink({{0, H}}) * c, gf = gf + P->shrink({{2 * H, 3 * H}}) * c;
            Tensor it = f[0](pre(gi)), ft = f[0](pre(gf)), ct = f[1](pre(gate(x, 3) + gate(hr, 3)));
            cn = ft * c + it * ct;
            if (P) go = go + P->shrink({{H, 2 * H}}) * cn;
            hn = f[0](pre(go)) * f[2](cn);
          }
          if (lens) {  // rows past their length keep their state and output zeros
            Tensor live = *lens > t;
            h = live.where(hn, h), c = live.where(cn, c);
            out[static_cast<std::size_t>(t)] = live.where(hn, 0.0);
          } else {
            h = hn, c = cn;
            out[static_cast<std::size_t>(t)] = hn;
          }
        }
        ys.push_back(Tensor::stack(out, 0));  // (seq, batch, H)
        hs.push_back(h), cs.push_back(c);
      }
      Tensor Y = Tensor::stack(ys, 1), Yh = Tensor::stack(hs, 0), Yc = Tensor::stack(cs, 0);
      if (at.layout) Y = Y.permute({2, 0, 1, 3}), Yh = Yh.transpose(0, 1), Yc = Yc.transpose(0, 1);
      std::vector<Value> res{Y, Yh};
      if (at.kind == Kind::LSTM) res.push_back(Yc);
      return res;
    };
  };
}

}  // namespace

void add_rnn_ops(OpTable& t) {
  t["RNN"] = recurrent(Kind::RNN);
  t["GRU"] = recurrent(Kind::GRU);
  t["LSTM"] = recurrent(Kind::LSTM);
}

}  // namespace metagrad::onnx::detail
