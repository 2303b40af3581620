// aot::Generator end to end: functions of random graphs are emitted as C, compiled with the system
// C compiler into a shared object, loaded, called, and compared with the same graph on the CPU
// reference device; scalars by value, in-place updates, constants (inf and NaN bit-exact),
// integer and bool buffers; and the errors a generator gets for bad functions.
#include <dlfcn.h>

#include <unistd.h>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "metagrad/aot.hpp"
#include "metagrad/cpu/caches.hpp"
#include "metagrad/cpu/gemm.hpp"
#include "metagrad/device/gemm.hpp"

using namespace metagrad;
using Catch::Contains;

namespace {

// Writes the generator's files into a fresh directory, compiles NAME.c into a shared object and
// loads it; the object is unloaded on destruction.
struct CLibrary {
  void* lib = nullptr;
  explicit CLibrary(const aot::Generator& g, const std::string& name, const std::string& flags = "") {
    auto dir = std::filesystem::temp_directory_path() /
               ("metagrad_aot_test_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(dir);
    g.write(dir.string());
    std::string so = (dir / (name + ".so")).string();
    std::string cmd = "cc -O2 -fno-math-errno -shared -fPIC " + flags + " " + (dir / (name + ".c")).string() +
                      " -o " + so + " -lm";
    REQUIRE(std::system(cmd.c_str()) == 0);
    lib = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib);
    std::filesystem::remove_all(dir);
  }
  ~CLibrary() { ::dlclose(lib); }
  template <class F>
  F* fn(const char* name) const {
    void* f = ::dlsym(lib, name);
    REQUIRE(f);
    return reinterpret_cast<F*>(f);
  }
};

std::vector<float> randn(std::mt19937& rng, std::int64_t n) {
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double margin = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i]))
      REQUIRE(std::isnan(got[i]));
    else
      REQUIRE(got[i] == Approx(want[i]).margin(margin).epsilon(1e-4));
  }
}

// The graph f builds from (a, b, s), on CLANG for the generator and on CPU for the reference.
using Graph = Tensor (*)(const Tensor& a, const Tensor& b, const Tensor& s);
const Graph kGraphs[] = {
    [](const Tensor& a, const Tensor& b, const Tensor& s) { return (a * b + s).relu().exp() - b.sigmoid(); },
    [](const Tensor& a, const Tensor& b, const Tensor& s) { return (a.matmul(b.transpose()) * s).softmax(); },
    [](const Tensor& a, const Tensor& b, const Tensor& s) { return a.sum(1, true) * b.max(0) + s; },
    [](const Tensor& a, const Tensor& b, const Tensor&) {
      return a.permute({1, 0}).pad({{1, 0}, {0, 2}}).flip(0) + b.sum();
    },
    [](const Tensor& a, const Tensor& b, const Tensor& s) {
      return a.lt(b).where(a, s) + (a >= 0).cast(dtypes::float32);
    },
    [](const Tensor& a, const Tensor& b, const Tensor&) {
      return (a - b).abs().log_softmax(0).reshape({-1}).cumsum();
    },
};

// The vector widths the C compiler can target on this CPU, each with its flags and the runtime's
// kernel of that width: SSE (the compiler's default), then AVX2 and AVX-512 where the CPU has them.
std::vector<std::pair<std::string, gemm::Isa>> c_targets() {
  std::vector<std::pair<std::string, gemm::Isa>> t{{"", gemm::Isa::generic}};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    t.emplace_back("-mavx2 -mfma", gemm::Isa::avx2);
  if (__builtin_cpu_supports("avx512f")) t.emplace_back("-mavx512f -mfma", gemm::Isa::avx512);
  return t;
}

}  // namespace

TEST_CASE("AOT: functions of random graphs compiled as C equal the CPU device", "[aot]") {
  std::mt19937 rng(3);
  for (std::size_t gi = 0; gi < std::size(kGraphs); ++gi) {
    INFO("graph " << gi);
    aot::Generator g("g" + std::to_string(gi));
    Tensor a = Tensor::empty({5, 6}, {.device = "CLANG"}), b = Tensor::empty({5, 6}, {.device = "CLANG"}),
           s = Tensor::empty({}, {.device = "CLANG"});
    Tensor out = kGraphs[gi](a, b, s);
    g.function("f", {{"a", a}, {"b", b}, {"s", s}}, {{"out", out}});
    CLibrary lib(g, "g" + std::to_string(gi));
    auto* f = lib.fn<void(const float*, const float*, float, float*)>("f");
    lib.fn<void(int)>(("g" + std::to_string(gi) + "_set_threads").c_str())(2);  // every library has it
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<float> av = randn(rng, 30), bv = randn(rng, 30), got(static_cast<std::size_t>(out.numel()));
      float sv = randn(rng, 1)[0];
      f(av.data(), bv.data(), sv, got.data());
      Tensor want = kGraphs[gi](Tensor(av, {5, 6}, {.device = "CPU"}), Tensor(bv, {5, 6}, {.device = "CPU"}),
                                Tensor(std::vector<float>{sv}, {}, {.device = "CPU"}));
      check_close(got, want.to_vector<float>());
    }
  }
}

TEST_CASE("AOT: contractions run the library's C GEMM at every vector width and equal the CPU device",
          "[aot]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> dim(1, 70);
  // Each form a path of the C GEMM: a @ b; a^T @ b^T with a bias and ReLU after (an epilogue); a
  // batch of 3; k in equal steps past KC, m past an MC block and B packed whole rows at a time; one
  // strip of A's rows (B read in place but for its last strip); A's rows 4 KiB apart (copied); a
  // transposed A of many strips (packed in groups); one row and two of a transposed A (B's rows
  // summed, past a run of 1024 columns and a step of 4 k); one block of A's rows reading B in place,
  // its rows 4 KiB or 4000 bytes apart; a B larger than CacheSizes::from_memory() (in place, each
  // tile asking for the next strip). B is passed off a 64-byte line by a different amount in each
  // form: where its rows are 4 KiB apart and k long, the first columns are a product of their own.
  struct Form {
    std::int64_t m, n, k;
    bool ta, tb;
    std::int64_t batch;
  };
  const Form forms[] = {{dim(rng), dim(rng), dim(rng), false, false, 0},
                        {dim(rng), dim(rng), dim(rng), true, true, 0},
                        {dim(rng), dim(rng), dim(rng), false, false, 3},
                        {130, 300, 1100, false, false, 0},
                        {5, 333, 40, false, false, 0},
                        {20, 37, 1024, false, false, 0},
                        {100, 20, 30, true, false, 0},
                        {1, 1100, 45, false, false, 0},
                        {2, 30, 7, true, false, 0},
                        {12, 1024, 300, false, false, 0},
                        {9, 1000, 600, false, false, 0},
                        {6, 1024, cpu::host_caches().from_memory() / 4096 + 1, false, false, 0}};
  for (std::size_t form = 0; form < std::size(forms); ++form) {
    const auto [m, n, k, ta, tb, batch] = forms[form];
    INFO("form " << form << ": m " << m << ", n " << n << ", k " << k);
    Dims ad = ta ? Dims{k, m} : Dims{m, k}, bd = tb ? Dims{n, k} : Dims{k, n};
    if (batch) ad.insert(0, batch), bd.insert(0, batch);
    auto graph = [&](const Tensor& a, const Tensor& b, const Tensor& bias) {
      Tensor p = (ta ? a.transpose() : a).matmul(tb ? b.transpose() : b) + bias;
      return ta && tb ? p.relu() : p;
    };
    const std::string name = "mm" + std::to_string(form);
    aot::Generator g(name);
    Tensor a = Tensor::empty(ad, {.device = "CLANG"}), b = Tensor::empty(bd, {.device = "CLANG"}),
           bias = Tensor::empty({n}, {.device = "CLANG"});
    Tensor out = graph(a, b, bias);
    g.function("f", {{"a", a}, {"b", b}, {"bias", bias}}, {{"out", out}});
    REQUIRE_THAT(g.source(), Contains(name + "_sgemm(") && !Contains(" < 0; "));
    std::vector<float> av = randn(rng, prod(ad)), bv = randn(rng, prod(bd)), biasv = randn(rng, n);
    Tensor want = graph(Tensor(av, ad, {.device = "CPU"}), Tensor(bv, bd, {.device = "CPU"}),
                        Tensor(biasv, {n}, {.device = "CPU"}));
    std::vector<float> bbuf(bv.size() + 16);
    float* bat = bbuf.data() + (16 - reinterpret_cast<std::uintptr_t>(bbuf.data()) / 4 % 16 + form * 5) % 16;
    std::copy(bv.begin(), bv.end(), bat);
    for (const auto& [flags, isa] : c_targets()) {
      INFO("compiled with `" << flags << "`, B " << reinterpret_cast<std::uintptr_t>(bat) % 64
                             << " bytes off a line");
      CLibrary lib(g, name, flags);
      std::vector<float> got(static_cast<std::size_t>(out.numel()));
      lib.fn<void(const float*, const float*, const float*, float*)>("f")(av.data(), bat, biasv.data(),
                                                                          got.data());
      check_close(got, want.to_vector<float>(), 1e-6 * static_cast<double>(k));  // sums in other orders
    }
  }
}

TEST_CASE("AOT: convolutions (their windows gathered, then the C GEMM) equal the CPU device", "[aot]") {
  // A padded 3x3 conv with a bias and ReLU (an epilogue), a batch of 2 in 2 groups with stride 2 and
  // dilation 2, and one whose device kernel gathers its windows in the GEMM's packing
  // (METAGRAD_GEMM_WINDOW=1): the library copies them first all the same.
  struct Form {
    Dims x, w;
    std::int64_t groups, stride, dilation, pad;
    const char* window;
  };
  const Form forms[] = {{{1, 3, 10, 10}, {8, 3, 3, 3}, 1, 1, 1, 1, "0"},
                        {{2, 4, 11, 9}, {6, 2, 3, 3}, 2, 2, 2, 2, "0"},
                        {{1, 5, 9, 12}, {7, 5, 3, 3}, 1, 1, 1, 1, "1"}};
  std::mt19937 rng(5);
  for (std::size_t form = 0; form < std::size(forms); ++form) {
    const Form& f = forms[form];
    INFO("form " << form);
    const char* saved = std::getenv("METAGRAD_GEMM_WINDOW");
    const std::string before = saved ? saved : "";
    setenv("METAGRAD_GEMM_WINDOW", f.window, 1);
    const std::int64_t cout = f.w[0];
    auto graph = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
      return x.conv2d(w, b, f.groups, {f.stride}, {f.dilation}, {f.pad}).relu();
    };
    const std::string name = "conv" + std::to_string(form);
    aot::Generator g(name);
    Tensor x = Tensor::empty(f.x, {.device = "CLANG"}), w = Tensor::empty(f.w, {.device = "CLANG"}),
           b = Tensor::empty({cout}, {.device = "CLANG"});
    Tensor out = graph(x, w, b);
    g.function("f", {{"x", x}, {"w", w}, {"b", b}}, {{"out", out}});
    saved ? (void)setenv("METAGRAD_GEMM_WINDOW", before.c_str(), 1) : (void)unsetenv("METAGRAD_GEMM_WINDOW");
    REQUIRE_THAT(g.source(), Contains(name + "_sgemm("));
    std::vector<float> xv = randn(rng, prod(f.x)), wv = randn(rng, prod(f.w)), bv = randn(rng, cout);
    Tensor want = graph(Tensor(xv, f.x, {.device = "CPU"}), Tensor(wv, f.w, {.device = "CPU"}),
                        Tensor(bv, {cout}, {.device = "CPU"}));
    CLibrary lib(g, name);
    std::vector<float> got(static_cast<std::size_t>(out.numel()));
    lib.fn<void(const float*, const float*, const float*, float*)>("f")(xv.data(), wv.data(), bv.data(),
                                                                        got.data());
    check_close(got, want.to_vector<float>(), 1e-4);
  }
}

// NAME_set_threads splits a product over the library's threads (started on first use, then kept): by C's row
// strips (m a good part of n, or A transposed and packed) or its column strips (A's rows read in place by
// every part, even 4 KiB apart). Each element is the same sum whatever the split, so 2 and 3 threads must
// give one thread's result bit for bit, and one thread the CPU device's. Every form has at least 2^22
// multiply-adds a part at 3 threads, the library's threshold; the library is compiled with a
// pthread_create that counts the threads started, so a split not taken fails too, and so does a
// team not kept between calls.
TEST_CASE("AOT: a product split over threads is bitwise the one-thread product", "[aot]") {
  std::mt19937 rng(5);
  const auto counter =
      std::filesystem::temp_directory_path() / ("metagrad_aot_threads_" + std::to_string(::getpid()) + ".h");
  std::ofstream(counter)
      << "#include <pthread.h>\n"
         "static int started;\n"
         "static int counted_create(pthread_t* t, const pthread_attr_t* at, void* (*f)(void*), "
         "void* x) {\n  ++started;\n  return pthread_create(t, at, f, x);\n}\n"
         "int threads_started(void) { return started; }\n"
         "#define pthread_create counted_create\n";
  struct Form {
    std::int64_t m, n, k;
    bool ta;
  };
  const Form forms[] = {{300, 203, 300, false},    // rows
                        {130, 600, 1100, false},   // columns, k in two steps
                        {100, 330, 600, true},     // rows of a packed A
                        {20, 1500, 1024, false}};  // columns, A's rows 4 KiB apart
  for (std::size_t form = 0; form < std::size(forms); ++form) {
    const auto [m, n, k, ta] = forms[form];
    INFO("form " << form << ": m " << m << ", n " << n << ", k " << k);
    REQUIRE(m * n * k >= 3 * (std::int64_t{1} << 22));
    const Dims ad = ta ? Dims{k, m} : Dims{m, k}, bd{k, n};
    const std::string name = "thr" + std::to_string(form);
    aot::Generator g(name);
    Tensor a = Tensor::empty(ad, {.device = "CLANG"}), b = Tensor::empty(bd, {.device = "CLANG"});
    g.function("f", {{"a", a}, {"b", b}}, {{"out", (ta ? a.transpose() : a).matmul(b)}});
    std::vector<float> av = randn(rng, prod(ad)), bv = randn(rng, prod(bd));
    const Tensor at(av, ad, {.device = "CPU"});
    const std::vector<float> want =
        (ta ? at.transpose() : at).matmul(Tensor(bv, bd, {.device = "CPU"})).to_vector<float>();
    for (const auto& [flags, isa] : c_targets()) {
      INFO("compiled with `" << flags << "`");
      CLibrary lib(g, name, flags + " -include " + counter.string());
      auto* f = lib.fn<void(const float*, const float*, float*)>("f");
      auto* set_threads = lib.fn<void(int)>((name + "_set_threads").c_str());
      auto* started = lib.fn<int()>("threads_started");
      std::vector<float> one(static_cast<std::size_t>(m * n));
      f(av.data(), bv.data(), one.data());
      REQUIRE(started() == 0);  // one thread until asked
      check_close(one, want, 1e-6 * static_cast<double>(k));
      for (int threads : {2, 3}) {
        INFO(threads << " threads");
        set_threads(threads);
        std::vector<float> got(one.size(), NAN);
        f(av.data(), bv.data(), got.data());
        REQUIRE(started() == threads - 1);  // the team grows to the threads asked for
        REQUIRE(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)) == 0);
        std::fill(got.begin(), got.end(), NAN);
        f(av.data(), bv.data(), got.data());
        REQUIRE(started() == threads - 1);  // and is kept
        REQUIRE(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)) == 0);
      }
    }
  }
  std::filesystem::remove(counter);
}

// Kernels of 2^18 ops or more are split over the library's threads as the CLANG device splits
// them (their range in slices): an elementwise kernel and a reduction's rows, random sizes, give one
// thread's bits at 2 and 3 threads, and start the threads asked for, once. A library without
// products has the team too.
TEST_CASE("AOT: large kernels split over the library's threads", "[aot]") {
  std::mt19937 rng(11);
  const auto counter =
      std::filesystem::temp_directory_path() / ("metagrad_aot_split_" + std::to_string(::getpid()) + ".h");
  std::ofstream(counter)
      << "#include <pthread.h>\n"
         "static int started;\n"
         "static int counted_create(pthread_t* t, const pthread_attr_t* at, void* (*f)(void*), "
         "void* x) {\n  ++started;\n  return pthread_create(t, at, f, x);\n}\n"
         "int threads_started(void) { return started; }\n"
         "#define pthread_create counted_create\n";
  for (int trial = 0; trial < 2; ++trial) {
    const std::int64_t rows = 300 + std::uniform_int_distribution<int>(0, 300)(rng),
                       cols = 700 + std::uniform_int_distribution<int>(0, 700)(rng);
    INFO("rows " << rows << ", cols " << cols);
    const std::string name = "spl" + std::to_string(trial);
    aot::Generator g(name);
    Tensor a = Tensor::empty({rows, cols}, {.device = "CLANG"}),
           b = Tensor::empty({rows, cols}, {.device = "CLANG"});
    Tensor e = (a * 2.f + b).exp() - a * b;
    g.function("f", {{"a", a}, {"b", b}}, {{"e", e}, {"s", e.sum(1)}});
    std::vector<float> av = randn(rng, rows * cols), bv = randn(rng, rows * cols);
    Tensor ac(av, {rows, cols}, {.device = "CPU"}), bc(bv, {rows, cols}, {.device = "CPU"});
    Tensor ec = (ac * 2.f + bc).exp() - ac * bc;
    CLibrary lib(g, name, "-include " + counter.string());
    auto* f = lib.fn<int(const float*, const float*, float*, float*)>("f");
    auto* set_threads = lib.fn<void(int)>((name + "_set_threads").c_str());
    auto* started = lib.fn<int()>("threads_started");
    std::vector<float> e1(static_cast<std::size_t>(rows * cols)), s1(static_cast<std::size_t>(rows));
    f(av.data(), bv.data(), e1.data(), s1.data());
    REQUIRE(started() == 0);
    check_close(e1, ec.to_vector<float>(), 1e-5);
    check_close(s1, ec.sum(1).to_vector<float>(), 1e-4);
    for (int threads : {2, 3}) {
      INFO(threads << " threads");
      set_threads(threads);
      for (int call = 0; call < 2; ++call) {
        std::vector<float> e2(e1.size(), NAN), s2(s1.size(), NAN);
        f(av.data(), bv.data(), e2.data(), s2.data());
        REQUIRE(started() == threads - 1);
        REQUIRE(std::memcmp(e2.data(), e1.data(), e1.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(s2.data(), s1.data(), s1.size() * sizeof(float)) == 0);
      }
    }
  }
  std::filesystem::remove(counter);
}

// A host op on what the inputs compute (the fused attention) cannot become C: the generator says so,
// rather than freezing the one run's result into a constant; composed, the same graph compiles.
TEST_CASE("AOT: a host op reading the inputs is an error, not a constant", "[aot]") {
  {
    aot::Generator g("hostop");
    Tensor q = Tensor::empty({1, 2, 8, 4}, {.device = "CLANG"});
    Tensor o = q.scaled_dot_product_attention(q * 2.f, q, {}, 0.0, true);
    REQUIRE_THROWS_WITH(g.function("f", {{"q", q}}, {{"o", o}}),
                        Contains("reads what the inputs compute") && Contains("METAGRAD_FUSED_ATTENTION=0"));
  }
  ::setenv("METAGRAD_FUSED_ATTENTION", "0", 1);
  aot::Generator g("hostop2");
  Tensor q = Tensor::empty({1, 2, 8, 4}, {.device = "CLANG"});
  Tensor o = q.scaled_dot_product_attention(q * 2.f, q, {}, 0.0, true);
  REQUIRE_NOTHROW(g.function("f", {{"q", q}}, {{"o", o}}));
  ::unsetenv("METAGRAD_FUSED_ATTENTION");
}

TEST_CASE("AOT: updates in place, several outputs, integer inputs and constants", "[aot]") {
  aot::Generator g("upd");
  Tensor w = Tensor::empty({3, 4}, {.device = "CLANG"}),
         idx = Tensor::empty({3}, {.device = "CLANG", .dtype = dtypes::int32});
  // A constant with inf and NaN, not an input: emitted bit-exact into the C source.
  Tensor c(std::vector<float>{INFINITY, -INFINITY, NAN, 0.1f}, {4}, {.device = "CLANG"});
  Tensor picked =
      idx.reshape({3, 1}).eq(Tensor::arange(4, {.device = "CLANG", .dtype = dtypes::int32}).reshape({1, 4}));
  Tensor rs = w.sum(1);  // two outputs of one buffer: the second is a copy of the first
  g.function("step", {{"w", w}, {"idx", idx}},
             {{"rowsum", rs}, {"shifted", w + c}, {"onehot", picked.cast(dtypes::float32)}, {"again", rs}},
             {{"w", w * 2 + 1}});
  REQUIRE_THAT(g.header(), Contains("int step(float* w, const int32_t* idx, float* rowsum, float* shifted, "
                                    "float* onehot, float* again)"));
  CLibrary lib(g, "upd");
  auto* step = lib.fn<void(float*, const std::int32_t*, float*, float*, float*, float*)>("step");
  std::vector<float> wv(12), rowsum(3), shifted(12), onehot(12), again(3);
  for (int i = 0; i < 12; ++i) wv[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.5f - 2;
  std::vector<float> old = wv;
  std::int32_t iv[3] = {2, 0, 3};
  step(wv.data(), iv, rowsum.data(), shifted.data(), onehot.data(), again.data());
  for (int r = 0; r < 3; ++r) {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      std::size_t at = static_cast<std::size_t>(r * 4 + k);
      float o = old[at];
      sum += o;
      REQUIRE(wv[at] == o * 2 + 1);  // the update reads the old value
      REQUIRE(onehot[at] == (k == iv[r] ? 1.f : 0.f));
    }
    REQUIRE(shifted[static_cast<std::size_t>(r * 4)] == INFINITY);
    REQUIRE(shifted[static_cast<std::size_t>(r * 4 + 1)] == -INFINITY);
    REQUIRE(std::isnan(shifted[static_cast<std::size_t>(r * 4 + 2)]));
    REQUIRE(shifted[static_cast<std::size_t>(r * 4 + 3)] == old[static_cast<std::size_t>(r * 4 + 3)] + 0.1f);
    REQUIRE(rowsum[static_cast<std::size_t>(r)] == Approx(sum));
    REQUIRE(again[static_cast<std::size_t>(r)] == rowsum[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE(
    "AOT: constants of --constants-file's size or more go to NAME.bin and link bit for bit (and the shape "
    "macros)",
    "[aot]") {
  std::mt19937 rng(11);
  std::vector<float> xv = randn(rng, 5 * 64), wv = randn(rng, 64 * 33), bv = randn(rng, 33);
  Tensor xc(xv, {5, 64}, {.device = "CPU"});
  std::vector<float> want =
      (xc.matmul(Tensor(wv, {64, 33}, {.device = "CPU"})) + Tensor(bv, {33}, {.device = "CPU"}))
          .to_vector<float>();
  std::vector<std::vector<float>> got;
  for (bool file : {false, true}) {
    INFO("--constants-file: " << file);
    aot::Generator g("blob");
    Tensor x = Tensor::empty({5, 64}, {.device = "CLANG"}), w(wv, {64, 33}, {.device = "CLANG"}),
           b(bv, {33}, {.device = "CLANG"});
    g.function("f", {{"x", x}}, {{"y", x.matmul(w) + b}});
    if (file) {  // w (8448 bytes) into blob.bin, b (132 bytes) stays C text
      auto dir = std::filesystem::temp_directory_path() /
                 ("metagrad_aot_test_" + std::to_string(::getpid()) + "_main");
      std::string args[] = {"gen", "-o", dir.string(), "--constants-file=1024"};
      char* argv[] = {args[0].data(), args[1].data(), args[2].data(), args[3].data()};
      REQUIRE(g.main(4, argv) == 0);
      REQUIRE(std::filesystem::file_size(dir / "blob.bin") >= 8448);
      std::filesystem::remove_all(dir);
    }
    REQUIRE((g.source().find(".incbin") != std::string::npos) == file);
    REQUIRE_THAT(g.header(), Contains("#define f_x_SIZE 320\n") && Contains("#define f_y_RANK 2\n") &&
                                 Contains("#define f_y_SHAPE {5, 33}\n"));
    CLibrary lib(g, "blob");
    std::vector<float> y(5 * 33);
    lib.fn<void(const float*, float*)>("f")(xv.data(), y.data());
    check_close(y, want);
    got.push_back(y);
  }
  REQUIRE(got[0] == got[1]);
}

TEST_CASE("AOT: a generator's mistakes are clear errors", "[aot]") {
  aot::Generator g("bad");
  Tensor x = Tensor::empty({2, 3}, {.device = "CLANG"}), y = Tensor::empty({3}, {.device = "CLANG"});
  REQUIRE_THROWS_WITH(g.function("2f", {{"x", x}}, {{"o", x + 1}}), Contains("not a C identifier"));
  REQUIRE_THROWS_WITH(g.function("f", {{"x", x}, {"x", y}}, {{"o", x + 1}}),
                      Contains("two arguments are named x"));
  REQUIRE_THROWS_WITH(g.function("f", {{"x", x}}, {{"o", x + 1}}, {{"z", x}}), Contains("names no input"));
  REQUIRE_THROWS_WITH(g.function("f", {{"x", x}, {"y", y}}, {{"o", x + y}}, {{"y", x}}),
                      Contains("(2, 3)") && Contains("(3,)"));
  Tensor x2 = Tensor::empty({2, 3}, {.device = "CLANG"});
  REQUIRE_THROWS_WITH(g.function("swap", {{"x", x}, {"x2", x2}}, {}, {{"x", x2}, {"x2", x}}),
                      Contains("updated too"));
  REQUIRE_THROWS_WITH(g.function("f", {{"x", x.transpose()}}, {{"o", x + 1}}),
                      Contains("not a buffer of its own"));
  Tensor cpu = Tensor::empty({2}, {.device = "CPU"});
  REQUIRE_THROWS_WITH(g.function("f", {{"c", cpu}}, {{"o", cpu + 1}}),
                      Contains("generators compute on CLANG"));
  Tensor h = (x * 2).relu();
  g.function("first", {{"x", x}}, {{"h", h}});
  REQUIRE_THROWS_WITH(g.function("first", {{"x", x}}, {{"o", x + 1}}), Contains("defined twice"));
  REQUIRE_THROWS_WITH(g.function("second", {{"x", x}}, {{"o", h + 1}}),
                      Contains("an earlier function computed"));
  REQUIRE_THROWS_WITH(aot::Generator("no-dash"), Contains("not a C identifier"));
}

// The C GEMM spells the library's cache blocking as macros: compiled for each vector width, they
// give the blocking the runtime's kernel of that width derives from the same caches, on this
// machine's caches and (its L2 and L3 lines rewritten) on others'.
TEST_CASE("AOT: the C GEMM's cache blocking is the library's for every vector width and cache size",
          "[aot]") {
  aot::Generator g("blk");
  Tensor a = Tensor::empty({40, 30}, {.device = "CLANG"}), b = Tensor::empty({30, 20}, {.device = "CLANG"});
  g.function("f", {{"a", a}, {"b", b}}, {{"out", a.matmul(b)}});
  auto dir = std::filesystem::temp_directory_path() / ("metagrad_aot_blocking_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  g.write(dir.string());
  std::string source;
  {
    std::ifstream in(dir / "blk.c");
    source.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto c_blocking =
      [&](const std::string& flags, std::int64_t l2, std::int64_t l3) {
        std::string s = std::regex_replace(source, std::regex("#define blk_L2 [0-9]+L"),
                                           "#define blk_L2 " + std::to_string(l2) + "L");
        s = std::regex_replace(s, std::regex("#define blk_L3 [0-9]+L"),
                               "#define blk_L3 " + std::to_string(l3) + "L");
        std::ofstream(dir / "main.c")
            << "#include <stdio.h>\n"
            << s
            << "int main(void) { printf(\"%ld %ld %ld\", (long)(blk_MC), (long)(blk_KC), "
               "(long)(blk_NC)); return 0; }\n";
        const std::string exe = (dir / "main").string();
        REQUIRE(std::system(("cc -O0 -w " + flags + " -I" + dir.string() + " " + (dir / "main.c").string() +
                             " -o " + exe + " -lm")
                                .c_str()) == 0);
        std::array<char, 128> out{};
        FILE* p = ::popen(exe.c_str(), "r");
        REQUIRE(p);
        const bool read = std::fgets(out.data(), out.size(), p) != nullptr;
        ::pclose(p);
        REQUIRE(read);
        long mc = 0, kc = 0, nc = 0;
        REQUIRE(std::sscanf(out.data(), "%ld %ld %ld", &mc, &kc, &nc) == 3);
        return cpu::GemmBlocking{mc, kc, nc};
      };
  auto same = [](const cpu::GemmBlocking& got, const cpu::GemmBlocking& want) {
    INFO("C: MC " << got.mc << " KC " << got.kc << " NC " << got.nc << "; library: MC " << want.mc << " KC "
                  << want.kc << " NC " << want.nc);
    REQUIRE(got == want);
  };
  const cpu::CacheSizes& host = cpu::host_caches();
  // Other machines' caches, below, for this unit's own vector width (one of the targets: it runs here).
  const gemm::Isa unit = cpu::detail::kVectorBytes == 64   ? gemm::Isa::avx512
                         : cpu::detail::kVectorBytes == 32 ? gemm::Isa::avx2
                                                           : gemm::Isa::generic;
  std::string own;
  for (const auto& [flags, isa] : c_targets()) {
    INFO("compiled with `" << flags << "`");
    same(c_blocking(flags, host.l2, host.l3), gemm::default_blocking(isa));
    if (isa == unit) own = flags;
  }
  for (auto [l2, l3] : {std::pair<std::int64_t, std::int64_t>{256 << 10, 8 << 20},
                        {512 << 10, 32 << 20},
                        {1 << 20, 32 << 20},
                        {2 << 20, 36 << 20},
                        {1280 << 10, 24 << 20},
                        {64 << 10, 1 << 20}}) {
    INFO("L2 " << l2 << ", L3 " << l3);
    same(c_blocking(own, l2, l3), cpu::detail::Gemm<float>::blocking({32 << 10, l2, l3}));
  }
  std::filesystem::remove_all(dir);
}
