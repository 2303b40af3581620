// The generic interpreter: evaluates a kernel AST on dense Values, reading leaves through their
// ShapeTracker with plain index arithmetic (no symbolic, no code generation).
//
// Every node is evaluated over a region of its shape (a [begin, end) per axis). Regions are split
// so that no intermediate holds more than kBlock elements: a matmul's expanded product is never
// materialised, and the table's functions see small, cache-resident arrays.
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"

namespace metagrad {

namespace {

constexpr std::int64_t kBlock = 1 << 14;

std::int64_t volume(const Pairs& r) {
  std::int64_t n = 1;
  for (const Pair& p : r) n *= p.second - p.first;
  return n;
}
Dims extent(const Pairs& r) {
  Dims d;
  for (const Pair& p : r) d.push_back(p.second - p.first);
  return d;
}
Pairs full_region(const Dims& shape) {
  Pairs r;
  for (std::int64_t s : shape) r.push_back({0, s});
  return r;
}
// The first axis with more than one position: splitting it keeps both halves contiguous in
// row-major order, so their results concatenate by appending.
std::optional<std::size_t> split_axis(const Pairs& r) {
  for (std::size_t d = 0; d < r.size(); ++d)
    if (r[d].second - r[d].first > 1) return d;
  return std::nullopt;
}

void append(Values& to, const Values& from) {
  to.dtype = from.dtype;
  to.f.insert(to.f.end(), from.f.begin(), from.f.end());
  to.i.insert(to.i.end(), from.i.begin(), from.i.end());
}

// Buffer index of a position through a stack of views; nullopt where a mask hides it.
std::optional<std::int64_t> view_stack_index(const std::vector<View>& views, const Dims& pos) {
  const View& top = views.back();
  if (!top.valid(pos)) return std::nullopt;
  std::int64_t idx = top.index(pos);
  for (std::size_t k = views.size() - 1; k-- > 0;) {
    const View& v = views[k];
    Dims p = Dims::filled(v.ndim(), 0);
    std::int64_t acc = 1;
    for (std::size_t d = v.ndim(); d-- > 0;) {
      std::int64_t s = std::max<std::int64_t>(v.shape[d], 1);
      p[d] = symbolic::floormod(symbolic::floordiv(idx, acc), s);
      acc *= s;
    }
    if (!v.valid(p)) return std::nullopt;
    idx = v.index(p);
  }
  return idx;
}

// dst[k] = src[index of the k-th position of `view`] in row-major order; 0 where masked.
// One view: the index moves by a stride per step, no division.
template <class T>
void gather_view(const View& v, const std::vector<T>& src, std::vector<T>& dst) {
  std::size_t nd = v.ndim();
  std::int64_t n = v.size();
  dst.assign(static_cast<std::size_t>(n), T(0));
  if (n == 0) return;
  std::int64_t inner = nd ? v.shape[nd - 1] : 1, st = nd ? v.strides[nd - 1] : 0;
  Dims pos = Dims::filled(nd, 0);
  std::int64_t base = v.offset;
  for (std::int64_t k = 0; k < n; k += inner) {
    T* out = dst.data() + k;
    if (v.mask.empty()) {
      const T* in = src.data() + base;
      for (std::int64_t j = 0; j < inner; ++j) out[j] = in[j * st];
    } else {
      bool row_valid = true;
      for (std::size_t d = 0; d + 1 < nd; ++d)
        row_valid = row_valid && pos[d] >= v.mask[d].first && pos[d] < v.mask[d].second;
      if (row_valid) {
        std::int64_t lo = nd ? v.mask[nd - 1].first : 0, hi = nd ? v.mask[nd - 1].second : 1;
        for (std::int64_t j = std::max<std::int64_t>(lo, 0); j < std::min(hi, inner); ++j)
          out[j] = src[base + j * st];
      }
    }
    for (std::size_t d = nd ? nd - 1 : 0; d-- > 0;) {  // next row: carry through the outer axes
      base += v.strides[d];
      if (++pos[d] < v.shape[d]) break;
      base -= v.strides[d] * v.shape[d];
      pos[d] = 0;
    }
  }
}

template <class T>
void gather_views(const std::vector<View>& views, const std::vector<T>& src, std::vector<T>& dst) {
  const Dims& shape = views.back().shape;
  dst.assign(static_cast<std::size_t>(prod(shape)), T(0));
  Dims pos = Dims::filled(shape.size(), 0);
  for (std::size_t k = 0; k < dst.size(); ++k) {
    if (auto idx = view_stack_index(views, pos)) dst[k] = src[static_cast<std::size_t>(*idx)];
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
}

struct Evaluator {
  Interpreted& dev;
  const std::vector<std::shared_ptr<RawBuffer>>& bufs;  // the kernel's buffers, output first
  std::unordered_map<const RawBuffer*, Values> host;    // each input buffer read once per kernel

  const Values& host_values(const RawBuffer& raw) {
    auto [it, fresh] = host.try_emplace(&raw);
    if (fresh) {
      it->second.dtype = raw.dtype;
      if (raw.dtype == dtypes::int64 || raw.dtype == dtypes::uint64) {  // doubles would round large values
        it->second.i.resize(raw.size);
        raw.copyout(it->second.i.data());
      } else if (dtypes::is_float(raw.dtype)) {
        it->second.f = read_as_double(raw);
      } else {
        std::vector<double> v = read_as_double(raw);
        it->second.i.assign(v.begin(), v.end());
      }
    }
    return it->second;
  }

  Values gather(const MemBuffer& leaf, const Pairs& region) {
    const Values& src = host_values(*bufs.at(leaf.index));
    ShapeTracker st = leaf.st;
    st.shrink(region);
    Values out{leaf.dtype, {}, {}};
    bool one = st.views().size() == 1;
    if (dtypes::is_float(leaf.dtype)) {
      one ? gather_view(st.views()[0], src.f, out.f) : gather_views(st.views(), src.f, out.f);
    } else {
      one ? gather_view(st.views()[0], src.i, out.i) : gather_views(st.views(), src.i, out.i);
    }
    return out;
  }

  Values apply(const LazyOp& op, const std::vector<Values>& srcs, const Dims& src_shape) {
    auto fxn = dev.fxn_for_op.find(op.op);
    if (fxn == dev.fxn_for_op.end())
      throw std::runtime_error("interpreter: no function for " + to_string(op.op));
    return fxn->second(op, srcs, src_shape);
  }

  // A reduce over `region` of its output: the source is read over the same region on kept axes
  // and whole on reduced ones; a source larger than a block is split, by output rows first, then
  // into partial reductions that are combined.
  Values reduce(const LazyOp& op, const Pairs& region) {
    Dims src_shape = ast_shape(op.src.at(0));
    const Dims& out_shape = std::get<Dims>(op.arg);
    Pairs src_region = region;
    for (std::size_t d = 0; d < region.size(); ++d)
      if (out_shape[d] == 1 && src_shape[d] != 1) src_region[d] = {0, src_shape[d]};
    if (volume(src_region) > kBlock) {
      if (auto d = split_axis(region))
        return split(region, *d, [&](const Pairs& r) { return reduce(op, r); });
      if (auto d = split_axis(src_region)) return partial(op, region, src_region, *d);
    }
    std::vector<Values> srcs;
    for (const LazySrc& s : op.src) srcs.push_back(eval(s, src_region));
    LazyOp local(op.op, {}, extent(region));
    return apply(local, srcs, extent(src_region));
  }

  // Halves of the reduced axis d reduced separately, then combined (sum, or max).
  Values partial(const LazyOp& op, const Pairs& region, const Pairs& src_region, std::size_t d) {
    std::int64_t mid = (src_region[d].first + src_region[d].second) / 2;
    Pairs lo = src_region, hi = src_region;
    lo[d].second = mid, hi[d].first = mid;
    auto half = [&](const Pairs& sr) {
      if (volume(sr) > kBlock)
        if (auto dd = split_axis(sr)) return partial(op, region, sr, *dd);
      std::vector<Values> srcs;
      for (const LazySrc& s : op.src) srcs.push_back(eval(s, sr));
      return apply(LazyOp(op.op, {}, extent(region)), srcs, extent(sr));
    };
    Values a = half(lo), b = half(hi);
    Op combine = op.op == ReduceOps::MAX ? Op(BinaryOps::MAX) : Op(BinaryOps::ADD);
    return apply(LazyOp(combine), {a, b}, extent(region));
  }

  template <class F>
  Values split(const Pairs& region, std::size_t d, F f) {
    std::int64_t mid = (region[d].first + region[d].second) / 2;
    Pairs lo = region, hi = region;
    lo[d].second = mid, hi[d].first = mid;
    Values out = f(lo);
    append(out, f(hi));
    return out;
  }

  Values eval(const LazySrc& s, const Pairs& region) {
    if (auto* b = std::get_if<MemBuffer>(&s)) return gather(*b, region);
    const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(s);
    if (op.op == LoadOps::CONST) {
      const ConstArg& c = std::get<ConstArg>(op.arg);
      auto n = static_cast<std::size_t>(volume(region));
      Values v{c.dtype, {}, {}};
      if (dtypes::is_float(c.dtype))
        v.f.assign(n, c.value);
      else if (c.dtype == dtypes::uint64 && c.value >= 0x1p63)  // past int64: the uint64's bits
        v.i.assign(n, static_cast<std::int64_t>(c.value >= 0x1p64 ? ~std::uint64_t{0}
                                                                  : static_cast<std::uint64_t>(c.value)));
      else
        v.i.assign(n, static_cast<std::int64_t>(c.value));
      return apply(LazyOp(UnaryOps::NOOP), {v}, extent(region));  // rounds to the dtype
    }
    if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) return reduce(op, region);
    std::vector<Values> srcs;
    for (const LazySrc& x : op.src) srcs.push_back(eval(x, region));
    return apply(op, srcs, extent(region));
  }

  // The root, in blocks of output rows.
  Values root(const LazySrc& s, const Pairs& region) {
    if (volume(region) > kBlock)
      if (auto d = split_axis(region)) return split(region, *d, [&](const Pairs& r) { return root(s, r); });
    return eval(s, region);
  }
};

}  // namespace

void Interpreted::exec_ast(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  RawBuffer& output = *bufs.at(0);
  auto t0 = std::chrono::steady_clock::now();
  Evaluator ev{*this, bufs, {}};
  auto node = std::make_shared<LazyOp>(ast);
  Values v = ev.root(node, full_region(ast_shape(node)));
  if (v.size() != output.size)
    throw std::runtime_error(detail::cat("interpreter: kernel made ", std::to_string(v.size()),
                                         " values for a buffer of ", std::to_string(output.size)));
  if ((output.dtype == dtypes::int64 || output.dtype == dtypes::uint64) && !dtypes::is_float(v.dtype)) {
    output.copyin(v.i.data());
  } else {
    std::vector<double> d = dtypes::is_float(v.dtype) ? v.f : std::vector<double>(v.i.begin(), v.i.end());
    write_from_double(output, d);
  }
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GlobalCounters::time_sum += t;
  GlobalCounters::kernel_count += 1;
  GlobalCounters::global_mem += static_cast<std::int64_t>(output.nbytes());
  if (getenv_int("DEBUG") >= 2)
    print_kernel_line("interpret " + to_string(ast.op), bufs.size(), t, 0,
                      static_cast<std::int64_t>(output.nbytes()));
}

}  // namespace metagrad
