// CUDA: CUDA C through NVRTC, run through the driver API (the seed's runtime/ops_cuda.py). Both are
// loaded with dlopen and called through the few declarations below, so the build needs nothing of
// CUDA. One primary context on one GPU and one non-blocking stream in it: kernels, copies and a
// TinyJit step's graph are ordered on that stream, so nothing waits after a launch. (The legacy
// default stream orders the same, but its launch costs about 1.5 us more.)
#include "metagrad/backends/ops_cuda.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <thread>
#include <vector>

#include "metagrad/backends/cuda_gemm.hpp"
#include "metagrad/codegen/gemm.hpp"
#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/disk_cache.hpp"

namespace metagrad {

namespace {

namespace fs = std::filesystem;

// ---- the driver API and NVRTC, as much of them as is called (cuda.h and nvrtc.h, CUDA >= 11) ----

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;
using CUgraphNode = CUgraphNode_st*;
// CUDA_KERNEL_NODE_PARAMS_v2 (its first fields are the older struct's; kern and ctx stay null).
struct KernelNodeParams {
  CUfunction func;
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  void** params;
  void** extra;
  void* kern;
  CUcontext ctx;
};
constexpr unsigned kStreamNonBlocking = 1;
constexpr int kAttrMaxThreadsPerBlock = 1, kAttrMaxGridDimX = 5, kAttrMultiprocessors = 16, kAttrCCMajor = 75,
              kAttrCCMinor = 76;
constexpr int kFuncMaxThreadsPerBlock = 0;
constexpr int kJitErrorLogBuffer = 5, kJitErrorLogBufferSize = 6;
constexpr CUresult kNoDevice = 100, kStubLibrary = 34;

using nvrtcResult = int;
struct _nvrtcProgram;
using nvrtcProgram = _nvrtcProgram*;
constexpr nvrtcResult kNvrtcSuccess = 0;

// A function pointer from `lib`, or null (optional) / a throw (required).
template <class F>
void bind(void* lib, const char* name, F& f, const char* what, bool required = true) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (!f && required) throw std::runtime_error(detail::cat(what, " has no ", name));
}

// The first of `names` that dlopen loads; `tried` lists them all with dlerror's reasons otherwise.
void* open_first(const std::vector<std::string>& names, std::string& tried) {
  for (const std::string& n : names) {
    if (void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = ::dlerror();
    tried += detail::cat("\n  ", n, ": ", e ? e : "not loaded");
  }
  return nullptr;
}

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, std::size_t, CUstream);
  // Graphs (CUDA >= 11.4): optional, TinyJit replays kernel by kernel without them.
  CUresult (*cuGraphCreate)(CUgraph*, unsigned);
  CUresult (*cuGraphAddKernelNode)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t,
                                   const KernelNodeParams*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const KernelNodeParams*);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  bool graphs = false;

  // Loads libcuda.so.1; throws when there is none (no NVIDIA driver installed).
  Driver() {
    std::string tried;
    void* lib = open_first({"libcuda.so.1"}, tried);
    if (!lib) throw std::runtime_error("no CUDA driver: libcuda.so.1 could not be loaded:" + tried);
    const char* w = "the CUDA driver (libcuda.so.1)";
    bind(lib, "cuInit", cuInit, w), bind(lib, "cuDriverGetVersion", cuDriverGetVersion, w);
    bind(lib, "cuGetErrorName", cuGetErrorName, w), bind(lib, "cuGetErrorString", cuGetErrorString, w);
    bind(lib, "cuDeviceGetCount", cuDeviceGetCount, w), bind(lib, "cuDeviceGet", cuDeviceGet, w);
    bind(lib, "cuDeviceGetName", cuDeviceGetName, w),
        bind(lib, "cuDeviceGetAttribute", cuDeviceGetAttribute, w);
    bind(lib, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, w);
    bind(lib, "cuCtxSetCurrent", cuCtxSetCurrent, w), bind(lib, "cuCtxSynchronize", cuCtxSynchronize, w);
    bind(lib, "cuMemAlloc_v2", cuMemAlloc, w), bind(lib, "cuMemFree_v2", cuMemFree, w);
    bind(lib, "cuModuleLoadDataEx", cuModuleLoadDataEx, w);
    bind(lib, "cuModuleGetFunction", cuModuleGetFunction, w), bind(lib, "cuModuleUnload", cuModuleUnload, w);
    bind(lib, "cuFuncGetAttribute", cuFuncGetAttribute, w), bind(lib, "cuLaunchKernel", cuLaunchKernel, w);
    bind(lib, "cuStreamCreate", cuStreamCreate, w), bind(lib, "cuStreamSynchronize", cuStreamSynchronize, w);
    bind(lib, "cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync, w),
        bind(lib, "cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync, w);
    // The _v2 kernel-node calls take the struct above; the unversioned ones (CUDA 11) its prefix.
    bind(lib, "cuGraphAddKernelNode_v2", cuGraphAddKernelNode, w, false);
    if (!cuGraphAddKernelNode) bind(lib, "cuGraphAddKernelNode", cuGraphAddKernelNode, w, false);
    bind(lib, "cuGraphExecKernelNodeSetParams_v2", cuGraphExecKernelNodeSetParams, w, false);
    if (!cuGraphExecKernelNodeSetParams)
      bind(lib, "cuGraphExecKernelNodeSetParams", cuGraphExecKernelNodeSetParams, w, false);
    bind(lib, "cuGraphCreate", cuGraphCreate, w, false);
    bind(lib, "cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, w, false);
    bind(lib, "cuGraphLaunch", cuGraphLaunch, w, false),
        bind(lib, "cuGraphExecDestroy", cuGraphExecDestroy, w, false);
    bind(lib, "cuGraphDestroy", cuGraphDestroy, w, false);
    graphs = cuGraphCreate && cuGraphAddKernelNode && cuGraphInstantiateWithFlags &&
             cuGraphExecKernelNodeSetParams && cuGraphLaunch && cuGraphExecDestroy && cuGraphDestroy;
  }

  std::string error(CUresult r) const {
    const char *name = nullptr, *text = nullptr;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &text);
    return detail::cat(name ? name : "an unknown CUDA error", " (", std::to_string(r), ")",
                       text ? detail::cat(": ", text) : "");
  }
  // Throws "CUDA: <call> failed[ for kernel K]: <error>".
  void check(CUresult r, const char* call, const std::string& kernel = {}) const {
    if (r != 0)
      throw std::runtime_error(detail::cat("CUDA: ", call, " failed", kernel.empty() ? "" : " for kernel ",
                                           kernel, ": ", error(r)));
  }
};

struct Nvrtc {
  nvrtcResult (*nvrtcVersion)(int*, int*);
  const char* (*nvrtcGetErrorString)(nvrtcResult);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, std::size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, std::size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, std::size_t*);  // optional: CUDA >= 11.1
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int*);  // optional: CUDA >= 11.2
  nvrtcResult (*nvrtcGetSupportedArchs)(int*);
  int major = 0, minor = 0;
  std::vector<int> archs;  // the real architectures it compiles cubins for; empty: unknown

  // $METAGRAD_NVRTC, else the sonames of CUDA 11 to 13 and the toolkit's default place.
  Nvrtc() {
    std::vector<std::string> names;
    if (std::string env = getenv("METAGRAD_NVRTC"); !env.empty()) names.push_back(env);
    for (const char* n :
         {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1",
          "libnvrtc.so.11.0", "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib/libnvrtc.so"})
      names.emplace_back(n);
    std::string tried;
    void* lib = open_first(names, tried);
    if (!lib)
      throw std::runtime_error(
          "no NVRTC (CUDA's runtime compiler): none of these could be loaded (set "
          "METAGRAD_NVRTC to the path of libnvrtc.so):" +
          tried);
    const char* w = "NVRTC";
    bind(lib, "nvrtcVersion", nvrtcVersion, w), bind(lib, "nvrtcGetErrorString", nvrtcGetErrorString, w);
    bind(lib, "nvrtcCreateProgram", nvrtcCreateProgram, w);
    bind(lib, "nvrtcDestroyProgram", nvrtcDestroyProgram, w);
    bind(lib, "nvrtcCompileProgram", nvrtcCompileProgram, w);
    bind(lib, "nvrtcGetProgramLogSize", nvrtcGetProgramLogSize, w);
    bind(lib, "nvrtcGetProgramLog", nvrtcGetProgramLog, w);
    bind(lib, "nvrtcGetPTXSize", nvrtcGetPTXSize, w), bind(lib, "nvrtcGetPTX", nvrtcGetPTX, w);
    bind(lib, "nvrtcGetCUBINSize", nvrtcGetCUBINSize, w, false),
        bind(lib, "nvrtcGetCUBIN", nvrtcGetCUBIN, w, false);
    bind(lib, "nvrtcGetNumSupportedArchs", nvrtcGetNumSupportedArchs, w, false);
    bind(lib, "nvrtcGetSupportedArchs", nvrtcGetSupportedArchs, w, false);
    nvrtcVersion(&major, &minor);
    int n = 0;
    if (nvrtcGetNumSupportedArchs && nvrtcGetSupportedArchs &&
        nvrtcGetNumSupportedArchs(&n) == kNvrtcSuccess && n > 0) {
      archs.resize(static_cast<std::size_t>(n));
      if (nvrtcGetSupportedArchs(archs.data()) != kNvrtcSuccess) archs.clear();
    }
  }

  std::string version() const {
    return detail::cat("NVRTC ", std::to_string(major), ".", std::to_string(minor));
  }

  // What to build for compute capability `arch`: a cubin where NVRTC knows the architecture and can
  // emit cubins, else PTX for the newest one it knows at or below it.
  std::pair<std::string, bool> target(int arch) const {
    bool known = archs.empty() || std::find(archs.begin(), archs.end(), arch) != archs.end();
    if (known && nvrtcGetCUBIN) return {"sm_" + std::to_string(arch), false};
    int best = archs.empty() ? arch : 0;
    for (int a : archs)
      if (a <= arch) best = std::max(best, a);
    if (best == 0)
      throw std::runtime_error(detail::cat("CUDA: ", version(), " cannot compile for sm_",
                                           std::to_string(arch), " (its oldest architecture is sm_",
                                           std::to_string(archs.front()), ")"));
    return {"compute_" + std::to_string(best), true};
  }
};

const Nvrtc& nvrtc() {
  // Loaded once; a failure is remembered (and rethrown) rather than retried on every kernel.
  static const std::pair<std::shared_ptr<const Nvrtc>, std::string> lib = [] {
    try {
      return std::pair{std::make_shared<const Nvrtc>(), std::string()};
    } catch (const std::exception& e) {
      return std::pair{std::shared_ptr<const Nvrtc>(), std::string(e.what())};
    }
  }();
  if (!lib.first) throw std::runtime_error(lib.second);
  return *lib.first;
}

// ---- the context ----

struct CudaContext {
  Driver d;
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  int arch = 0, max_threads = 1024, max_grid_x = INT_MAX, multiprocessors = 1;
  std::string name, identity;  // identity: what a cached module must have been built for
  std::atomic<int> compiles = 0;
  // The last kernel launched, for errors a later call reports (launches do not wait).
  mutable std::mutex last_mu;
  std::string last_kernel;

  CudaContext() {
    CUresult r = d.cuInit(0);
    if (r == kNoDevice) throw std::runtime_error("no CUDA GPU: the driver found no device (cuInit)");
    if (r == kStubLibrary)
      throw std::runtime_error("no CUDA driver: libcuda.so.1 is the toolkit's stub library, not a driver");
    d.check(r, "cuInit");
    int count = 0, version = 0;
    d.check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) throw std::runtime_error("no CUDA GPU: the driver found no device");
    d.check(d.cuDeviceGet(&device, 0), "cuDeviceGet");
    char buf[256] = {};
    d.check(d.cuDeviceGetName(buf, sizeof buf - 1, device), "cuDeviceGetName");
    int major = 0, minor = 0;
    d.check(d.cuDeviceGetAttribute(&major, kAttrCCMajor, device), "cuDeviceGetAttribute");
    d.check(d.cuDeviceGetAttribute(&minor, kAttrCCMinor, device), "cuDeviceGetAttribute");
    d.check(d.cuDeviceGetAttribute(&max_threads, kAttrMaxThreadsPerBlock, device), "cuDeviceGetAttribute");
    d.check(d.cuDeviceGetAttribute(&max_grid_x, kAttrMaxGridDimX, device), "cuDeviceGetAttribute");
    d.check(d.cuDeviceGetAttribute(&multiprocessors, kAttrMultiprocessors, device), "cuDeviceGetAttribute");
    d.check(d.cuDriverGetVersion(&version), "cuDriverGetVersion");
    arch = major * 10 + minor;
    // The primary context: the one the runtime API (and PyTorch) shares. Never released: the process's
    // exit does, after static destructors that may still free buffers.
    d.check(d.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
    use();
    d.check(d.cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate");
    name = detail::cat(buf, " (sm_", std::to_string(arch), ", driver ", std::to_string(version / 1000), ".",
                       std::to_string(version % 1000 / 10), ")");
    if (getenv_int("DEBUG") >= 1) std::fprintf(stderr, "CUDA: using %s\n", name.c_str());
  }
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // The driver's context is per thread: make ours current on this one (once per thread).
  void use() const {
    thread_local CUcontext current = nullptr;
    if (current == ctx) return;
    d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    current = ctx;
  }
  // Checks a call that waits for earlier launches: an error there may be a kernel's.
  void check_sync(CUresult r, const char* call) const {
    if (r == 0) return;
    std::lock_guard lock(last_mu);
    d.check(r, call,
            last_kernel.empty() ? "" : last_kernel + " (or an earlier one: launches are asynchronous)");
  }
  void launched(const std::string& kernel) {
    std::lock_guard lock(last_mu);
    last_kernel.assign(kernel);  // capacity kept: no allocation after the first long name
  }
};

// ---- buffers ----

class RawCUDABuffer final : public RawBuffer {
 public:
  RawCUDABuffer(std::shared_ptr<CudaContext> ctx, std::size_t size_, DType dtype_)
      : RawBuffer(size_, dtype_), ctx_(std::move(ctx)) {
    ctx_->use();
    // The driver has no empty allocations: an empty tensor still holds one byte.
    CUresult r = ctx_->d.cuMemAlloc(&ptr_, std::max<std::size_t>(nbytes(), 1));
    if (r != 0)
      throw std::runtime_error(detail::cat("CUDA: cuMemAlloc of ", std::to_string(nbytes()), " bytes on ",
                                           ctx_->name, " failed: ", ctx_->d.error(r)));
  }
  ~RawCUDABuffer() override {
    if (!ptr_) return;
    try {
      ctx_->use();
      // Kernels still queued may use it (the pool frees buffers while their users are in flight).
      ctx_->d.cuStreamSynchronize(ctx_->stream);
      ctx_->d.cuMemFree(ptr_);  // (an error here, at exit after the driver shut down, is not ours)
    } catch (const std::exception&) {}
  }
  void copyin(const void* host) override {
    if (nbytes() == 0) return;
    ctx_->use();
    // (the host's memory may change once this returns: the copy is waited for)
    ctx_->check_sync(ctx_->d.cuMemcpyHtoDAsync(ptr_, host, nbytes(), ctx_->stream),
                     "cuMemcpyHtoDAsync (copyin)");
    ctx_->check_sync(ctx_->d.cuStreamSynchronize(ctx_->stream), "cuStreamSynchronize (copyin)");
  }
  void copyout(void* host) const override {
    if (nbytes() == 0) return;
    ctx_->use();
    ctx_->check_sync(ctx_->d.cuMemcpyDtoHAsync(host, ptr_, nbytes(), ctx_->stream),
                     "cuMemcpyDtoHAsync (copyout)");
    ctx_->check_sync(ctx_->d.cuStreamSynchronize(ctx_->stream), "cuStreamSynchronize (copyout)");
  }
  CUdeviceptr ptr() const { return ptr_; }

 private:
  std::shared_ptr<CudaContext> ctx_;
  CUdeviceptr ptr_ = 0;
};

// ---- programs ----

// A launch recorded for a graph (CudaGraph) rather than run.
struct RecordedLaunch {
  CUfunction fn;
  unsigned grid[3], block[3];
  std::vector<CUdeviceptr> ptrs;
  bool same_kernel(const RecordedLaunch& o) const {
    return fn == o.fn && ptrs.size() == o.ptrs.size() && std::equal(grid, grid + 3, o.grid) &&
           std::equal(block, block + 3, o.block);
  }
};
// The driver's kernel arguments for these buffer addresses: a pointer to each.
std::vector<void*> arg_pointers(std::vector<CUdeviceptr>& ptrs) {
  std::vector<void*> args(ptrs.size());
  for (std::size_t i = 0; i < ptrs.size(); ++i) args[i] = &ptrs[i];
  return args;
}
// Where this thread's launches go while a graph records them; null: they run.
thread_local std::vector<RecordedLaunch>* recording = nullptr;

// Grid and block of a launch: with a local size, blocks of exactly that many threads (the kernel's
// block-wide reduce needs them all, and groups must tile the global size); without, blocks of up to
// 256 threads over a grid that covers the global size (the kernel checks its bound).
struct LaunchDims {
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
};

LaunchDims launch_dims(const std::string& name, const std::vector<std::int64_t>& global,
                       const std::vector<std::int64_t>& local, int max_threads, int max_grid_x) {
  if (global.size() > 3 || (!local.empty() && local.size() != global.size()))
    throw std::invalid_argument(detail::cat("CUDA: ", name, ": global size has ",
                                            std::to_string(global.size()), " dimensions and local size ",
                                            std::to_string(local.size())));
  LaunchDims l;
  std::int64_t threads = 1;
  for (std::size_t d = 0; d < global.size(); ++d) {
    std::int64_t g = global[d], b = local.empty() ? (d == 0 ? std::min<std::int64_t>(g, 256) : 1) : local[d];
    if (!local.empty() && (b <= 0 || g % b != 0))
      throw std::invalid_argument(detail::cat("CUDA: ", name, ": local size ", std::to_string(b),
                                              " does not divide global size ", std::to_string(g)));
    std::int64_t blocks = b > 0 ? (g + b - 1) / b : 0, limit = d == 0 ? max_grid_x : 65535;
    if (blocks > limit)
      throw std::invalid_argument(detail::cat("CUDA: ", name, ": ", std::to_string(blocks),
                                              " blocks in dimension ", std::to_string(d), " (at most ",
                                              std::to_string(limit), ")"));
    l.grid[d] = static_cast<unsigned>(blocks),
    l.block[d] = static_cast<unsigned>(std::max<std::int64_t>(b, 1));
    threads *= l.block[d];
  }
  if (threads > max_threads)
    throw std::invalid_argument(detail::cat("CUDA: ", name, ": ", std::to_string(threads),
                                            " threads per block (at most ", std::to_string(max_threads),
                                            ")"));
  return l;
}

// Where the disk cache keeps the module image of `src`, keyed by what made it: source, GPU
// architecture, NVRTC.
fs::path image_path(const CudaContext& ctx, const std::string& src) {
  const Nvrtc& nv = nvrtc();
  auto [target, ptx] = nv.target(ctx.arch);
  return fs::path(kernel_cache_dir()) / "cuda" /
         (stable_hash(detail::cat(nv.version(), "\n", target, "\n", src)) + (ptx ? ".ptx" : ".cubin"));
}

class CUDAProgram final : public Program {
 public:
  CUDAProgram(std::shared_ptr<CudaContext> ctx, std::string name, const std::string& src)
      : ctx_(std::move(ctx)), name_(std::move(name)) {
    const Driver& d = ctx_->d;
    ctx_->use();
    std::error_code ec;
    fs::path file = image_path(*ctx_, src), dir = file.parent_path();
    if (std::optional<std::string> cached = load_verified(file)) module_ = load(*cached, false);
    if (!module_) {  // (a cached image the driver refuses is rebuilt, and replaced)
      auto t0 = std::chrono::steady_clock::now();
      CudaImage img = nvrtc_compile(name_, src, ctx_->arch);
      ++ctx_->compiles;
      if (getenv_int("DEBUG") >= 2)
        std::fprintf(stderr, "CUDA: compiled %s in %.2f ms\n", name_.c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
      module_ = load(img.bytes, true);
      fs::create_directories(dir, ec);
      if (fs::is_directory(dir, ec)) store_verified(file, img.bytes);
    }
    CUresult r = d.cuModuleGetFunction(&fn_, module_, name_.c_str());
    if (r != 0) {
      d.cuModuleUnload(module_);
      throw std::runtime_error(detail::cat("CUDA: cuModuleGetFunction failed for kernel ", name_, ": ",
                                           d.error(r), "\n--- source ---\n", src));
    }
    d.cuFuncGetAttribute(&max_threads_, kFuncMaxThreadsPerBlock, fn_);
    max_threads_ = std::min(max_threads_ > 0 ? max_threads_ : ctx_->max_threads, ctx_->max_threads);
  }
  ~CUDAProgram() override {
    try {
      ctx_->use();
      ctx_->d.cuModuleUnload(module_);
    } catch (const std::exception&) {}
  }

  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override {
    std::vector<std::int64_t> global = global_size.empty() ? std::vector<std::int64_t>{1} : global_size;
    LaunchDims l = launch_dims(name_, global, local_size, max_threads_, ctx_->max_grid_x);
    if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return;  // nothing to run
    std::vector<CUdeviceptr> ptrs(bufs.size());
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      auto* b = dynamic_cast<RawCUDABuffer*>(bufs[i]);
      if (!b)
        throw std::invalid_argument(
            detail::cat("CUDA: ", name_, ": buffer ", std::to_string(i), " is not a CUDA buffer"));
      ptrs[i] = b->ptr();
    }
    if (recording) {
      recording->push_back(
          {fn_, {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, std::move(ptrs)});
      return;
    }
    std::vector<void*> args = arg_pointers(ptrs);
    ctx_->use();
    ctx_->d.check(ctx_->d.cuLaunchKernel(fn_, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                                         l.block[2], 0, ctx_->stream, args.data(), nullptr),
                  "cuLaunchKernel", name_);
    ctx_->launched(name_);
    // DEBUG>=2 times each kernel (ASTRunner::exec): wait for it so the time is its own.
    if (getenv_int("DEBUG") >= 2) ctx_->check_sync(ctx_->d.cuCtxSynchronize(), "cuCtxSynchronize");
  }

 private:
  // The module from an image, or null when `fresh` is false and the driver refuses it (a stale cache
  // entry: rebuilt by the caller).
  CUmodule load(const std::string& image, bool fresh) {
    char log[8192] = {};
    int opts[] = {kJitErrorLogBuffer, kJitErrorLogBufferSize};
    void* vals[] = {log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof log - 1))};
    CUmodule m = nullptr;
    CUresult r = ctx_->d.cuModuleLoadDataEx(&m, image.data(), 2, opts, vals);
    if (r == 0) return m;
    if (!fresh) return nullptr;
    throw std::runtime_error(detail::cat("CUDA: cuModuleLoadDataEx failed for kernel ", name_, " on ",
                                         ctx_->name, ": ", ctx_->d.error(r), "\n--- log ---\n", log));
  }

  std::shared_ptr<CudaContext> ctx_;
  std::string name_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  int max_threads_ = 1024;
};

// ---- graphs ----

// A TinyJit step's launches as one CUDA graph, each kernel node depending on the one before (the
// order the stream would give). A replay whose buffers changed updates only the nodes of the kernels
// that use them, in the instantiated graph.
class CudaGraph final : public LaunchGraph {
 public:
  CudaGraph(std::shared_ptr<CudaContext> ctx, std::size_t kernels,
            const std::function<void(std::size_t)>& launches)
      : ctx_(std::move(ctx)) {
    const Driver& d = ctx_->d;
    ctx_->use();
    for (std::size_t k = 0; k < kernels; ++k) {
      first_.push_back(rec_.size());
      record(rec_, [&] { launches(k); });
    }
    first_.push_back(rec_.size());
    d.check(d.cuGraphCreate(&graph_, 0), "cuGraphCreate");
    nodes_.resize(rec_.size());
    for (std::size_t i = 0; i < rec_.size(); ++i) {
      Params p(rec_[i]);
      d.check(d.cuGraphAddKernelNode(&nodes_[i], graph_, i ? &nodes_[i - 1] : nullptr, i ? 1 : 0, &p.node),
              "cuGraphAddKernelNode");
    }
    d.check(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiateWithFlags");
    name_ = detail::cat("a graph of ", std::to_string(rec_.size()), " launches");
  }
  ~CudaGraph() override {
    try {
      ctx_->use();
      if (exec_) ctx_->d.cuGraphExecDestroy(exec_);
      if (graph_) ctx_->d.cuGraphDestroy(graph_);
    } catch (const std::exception&) {}
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void launch() override {
    ctx_->use();
    ctx_->d.check(ctx_->d.cuGraphLaunch(exec_, ctx_->stream), "cuGraphLaunch", name_);
    ctx_->launched(name_);
  }

  bool update(std::size_t k, const std::function<void()>& launches) override {
    std::vector<RecordedLaunch> now;
    record(now, launches);
    std::size_t first = first_.at(k);
    if (now.size() != first_[k + 1] - first) return false;
    for (std::size_t i = 0; i < now.size(); ++i)
      if (!now[i].same_kernel(rec_[first + i])) return false;
    ctx_->use();
    for (std::size_t i = 0; i < now.size(); ++i) {
      RecordedLaunch& was = rec_[first + i];
      if (now[i].ptrs == was.ptrs) continue;
      was.ptrs = std::move(now[i].ptrs);
      Params p(was);
      ctx_->d.check(ctx_->d.cuGraphExecKernelNodeSetParams(exec_, nodes_[first + i], &p.node),
                    "cuGraphExecKernelNodeSetParams", name_);
    }
    return true;
  }

 private:
  // A node's parameters: the driver copies the arguments' values when it is added or set.
  struct Params {
    std::vector<void*> args;
    KernelNodeParams node{};
    explicit Params(RecordedLaunch& r) : args(arg_pointers(r.ptrs)) {
      node = {r.fn,       r.grid[0], r.grid[1],   r.grid[2], r.block[0], r.block[1],
              r.block[2], 0,         args.data(), nullptr,   nullptr,    nullptr};
    }
  };
  static void record(std::vector<RecordedLaunch>& into, const std::function<void()>& launches) {
    struct Restore {
      ~Restore() { recording = nullptr; }
    } restore;
    recording = &into;
    launches();
  }

  std::shared_ptr<CudaContext> ctx_;
  std::vector<RecordedLaunch> rec_;
  std::vector<std::size_t> first_;  // kernel k's launches: rec_[first_[k] .. first_[k + 1])
  std::vector<CUgraphNode> nodes_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  std::string name_;
};

// ---- the device ----

// The device's buffers and programs on `ctx`.
Compiled::BufferFactory cuda_buffers(const std::shared_ptr<CudaContext>& ctx) {
  return [ctx](std::size_t n, DType dt) { return std::make_shared<RawCUDABuffer>(ctx, n, dt); };
}
Compiled::Runtime cuda_programs(const std::shared_ptr<CudaContext>& ctx) {
  return [ctx](const std::string& name, const std::string& src) {
    return std::make_shared<CUDAProgram>(ctx, name, src);
  };
}

// A program NVRTC builds on another thread (at most one per core at a time); its first launch waits
// for it. A cold step's contractions build their kernels while the schedule's code is generated, in
// order, rather than one after another inside that generation.
class PendingProgram final : public Program {
 public:
  PendingProgram(Compiled::Runtime runtime, std::string name, std::string src)
      : program_(std::async(std::launch::async, [runtime = std::move(runtime), name = std::move(name),
                                                 src = std::move(src)] {
                   static std::counting_semaphore<4096> cores(
                       std::clamp<std::ptrdiff_t>(std::thread::hardware_concurrency(), 1, 4096));
                   cores.acquire();
                   struct Release {
                     ~Release() { cores.release(); }
                   } release;
                   return runtime(name, src);
                 }).share()) {}
  void operator()(const std::vector<std::int64_t>& global_size, const std::vector<std::int64_t>& local_size,
                  const std::vector<RawBuffer*>& bufs) override {
    (*program_.get())(global_size, local_size, bufs);
  }

 private:
  std::shared_future<std::shared_ptr<Program>> program_;
};

// A kernel's runner: a contraction as the tiled SGEMM (runtime/backends/cuda_gemm.cpp) with the kernels
// around it, every other kernel (and a contraction METAGRAD_CUDA_GEMM=0 turns away) from cuda_runner.
ASTRunner gpu_runner(const std::shared_ptr<CudaContext>& ctx, const std::shared_ptr<LazyOp>& ast, DType dt) {
  if (dt == dtypes::float32 && getenv_int("METAGRAD_CUDA_GEMM", 1) != 0) {
    codegen::Kernel k(ast, dt);
    if (auto plan = codegen::match_gemm(k); plan && cuda_sgemm_fits(*plan))
      return cuda_gemm_runner(
          k, *plan, ctx->multiprocessors, cuda_runner,
          [ctx](const std::string& name, const std::string& src) {
            return std::make_shared<PendingProgram>(cuda_programs(ctx), name, src);
          },
          cuda_buffers(ctx));
  }
  return cuda_runner(ast, dt);
}

class CUDABackendImpl final : public CUDABackend {
 public:
  explicit CUDABackendImpl(const std::shared_ptr<CudaContext>& ctx)
      : CUDABackend(
            cuda_buffers(ctx),
            [ctx](const std::shared_ptr<LazyOp>& ast, DType dt) { return gpu_runner(ctx, ast, dt); },
            cuda_programs(ctx),
            /*concurrent_compiles=*/true,  // NVRTC and the driver are thread-safe
            [ctx](const std::string& src) { return fs::exists(image_path(*ctx, src)); }),
        ctx_(ctx) {}
  std::string device_name() const override { return ctx_->name; }
  int arch() const override { return ctx_->arch; }
  std::shared_ptr<Program> compile(const std::string& name, const std::string& src) override {
    return cuda_programs(ctx_)(name, src);
  }
  void synchronize() override {
    ctx_->use();
    ctx_->check_sync(ctx_->d.cuStreamSynchronize(ctx_->stream), "cuStreamSynchronize");
  }
  int compiles() const override { return ctx_->compiles; }
  std::unique_ptr<LaunchGraph> graph(std::size_t kernels,
                                     const std::function<void(std::size_t)>& launches) override {
    if (!ctx_->d.graphs) return nullptr;
    return std::make_unique<CudaGraph>(ctx_, kernels, launches);
  }

 private:
  std::shared_ptr<CudaContext> ctx_;
};

std::unique_ptr<Backend> make_cuda_backend() {
  auto ctx = std::make_shared<CudaContext>();
  nvrtc();  // a GPU without a compiler is no device: say so now, not at the first kernel
  return std::make_unique<CUDABackendImpl>(ctx);
}

// Ranked before the host devices: where a GPU is found, it is the default device.
[[gnu::init_priority(Device::kRegistrationPriority)]] const Device::Registrar kCUDA{"CUDA", 5,
                                                                                    make_cuda_backend};

}  // namespace

// ---- compiling and lowering (no GPU needed) ----

std::string nvrtc_version() { return nvrtc().version(); }

CudaImage nvrtc_compile(const std::string& name, const std::string& src, int arch) {
  const Nvrtc& nv = nvrtc();
  auto [target, ptx] = nv.target(arch);
  auto fail = [&](nvrtcResult r, const char* call) {
    throw std::runtime_error(
        detail::cat("CUDA: ", call, " failed for kernel ", name, ": ", nv.nvrtcGetErrorString(r)));
  };
  nvrtcProgram prog = nullptr;
  std::string file = name + ".cu";
  if (nvrtcResult r = nv.nvrtcCreateProgram(&prog, src.c_str(), file.c_str(), 0, nullptr, nullptr);
      r != kNvrtcSuccess)
    fail(r, "nvrtcCreateProgram");
  struct Destroy {
    const Nvrtc& nv;
    nvrtcProgram& p;
    ~Destroy() { nv.nvrtcDestroyProgram(&p); }
  } destroy{nv, prog};
  // No fast math: NaN, inf and division behave as on the host (the CPU device is the reference).
  std::string arch_opt = "--gpu-architecture=" + target;
  const char* opts[] = {arch_opt.c_str(), "--fmad=false"};
  nvrtcResult r = nv.nvrtcCompileProgram(prog, 2, opts);
  std::size_t n = 0;
  std::string log;
  if (nv.nvrtcGetProgramLogSize(prog, &n) == kNvrtcSuccess && n > 1) {
    log.resize(n);
    nv.nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();
  }
  if (r != kNvrtcSuccess)
    throw std::runtime_error(detail::cat("CUDA: ", nv.version(), " could not compile kernel ", name, " for ",
                                         target, ": ", nv.nvrtcGetErrorString(r), "\n--- log ---\n", log,
                                         "\n--- source ---\n", src));
  CudaImage img{{}, ptx, target};
  if (nvrtcResult e = ptx ? nv.nvrtcGetPTXSize(prog, &n) : nv.nvrtcGetCUBINSize(prog, &n); e != kNvrtcSuccess)
    fail(e, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize");
  img.bytes.resize(n);
  if (nvrtcResult e = ptx ? nv.nvrtcGetPTX(prog, img.bytes.data()) : nv.nvrtcGetCUBIN(prog, img.bytes.data());
      e != kNvrtcSuccess)
    fail(e, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
  if (ptx)
    while (!img.bytes.empty() && img.bytes.back() == '\0') img.bytes.pop_back();  // data() ends it anyway
  return img;
}

ASTRunner cuda_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype) {
  std::int64_t threads = 1;  // the dialect's thread index covers every global loop
  ASTRunner r = codegen::run_pipeline(
      ast, out_dtype,
      [&](const codegen::LinearizedKernel& k) {
        threads = codegen::flat_global_size(k);
        return codegen::render_cstyle(k, CudaCodegen::lang);
      },
      CudaCodegen::opts());
  r.global_size = {threads * (r.local_size.empty() ? 1 : r.local_size[0])};
  return r;
}

}  // namespace metagrad
