#include "metagrad/backends/cuda_gemm.hpp"

#include <sstream>

#include "metagrad/helpers.hpp"

namespace metagrad {

namespace {

constexpr int kThreads = 256, kDepth = 8;

// Where element e (0 .. tile x 8) of a slice sits: A's row i and depth ka, B's depth kb and column
// j, mapped so that neighbouring threads read neighbouring addresses of each operand's contiguous
// axis. The loads and the stores into shared memory both use it.
struct SliceMap {
  std::string ai, ak, bk, bj;
};
SliceMap slice_map(const codegen::GemmPlan& p, int tile) {
  std::string t = std::to_string(tile);
  bool a_depth_fast = p.acs == 1, b_depth_fast = p.bcs != 1 && p.brs == 1;
  return {a_depth_fast ? "e >> 3" : "e % " + t, a_depth_fast ? "e & 7" : "e / " + t,
          b_depth_fast ? "e & 7" : "e / " + t, b_depth_fast ? "e >> 3" : "e % " + t};
}

// The loads of one 8-deep slice starting at depth `k0` (an expression) into registers: each thread
// `loads` elements of A's T x 8 tile and of B's 8 x T tile.
std::string slice_loads(const codegen::GemmPlan& p, int tile, int loads, const std::string& k0) {
  SliceMap m = slice_map(p, tile);
  std::ostringstream o;
  o << "    #pragma unroll\n    for (int q = 0; q < " << loads << "; ++q) {\n"
    << "      const int e = t + q * " << kThreads << ", i = " << m.ai << ", ka = " << m.ak
    << ", kb = " << m.bk << ", j = " << m.bj << ", ks = " << k0 << ";\n"
    << "      ra[q] = m0 + i < M && ks + ka < kend ? a[(long long)(m0 + i) * " << p.ars
    << "LL + (long long)(ks + ka) * " << p.acs << "LL] : 0.f;\n"
    << "      rb[q] = ks + kb < kend && n0 + j < N ? b[(long long)(ks + kb) * " << p.brs
    << "LL + (long long)(n0 + j) * " << p.bcs << "LL] : 0.f;\n"
    << "    }\n";
  return o.str();
}

// The batch index z's digits (innermost axis first), each stepping the operands' pointers a and b
// (`operands`) and c (`result`) by its strides.
std::string batch_walk(const codegen::GemmPlan& p, bool operands, bool result) {
  std::ostringstream o;
  for (std::size_t d = p.batch.size(); d-- > 0;) {
    const auto& l = p.batch[d];
    o << "  at = z % " << l.size << "; z /= " << l.size << ";";
    if (operands) o << " a += at * " << l.a << "LL; b += at * " << l.b << "LL;";
    if (result) o << " c += at * " << l.c << "LL;";
    o << "\n";
  }
  return o.str();
}

// Reads of a thread's rows (or columns) of one depth of the shared tile `s` into `v`: two runs of
// `half` (4, 2 or 1, one vector load each), at its offset in each half of the tile.
std::string fragment(const char* v, const char* s, const char* id, int tile, int half) {
  std::string vec = half == 4 ? "float4" : half == 2 ? "float2" : "float";
  std::ostringstream o;
  for (int part = 0; part < 2; ++part) {
    o << "      { const " << vec << " x = *(const " << vec << "*)&" << s << "[kk][" << (part ? tile / 2 : 0)
      << " + " << id << " * " << half << "]; ";
    const char* f[] = {".x", ".y", ".z", ".w"};
    for (int r = 0; r < half; ++r)
      o << v << "[" << part * half + r << "] = x" << (half > 1 ? f[r] : "") << "; ";
    o << "}\n";
  }
  return o.str();
}

// C for an epilogue (slot 0), gathered operands (slots 1, 2) and the parts of a split product
// (slot 3), kept by the program: launches are ordered on the device's stream, so one buffer per
// slot serves every call.
class CudaGemmProgram final : public Program {
 public:
  // `kernels`: the product, then (split along the depth) the sum of its parts.
  CudaGemmProgram(codegen::GemmPlan plan, std::vector<ASTRunner> kernels, GemmParts parts,
                  Compiled::BufferFactory alloc)
      : plan_(std::move(plan)),
        kernels_(std::move(kernels)),
        parts_(std::move(parts)),
        alloc_(std::move(alloc)) {}
  std::vector<const std::string*> parts() const override {
    std::vector<const std::string*> out = parts_of(parts_.epilogue, parts_.packs);
    for (const ASTRunner& k : kernels_) out.push_back(&k.prg);
    return out;
  }

  void operator()(const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                  const std::vector<RawBuffer*>& bufs) override {
    for (std::size_t i = 0; i < parts_.packs.size(); ++i)
      parts_.packs[i].launch({scratch(1 + i, prod(plan_.packs[i].shape)), bufs.at(plan_.packs[i].buf)});
    auto operand = [&](std::size_t buf, int pack) {
      return pack < 0 ? bufs.at(buf) : scratch(1 + static_cast<std::size_t>(pack), 0);
    };
    RawBuffer* c = parts_.epilogue ? scratch(0, parts_.epilogue->c_size) : bufs.at(0);
    if (kernels_.size() == 1) {
      kernels_[0].launch({c, operand(plan_.a, plan_.a_pack), operand(plan_.b, plan_.b_pack)});
    } else {
      std::int64_t parts = kernels_[0].global_size[2];  // batch x split
      RawBuffer* partial = scratch(3, parts * plan_.m * plan_.n);
      kernels_[0].launch({partial, operand(plan_.a, plan_.a_pack), operand(plan_.b, plan_.b_pack)});
      kernels_[1].launch({c, partial});
    }
    if (!parts_.epilogue) return;
    std::vector<RawBuffer*> epi{bufs.at(0)};
    for (int i : parts_.epilogue->inputs) epi.push_back(i < 0 ? c : bufs.at(static_cast<std::size_t>(i)));
    parts_.epilogue->runner.launch(epi);
  }

 private:
  RawBuffer* scratch(std::size_t slot, std::int64_t elements) {
    if (scratch_.size() <= slot) scratch_.resize(slot + 1);
    if (!scratch_[slot]) scratch_[slot] = alloc_(static_cast<std::size_t>(elements), dtypes::float32);
    return scratch_[slot].get();
  }
  codegen::GemmPlan plan_;
  std::vector<ASTRunner> kernels_;
  GemmParts parts_;
  Compiled::BufferFactory alloc_;
  std::vector<std::shared_ptr<RawBuffer>> scratch_;
};

std::int64_t blocks(std::int64_t n, int tile) { return (n + tile - 1) / tile; }

}  // namespace

std::string cuda_sgemm_source(const std::string& name, const codegen::GemmPlan& p, CudaSgemmShape shape) {
  const int tile = shape.tile, r = tile / 16, half = r / 2, loads = tile * kDepth / kThreads;
  const bool split = shape.split > 1;
  std::ostringstream o;
  o << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << name
    << "(float* __restrict__ c, const float* __restrict__ a, const float* __restrict__ b) {\n"
    << "  const int M = " << p.m << ", N = " << p.n << ", K = " << p.k << ", kbeg = blockIdx.z % "
    << shape.split << " * " << shape.depth << ", kend = min(K, kbeg + " << shape.depth << ");\n"
    << "  a += " << p.a_offset << "LL; b += " << p.b_offset << "LL; ";
  // Split along the depth: each part's partial C in its own M x N slab (blockIdx.z), summed by
  // cuda_sgemm_sum_source's kernel.
  if (split)
    o << "c += (long long)blockIdx.z * " << p.m * p.n << "LL;\n";
  else
    o << "c += " << p.c_offset << "LL;\n";
  if (!p.batch.empty()) o << "  long long z = blockIdx.z / " << shape.split << ", at;\n";
  o << batch_walk(p, true, !split);
  o << "  __shared__ __align__(16) float as[" << kDepth << "][" << tile + 4 << "], bs[" << kDepth << "]["
    << tile + 4 << "];\n"
    << "  const int t = threadIdx.x, tx = t % 16, ty = t / 16, m0 = blockIdx.y * " << tile
    << ", n0 = blockIdx.x * " << tile << ";\n"
    << "  float acc[" << r << "][" << r << "], ra[" << loads << "], rb[" << loads << "];\n"
    << "  #pragma unroll\n  for (int i = 0; i < " << r
    << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << r << "; ++j) acc[i][j] = 0.f;\n"
    << "  {\n"
    << slice_loads(p, tile, loads, "kbeg") << "  }\n"
    << "  for (int k0 = kbeg; k0 < kend; k0 += " << kDepth << ") {\n"
    << "    #pragma unroll\n    for (int q = 0; q < " << loads << "; ++q) {\n"
    << "      const int e = t + q * " << kThreads << ";\n";
  const SliceMap m = slice_map(p, tile);
  o << "      as[" << m.ak << "][" << m.ai << "] = ra[q];\n"
    << "      bs[" << m.bk << "][" << m.bj << "] = rb[q];\n";
  o << "    }\n    __syncthreads();\n"
    << "    if (k0 + " << kDepth << " < kend) {\n"
    << slice_loads(p, tile, loads, "k0 + " + std::to_string(kDepth)) << "    }\n"
    << "    #pragma unroll\n    for (int kk = 0; kk < " << kDepth << "; ++kk) {\n"
    << "      float av[" << r << "], bv[" << r << "];\n"
    << fragment("av", "as", "ty", tile, half) << fragment("bv", "bs", "tx", tile, half)
    << "      #pragma unroll\n      for (int i = 0; i < " << r << "; ++i)\n        #pragma unroll\n"
    << "        for (int j = 0; j < " << r << "; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);\n"
    << "    }\n    __syncthreads();\n  }\n"
    << "  #pragma unroll\n  for (int i = 0; i < " << r << "; ++i) {\n"
    << "    const int row = m0 + (i < " << half << " ? ty * " << half << " + i : " << tile / 2 << " + ty * "
    << half << " + i - " << half << ");\n"
    << "    if (row >= M) continue;\n"
    << "    #pragma unroll\n    for (int j = 0; j < " << r << "; ++j) {\n"
    << "      const int col = n0 + (j < " << half << " ? tx * " << half << " + j : " << tile / 2 << " + tx * "
    << half << " + j - " << half << ");\n"
    << "      if (col < N) c[(long long)row * " << (split ? p.n : p.ldc) << "LL + col] = acc[i][j];\n"
    << "    }\n  }\n}\n";
  return o.str();
}

std::string cuda_sgemm_sum_source(const std::string& name, const codegen::GemmPlan& p, CudaSgemmShape shape) {
  const std::int64_t mn = p.m * p.n;
  std::ostringstream o;
  o << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << name
    << "(float* __restrict__ c, const float* __restrict__ part) {\n"
    << "  const long long idx = blockIdx.x * " << kThreads << "LL + threadIdx.x;\n"
    << "  if (idx >= " << mn * p.batch_count() << "LL) return;\n"
    << "  long long z = idx / " << mn << "LL, ij = idx % " << mn << "LL, at;\n"
    << "  const float* q = part + z * " << shape.split * mn << "LL + ij;\n"
    << "  float s = 0.f;\n"
    << "  for (int t = 0; t < " << shape.split << "; ++t) s += q[t * " << mn << "LL];\n"
    << "  c += " << p.c_offset << "LL;\n"
    << batch_walk(p, false, true);
  o << "  (void)at;\n  c[ij / " << p.n << " * " << p.ldc << "LL + ij % " << p.n << "] = s;\n}\n";
  return o.str();
}

CudaSgemmShape cuda_sgemm_shape(const codegen::GemmPlan& p, int multiprocessors) {
  CudaSgemmShape shape;
  shape.depth = std::max<std::int64_t>(p.k, 1);
  // The largest tile that gives every multiprocessor a block (fewer threads' worth of reuse, but
  // an idle multiprocessor does nothing at all).
  for (int tile : {128, 64, 32}) {
    shape.tile = tile;
    if (blocks(p.m, tile) * blocks(p.n, tile) * p.batch_count() >= multiprocessors) return shape;
  }
  // Too few tiles still (a weight gradient: 128 x 128 over 2048 tokens): the depth is split too,
  // in parts of at least 128.
  std::int64_t tiles = blocks(p.m, 32) * blocks(p.n, 32) * p.batch_count();
  std::int64_t parts =
      std::min<std::int64_t>({p.k / 128, (multiprocessors + tiles - 1) / tiles, 64, 65535 / p.batch_count()});
  if (parts >= 2) {
    shape.depth = (p.k + parts - 1) / parts;
    shape.depth = (shape.depth + kDepth - 1) / kDepth * kDepth;
    shape.split = static_cast<int>((p.k + shape.depth - 1) / shape.depth);
  }
  return shape;
}

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> cuda_sgemm_launch(const codegen::GemmPlan& p,
                                                                                  CudaSgemmShape shape) {
  return {{blocks(p.n, shape.tile) * kThreads, blocks(p.m, shape.tile), p.batch_count() * shape.split},
          {kThreads, 1, 1}};
}

bool cuda_sgemm_fits(const codegen::GemmPlan& p) {
  // Worth the tiles (a dot product or a matrix-vector product is a reduce), and within CUDA's
  // grid whatever the shape: 65535 blocks along y and z.
  return p.m >= 32 && p.n >= 32 && blocks(p.m, 64) <= 65535 && p.batch_count() <= 65535;
}

ASTRunner cuda_gemm_runner(const codegen::Kernel& k, const codegen::GemmPlan& p, int multiprocessors,
                           const RunnerFn& lower, const GemmCompile& compile,
                           const Compiled::BufferFactory& alloc) {
  CudaSgemmShape shape = cuda_sgemm_shape(p, multiprocessors);
  std::vector<ASTRunner> kernels(shape.split > 1 ? 2 : 1);
  ASTRunner& product = kernels[0];
  product.name = gemm_name(p);
  product.prg = cuda_sgemm_source(product.name, p, shape);
  std::tie(product.global_size, product.local_size) = cuda_sgemm_launch(p, shape);
  product.clprg = compile(product.name, product.prg);
  if (shape.split > 1) {
    ASTRunner& sum = kernels[1];
    sum.name = product.name + "_sum";
    sum.prg = cuda_sgemm_sum_source(sum.name, p, shape);
    sum.global_size = {blocks(p.m * p.n * p.batch_count(), kThreads) * kThreads}, sum.local_size = {kThreads};
    sum.clprg = compile(sum.name, sum.prg);
  }
  ASTRunner r;  // the kernel as DEBUG and the caches see it: the product with its parts
  r.name = product.name;
  r.op_estimate = k.op_estimate;
  for (const ASTRunner& x : kernels) r.prg += x.prg;
  GemmParts parts = gemm_parts(k, p, lower, compile);
  r.prg += parts.source;
  r.clprg = std::make_shared<CudaGemmProgram>(p, std::move(kernels), std::move(parts), alloc);
  r.clprg->op_estimate = r.op_estimate;
  return r;
}

}  // namespace metagrad
