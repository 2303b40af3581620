// OPENCL: the cstyle renderer's OpenCL C, built and run through the ICD loader (the seed's
// runtime/ops_gpu.py). One context and one in-order queue; kernels are one-dimensional NDRanges
// over the threaded loop, so copies, launches and reads need no events.
#include "metagrad/backends/ops_opencl.hpp"

#include <CL/cl.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "metagrad/backends/host_program.hpp"  // cstyle_runner
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/disk_cache.hpp"

namespace metagrad {

namespace {

namespace fs = std::filesystem;

std::atomic<int> builds = 0;  // OpenCLBackend::compiles

const char* cl_error_name(cl_int e) {
  static const std::pair<cl_int, const char*> names[] = {
      {0, "CL_SUCCESS"},
      {-1, "CL_DEVICE_NOT_FOUND"},
      {-2, "CL_DEVICE_NOT_AVAILABLE"},
      {-3, "CL_COMPILER_NOT_AVAILABLE"},
      {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {-5, "CL_OUT_OF_RESOURCES"},
      {-6, "CL_OUT_OF_HOST_MEMORY"},
      {-7, "CL_PROFILING_INFO_NOT_AVAILABLE"},
      {-8, "CL_MEM_COPY_OVERLAP"},
      {-9, "CL_IMAGE_FORMAT_MISMATCH"},
      {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED"},
      {-11, "CL_BUILD_PROGRAM_FAILURE"},
      {-12, "CL_MAP_FAILURE"},
      {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
      {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
      {-15, "CL_COMPILE_PROGRAM_FAILURE"},
      {-16, "CL_LINKER_NOT_AVAILABLE"},
      {-17, "CL_LINK_PROGRAM_FAILURE"},
      {-18, "CL_DEVICE_PARTITION_FAILED"},
      {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
      {-30, "CL_INVALID_VALUE"},
      {-31, "CL_INVALID_DEVICE_TYPE"},
      {-32, "CL_INVALID_PLATFORM"},
      {-33, "CL_INVALID_DEVICE"},
      {-34, "CL_INVALID_CONTEXT"},
      {-35, "CL_INVALID_QUEUE_PROPERTIES"},
      {-36, "CL_INVALID_COMMAND_QUEUE"},
      {-37, "CL_INVALID_HOST_PTR"},
      {-38, "CL_INVALID_MEM_OBJECT"},
      {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR"},
      {-40, "CL_INVALID_IMAGE_SIZE"},
      {-41, "CL_INVALID_SAMPLER"},
      {-42, "CL_INVALID_BINARY"},
      {-43, "CL_INVALID_BUILD_OPTIONS"},
      {-44, "CL_INVALID_PROGRAM"},
      {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
      {-46, "CL_INVALID_KERNEL_NAME"},
      {-47, "CL_INVALID_KERNEL_DEFINITION"},
      {-48, "CL_INVALID_KERNEL"},
      {-49, "CL_INVALID_ARG_INDEX"},
      {-50, "CL_INVALID_ARG_VALUE"},
      {-51, "CL_INVALID_ARG_SIZE"},
      {-52, "CL_INVALID_KERNEL_ARGS"},
      {-53, "CL_INVALID_WORK_DIMENSION"},
      {-54, "CL_INVALID_WORK_GROUP_SIZE"},
      {-55, "CL_INVALID_WORK_ITEM_SIZE"},
      {-56, "CL_INVALID_GLOBAL_OFFSET"},
      {-57, "CL_INVALID_EVENT_WAIT_LIST"},
      {-58, "CL_INVALID_EVENT"},
      {-59, "CL_INVALID_OPERATION"},
      {-60, "CL_INVALID_GL_OBJECT"},
      {-61, "CL_INVALID_BUFFER_SIZE"},
      {-62, "CL_INVALID_MIP_LEVEL"},
      {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {-64, "CL_INVALID_PROPERTY"},
      {-65, "CL_INVALID_IMAGE_DESCRIPTOR"},
      {-66, "CL_INVALID_COMPILER_OPTIONS"},
      {-67, "CL_INVALID_LINKER_OPTIONS"},
      {-68, "CL_INVALID_DEVICE_PARTITION_COUNT"},
      {-69, "CL_INVALID_PIPE_SIZE"},
      {-70, "CL_INVALID_DEVICE_QUEUE"},
      {-71, "CL_INVALID_SPEC_ID"},
      {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED"},
      {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
  };
  for (const auto& [code, name] : names)
    if (code == e) return name;
  return "an unknown OpenCL error";
}

std::string cl_error(cl_int e) { return detail::cat(cl_error_name(e), " (", std::to_string(e), ")"); }

void check(cl_int e, const char* what) {
  if (e != CL_SUCCESS) throw std::runtime_error(detail::cat("OPENCL: ", what, " failed: ", cl_error(e)));
}

template <class Getter>
std::string info_string(Getter get) {
  std::size_t n = 0;
  if (get(0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (get(n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}
std::string device_info(cl_device_id d, cl_device_info what) {
  return info_string(
      [&](std::size_t n, void* p, std::size_t* r) { return clGetDeviceInfo(d, what, n, p, r); });
}
std::string platform_info(cl_platform_id p, cl_platform_info what) {
  return info_string(
      [&](std::size_t n, void* v, std::size_t* r) { return clGetPlatformInfo(p, what, n, v, r); });
}

// An ICD built on its own libLLVM (PoCL: libLLVM-15) crashes in its OpenCL C compiler when the
// process holds another LLVM in the global scope (a host program linking libLLVM-16; metagrad's own
// LLVM device is a plugin loaded RTLD_LOCAL and does not clash): the dynamic loader binds the ICD's
// unversioned weak LLVM symbols (template vtables) to the first definition in the global scope.
// Loading each ICD library first with RTLD_DEEPBIND puts its own libraries ahead of the global
// scope; the ICD loader's later dlopen gets the same object. AddressSanitizer refuses
// RTLD_DEEPBIND, so sanitized builds report the clash instead of crashing.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

bool global_llvm() { return ::dlsym(RTLD_DEFAULT, "LLVMContextCreate") != nullptr; }

// The file names of the libLLVM libraries loaded in this process.
std::set<std::string> loaded_llvms() {
  std::set<std::string> out;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        std::string name = fs::path(info->dlpi_name ? info->dlpi_name : "").filename().string();
        if (name.starts_with("libLLVM")) static_cast<std::set<std::string>*>(data)->insert(name);
        return 0;
      },
      &out);
  return out;
}

void isolate_icds() {
  // The vendor list as ocl-icd reads it: $OCL_ICD_VENDORS (a directory, an .icd file or a library),
  // else the .icd files in $OPENCL_VENDOR_PATH or /etc/OpenCL/vendors.
  std::error_code ec;
  fs::path vendors = getenv("OPENCL_VENDOR_PATH", "/etc/OpenCL/vendors");
  std::vector<fs::path> icds;
  std::vector<std::string> libs;
  std::string env = getenv("OCL_ICD_VENDORS");
  if (env.empty() || fs::is_directory(env, ec)) {
    for (const auto& e : fs::directory_iterator(env.empty() ? vendors : fs::path(env), ec))
      if (e.path().extension() == ".icd") icds.push_back(e.path());
  } else if (env.ends_with(".icd")) {
    icds.push_back(env.find('/') == std::string::npos && fs::exists(vendors / env, ec) ? vendors / env
                                                                                       : fs::path(env));
  } else {
    libs.push_back(env);
  }
  for (const fs::path& icd : icds) {
    std::string lib;
    std::getline(std::ifstream(icd) >> std::ws, lib);
    while (!lib.empty() && std::isspace(static_cast<unsigned char>(lib.back()))) lib.pop_back();
    if (!lib.empty()) libs.push_back(lib);
  }
  for (const std::string& lib : libs)
    ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);  // kept open
}

struct Candidate {
  cl_platform_id platform;
  cl_device_id device;
  cl_device_type type;
  std::string name;  // "device (platform)"
};

// Every device of every platform, in the loader's order.
std::vector<Candidate> list_devices() {
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(0, nullptr, &np);
  if (e == -1001 || (e == CL_SUCCESS && np == 0))  // CL_PLATFORM_NOT_FOUND_KHR: no ICD installed
    throw std::runtime_error(
        "no OpenCL device: the ICD loader found no platform (install one, e.g. Debian's pocl-opencl-icd, "
        "or check /etc/OpenCL/vendors)");
  check(e, "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(np);
  check(clGetPlatformIDs(np, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<Candidate> out;
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devs(nd);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : devs) {
      cl_device_type type = 0;
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, nullptr);
      out.push_back(
          {p, d, type,
           detail::cat(device_info(d, CL_DEVICE_NAME), " (", platform_info(p, CL_PLATFORM_NAME), ")")});
    }
  }
  if (out.empty())
    throw std::runtime_error(detail::cat("no OpenCL device: ", std::to_string(np),
                                         " platform(s) found, none of them has a device"));
  return out;
}

// OPENCL_DEVICE=index picks from list_devices(); otherwise the first GPU, else the first device.
Candidate choose_device() {
  bool clash = global_llvm();
  std::set<std::string> llvms = loaded_llvms();
  if (clash && !kAsan) isolate_icds();
  std::vector<Candidate> all = list_devices();
  if (std::set<std::string> now = loaded_llvms(); clash && kAsan && now.size() > llvms.size()) {
    std::string ours, theirs;
    for (const std::string& l : now) {
      std::string& to = llvms.count(l) ? ours : theirs;
      to += (to.empty() ? "" : ", ") + l;
    }
    throw std::runtime_error(detail::cat("no OpenCL device: the OpenCL driver loads its own LLVM (", theirs,
                                         ") next to this process's (", ours,
                                         "); under AddressSanitizer it cannot be isolated (ASan refuses "
                                         "RTLD_DEEPBIND) and its compiler would crash"));
  }
  if (std::string want = getenv("OPENCL_DEVICE"); !want.empty()) {
    char* end = nullptr;
    long i = std::strtol(want.c_str(), &end, 10);
    if (*end == '\0' && i >= 0 && static_cast<std::size_t>(i) < all.size())
      return all[static_cast<std::size_t>(i)];
    std::string listing;
    for (std::size_t k = 0; k < all.size(); ++k)
      listing += detail::cat("\n  ", std::to_string(k), ": ", all[k].name);
    throw std::runtime_error(
        detail::cat("no OpenCL device: OPENCL_DEVICE=", want, " is not one of", listing));
  }
  for (const Candidate& c : all)
    if (c.type & CL_DEVICE_TYPE_GPU) return c;
  return all.front();
}

}  // namespace

struct CLContext {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  std::string name, identity;  // identity: what a cached binary must match
  bool fp64 = false;
  std::string build_options;

  CLContext() {
    Candidate c = choose_device();
    platform = c.platform;
    device = c.device;
    name = c.name;
    cl_int e = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform),
                                     0};
    context = clCreateContext(props, 1, &device, nullptr, nullptr, &e);
    check(e, "clCreateContext");
    queue = clCreateCommandQueue(context, device, 0, &e);
    if (e != CL_SUCCESS) {
      clReleaseContext(context);
      check(e, "clCreateCommandQueue");
    }
    std::string ext = " " + device_info(device, CL_DEVICE_EXTENSIONS) + " ";
    fp64 = ext.find(" cl_khr_fp64 ") != std::string::npos;
    // Division and sqrt as exact as on the host where the device can (CPU devices usually are anyway).
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr);
    if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) build_options = "-cl-fp32-correctly-rounded-divide-sqrt";
    identity = detail::cat(name, "\n", device_info(device, CL_DEVICE_VERSION), "\n",
                           device_info(device, CL_DRIVER_VERSION), "\n", build_options);
    if (getenv_int("DEBUG") >= 1) std::fprintf(stderr, "OPENCL: using %s\n", name.c_str());
  }
  CLContext(const CLContext&) = delete;
  CLContext& operator=(const CLContext&) = delete;
  ~CLContext() {
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
  }
};

// ---- RawOpenCLBuffer ----

RawOpenCLBuffer::RawOpenCLBuffer(std::shared_ptr<CLContext> ctx, std::size_t size_, DType dtype_)
    : RawBuffer(size_, dtype_), ctx_(std::move(ctx)) {
  cl_int e = CL_SUCCESS;
  // OpenCL has no empty buffers: an empty tensor still holds one byte.
  mem_ = clCreateBuffer(ctx_->context, CL_MEM_READ_WRITE, std::max<std::size_t>(nbytes(), 1), nullptr, &e);
  if (e != CL_SUCCESS)
    throw std::runtime_error(detail::cat("OPENCL: allocating ", std::to_string(nbytes()), " bytes on ",
                                         ctx_->name, " failed: ", cl_error(e)));
}

RawOpenCLBuffer::~RawOpenCLBuffer() {
  if (mem_) clReleaseMemObject(mem_);
}

void RawOpenCLBuffer::copyin(const void* host) {
  if (nbytes() == 0) return;
  check(clEnqueueWriteBuffer(ctx_->queue, mem_, CL_TRUE, 0, nbytes(), host, 0, nullptr, nullptr),
        "clEnqueueWriteBuffer (copyin)");
}

void RawOpenCLBuffer::copyout(void* host) const {
  if (nbytes() == 0) return;
  check(clEnqueueReadBuffer(ctx_->queue, mem_, CL_TRUE, 0, nbytes(), host, 0, nullptr, nullptr),
        "clEnqueueReadBuffer (copyout)");
}

// ---- CLProgram ----

namespace {

// The source as built for the device: the renderer always enables fp64; a device without it would
// only warn, but keep the log clean.
std::string device_source(const CLContext& ctx, const std::string& src) {
  if (ctx.fp64) return src;
  static const std::regex fp64_pragma(R"(#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n)");
  return std::regex_replace(src, fp64_pragma, "");
}

// Where the disk cache keeps the device's binary of `src` (as device_source made it), keyed by
// device, driver, options and source.
fs::path binary_path(const CLContext& ctx, const std::string& src) {
  return fs::path(kernel_cache_dir()) / "opencl" / (stable_hash(ctx.identity + "\n" + src) + ".bin");
}

}  // namespace

CLProgram::CLProgram(std::shared_ptr<CLContext> ctx, std::string name, const std::string& src_in)
    : ctx_(std::move(ctx)), name_(std::move(name)) {
  std::string src = src_in;
  if (!ctx_->fp64) {
    static const std::regex uses_double(R"(\bdouble\b)");
    if (std::regex_search(src, uses_double))
      throw std::runtime_error(
          detail::cat("OPENCL: kernel ", name_, " uses float64, but ", ctx_->name,
                      " does not support double precision (no cl_khr_fp64)\n--- source ---\n", src));
    src = device_source(*ctx_, src);
  }
  const char* opts = ctx_->build_options.c_str();
  auto build_log = [&] {
    return info_string([&](std::size_t n, void* p, std::size_t* r) {
      return clGetProgramBuildInfo(program_, ctx_->device, CL_PROGRAM_BUILD_LOG, n, p, r);
    });
  };

  std::error_code ec;
  fs::path bin = binary_path(*ctx_, src), dir = bin.parent_path();
  // Only a binary whose bytes match its sidecar (size and hash) is loaded; a damaged one is removed.
  if (std::optional<std::string> cached = load_verified(bin)) {
    const std::string& b = *cached;
    const auto* bytes = reinterpret_cast<const unsigned char*>(b.data());
    std::size_t len = b.size();
    cl_int status = CL_SUCCESS, e = CL_SUCCESS;
    program_ = clCreateProgramWithBinary(ctx_->context, 1, &ctx_->device, &len, &bytes, &status, &e);
    bool ok = e == CL_SUCCESS && status == CL_SUCCESS &&
              clBuildProgram(program_, 1, &ctx_->device, opts, nullptr, nullptr) == CL_SUCCESS;
    if (!ok && program_) clReleaseProgram(program_);  // a stale or foreign binary: build from source
    if (!ok) program_ = nullptr;
  }
  if (!program_) {
    auto t0 = std::chrono::steady_clock::now();
    const char* text = src.c_str();
    std::size_t len = src.size();
    cl_int e = CL_SUCCESS;
    program_ = clCreateProgramWithSource(ctx_->context, 1, &text, &len, &e);
    check(e, "clCreateProgramWithSource");
    e = clBuildProgram(program_, 1, &ctx_->device, opts, nullptr, nullptr);
    if (e != CL_SUCCESS) {
      std::string log = build_log();
      clReleaseProgram(program_);
      throw std::runtime_error(detail::cat("OPENCL: building kernel ", name_, " on ", ctx_->name,
                                           " failed: ", cl_error(e), "\n--- build log ---\n", log,
                                           "\n--- source ---\n", src));
    }
    ++builds;
    if (getenv_int("DEBUG") >= 2)
      std::fprintf(stderr, "OPENCL: compiled %s in %.2f ms\n", name_.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
    // Written to a private name, then renamed, then its sidecar: concurrent processes never read a
    // partial binary, and a damaged one is rebuilt.
    std::size_t size = 0;
    if (clGetProgramInfo(program_, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) == CL_SUCCESS &&
        size > 0) {
      std::string b(size, '\0');
      auto* p = reinterpret_cast<unsigned char*>(b.data());
      fs::create_directories(dir, ec);
      if (clGetProgramInfo(program_, CL_PROGRAM_BINARIES, sizeof p, &p, nullptr) == CL_SUCCESS &&
          fs::is_directory(dir, ec))
        store_verified(bin, b);
    }
  }
  cl_int e = CL_SUCCESS;
  kernel_ = clCreateKernel(program_, name_.c_str(), &e);
  if (e != CL_SUCCESS) {
    clReleaseProgram(program_);
    throw std::runtime_error(detail::cat("OPENCL: no kernel ", name_, " in the built program: ", cl_error(e),
                                         "\n--- source ---\n", src));
  }
}

CLProgram::~CLProgram() {
  clReleaseKernel(kernel_);
  clReleaseProgram(program_);
}

void CLProgram::operator()(const std::vector<std::int64_t>& global_size,
                           const std::vector<std::int64_t>& local_size, const std::vector<RawBuffer*>& bufs) {
  std::vector<std::size_t> global, local;
  for (std::int64_t g : global_size) global.push_back(static_cast<std::size_t>(g));
  for (std::int64_t l : local_size) local.push_back(static_cast<std::size_t>(l));
  if (global.empty()) global = {1};
  if (global.size() > 3 || (!local.empty() && local.size() != global.size()))
    throw std::invalid_argument(detail::cat("OPENCL: ", name_, ": global size has ",
                                            std::to_string(global.size()), " dimensions and local size ",
                                            std::to_string(local.size())));
  for (std::size_t d = 0; d < local.size(); ++d)  // kernels have no bounds checks: groups must tile exactly
    if (local[d] == 0 || global[d] % local[d] != 0)
      throw std::invalid_argument(detail::cat("OPENCL: ", name_, ": local size ", std::to_string(local[d]),
                                              " does not divide global size ", std::to_string(global[d])));
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    auto* b = dynamic_cast<RawOpenCLBuffer*>(bufs[i]);
    if (!b)
      throw std::invalid_argument(
          detail::cat("OPENCL: ", name_, ": buffer ", std::to_string(i), " is not a RawOpenCLBuffer"));
    cl_mem m = b->mem();
    cl_int e = clSetKernelArg(kernel_, static_cast<cl_uint>(i), sizeof m, &m);
    if (e != CL_SUCCESS)
      throw std::invalid_argument(
          detail::cat("OPENCL: ", name_, ": setting buffer ", std::to_string(i), " failed: ", cl_error(e)));
  }
  for (std::size_t g : global)
    if (g == 0) return;  // an empty NDRange is an error in OpenCL, and a no-op here
  cl_int e =
      clEnqueueNDRangeKernel(ctx_->queue, kernel_, static_cast<cl_uint>(global.size()), nullptr,
                             global.data(), local.empty() ? nullptr : local.data(), 0, nullptr, nullptr);
  if (e != CL_SUCCESS)
    throw std::runtime_error(detail::cat("OPENCL: launching ", name_, " failed: ", cl_error(e)));
  check(clFinish(ctx_->queue), "clFinish");
}

// ---- the device ----

namespace {

ASTRunner opencl_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype) {
  return cstyle_runner(ast, out_dtype, OpenCLCodegen::lang, codegen::Opts::opencl());
}

class CLBackend final : public OpenCLBackend {
 public:
  explicit CLBackend(const std::shared_ptr<CLContext>& ctx)
      : OpenCLBackend(
            [ctx](std::size_t n, DType dt) { return std::make_shared<RawOpenCLBuffer>(ctx, n, dt); },
            opencl_runner,
            [ctx](const std::string& name, const std::string& src) {
              return std::make_shared<CLProgram>(ctx, name, src);
            },
            /*concurrent_compiles=*/false,
            [ctx](const std::string& src) {
              return fs::exists(binary_path(*ctx, device_source(*ctx, src)));
            }),
        ctx_(ctx) {}
  std::string device_name() const override { return ctx_->name; }
  bool has_fp64() const override { return ctx_->fp64; }
  std::shared_ptr<Program> compile(const std::string& name, const std::string& src) override {
    return std::make_shared<CLProgram>(ctx_, name, src);
  }
  int compiles() const override { return builds; }

 private:
  std::shared_ptr<CLContext> ctx_;
};

}  // namespace

}  // namespace metagrad

// The plugin's entry point (runtime/backends/device_plugins.cpp loads it).
extern "C" metagrad::Backend* metagrad_make_opencl_backend() {
  return new metagrad::CLBackend(std::make_shared<metagrad::CLContext>());
}
