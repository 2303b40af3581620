// The generic interpreter: evaluates a kernel AST node by node on dense Values, reading leaves
// through their ShapeTracker with plain index arithmetic (no symbolic, no code generation).
#include <cmath>
#include <unordered_map>

#include "metagrad/lazy.hpp"

namespace metagrad {

namespace {

// Buffer index of a position through a stack of views; nullopt where a mask hides it.
std::optional<std::int64_t> view_stack_index(const std::vector<View>& views, const Dims& pos) {
  const View& top = views.back();
  if (!top.valid(pos)) return std::nullopt;
  std::int64_t idx = top.index(pos);
  for (std::size_t k = views.size() - 1; k-- > 0;) {
    const View& v = views[k];
    Dims p = Dims::filled(v.ndim(), 0);
    for (std::size_t d = v.ndim(), acc = 1; d-- > 0;) {
      std::int64_t s = std::max<std::int64_t>(v.shape[d], 1);
      p[d] = symbolic::floormod(symbolic::floordiv(idx, static_cast<std::int64_t>(acc)), s);
      acc *= static_cast<std::size_t>(s);
    }
    if (!v.valid(p)) return std::nullopt;
    idx = v.index(p);
  }
  return idx;
}

// Calls f(flat, pos) for every position of shape in row-major order.
template <class F>
void for_each_position(const Dims& shape, F f) {
  std::int64_t n = prod(shape);
  Dims pos = Dims::filled(shape.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    f(static_cast<std::size_t>(i), pos);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
}

struct Evaluator {
  Interpreted& dev;
  std::unordered_map<const RawBuffer*, Values> host;  // each input buffer read once per kernel

  const Values& host_values(const RawBuffer& raw) {
    auto [it, fresh] = host.try_emplace(&raw);
    if (fresh) {
      it->second.dtype = raw.dtype;
      std::vector<double> v = read_as_double(raw);
      if (dtypes::is_float(raw.dtype)) {
        it->second.f = std::move(v);
      } else if (raw.dtype == dtypes::int64) {  // doubles would round large int64 values
        it->second.i.resize(raw.size);
        raw.copyout(it->second.i.data());
      } else {
        it->second.i.assign(v.begin(), v.end());
      }
    }
    return it->second;
  }

  Values gather(LazyBuffer& leaf) {
    const Values& src = host_values(*leaf.base()->realized);
    Values out{leaf.dtype, {}, {}};
    bool fl = dtypes::is_float(leaf.dtype);
    (fl ? out.f.resize(static_cast<std::size_t>(leaf.st.size()))
        : out.i.resize(static_cast<std::size_t>(leaf.st.size())));
    for_each_position(leaf.shape(), [&](std::size_t k, const Dims& pos) {
      auto idx = view_stack_index(leaf.st.views(), pos);
      if (!idx) return;  // padding reads as 0
      if (fl)
        out.f[k] = src.f[static_cast<std::size_t>(*idx)];
      else
        out.i[k] = src.i[static_cast<std::size_t>(*idx)];
    });
    return out;
  }

  Values eval(const LazySrc& s) {
    if (auto* b = std::get_if<LazyBufferPtr>(&s)) return gather(**b);
    const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(s);
    if (op.op == LoadOps::CONST) {
      const ConstArg& c = std::get<ConstArg>(op.arg);
      std::size_t n = static_cast<std::size_t>(prod(c.shape));
      Values v{c.dtype, {}, {}};
      if (dtypes::is_float(c.dtype))
        v.f.assign(n, c.value);
      else
        v.i.assign(n, static_cast<std::int64_t>(c.value));
      // through NOOP so the constant is rounded to its dtype like any computed value
      return dev.fxn_for_op.at(UnaryOps::NOOP)(op, {v}, c.shape);
    }
    auto fxn = dev.fxn_for_op.find(op.op);
    if (fxn == dev.fxn_for_op.end())
      throw std::runtime_error("interpreter: no function for " + to_string(op.op));
    std::vector<Values> srcs;
    for (const LazySrc& x : op.src) srcs.push_back(eval(x));
    return fxn->second(op, srcs, ast_shape(op.src.at(0)));
  }
};

}  // namespace

void Interpreted::exec_ast(const LazyOp& ast, RawBuffer& output) {
  Evaluator ev{*this, {}};
  Values v = ev.eval(std::make_shared<LazyOp>(ast));
  if (v.size() != output.size)
    throw std::runtime_error(detail::cat("interpreter: kernel made ", std::to_string(v.size()),
                                         " values for a buffer of ", std::to_string(output.size)));
  if (output.dtype == dtypes::int64 && !dtypes::is_float(v.dtype)) {
    output.copyin(v.i.data());
  } else {
    std::vector<double> d = dtypes::is_float(v.dtype) ? v.f : std::vector<double>(v.i.begin(), v.i.end());
    write_from_double(output, d);
  }
}

}  // namespace metagrad
