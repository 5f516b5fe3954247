// pybind11 module kl_cuda: the CUDA C++ layer's kernels and ONE generic launcher.
//
// The planner is Python (cuda_src/dispatch.py): it picks the kernel instance, the grid, the block,
// the dynamic shared memory, the cluster size and the argument list for a case. This module only
//   - resolves an instance name to its function (`kernel`, `kernels`),
//   - reports what the runtime knows of it (`attributes`, `occupancy`, `max_active_clusters`),
//   - sets its function attributes once (`set_attributes`),
//   - encodes TMA descriptors (`encode_tma`),
//   - and launches prepared plans: `Launch(device, steps)` is built once in `prepare`, and calling
//     it with a stream handle enqueues every step (zero fills, then the kernel) on that stream.
// No libtorch dependency: pointers, sizes and the stream are integers. Bad arguments raise
// ValueError naming the argument; a failed CUDA call raises RuntimeError with CUDA's message.
#include <cuda.h>  // CUtensorMap and its enums only: the driver entry point comes from cudart
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kl_registry.h"

namespace py = pybind11;

namespace kl {

// ---- the kernel table ----------------------------------------------------------------------------
static std::map<std::string, const void*>& table() {
  static std::map<std::string, const void*> t;  // filled by static registrars before main / import
  return t;
}

void register_kernels(const KernelEntry* entries, int count) {
  for (int i = 0; i < count; ++i) table()[entries[i].name] = entries[i].fn;
}

static const void* lookup(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) throw std::invalid_argument("kernel: no compiled instance named '" + name + "'");
  return it->second;
}

static const void* as_fn(std::uintptr_t fn) {
  for (const auto& e : table())
    if (reinterpret_cast<std::uintptr_t>(e.second) == fn) return e.second;
  throw std::invalid_argument("fn: " + std::to_string(fn) + " is not a kernel of this module");
}

// ---- errors --------------------------------------------------------------------------------------
[[noreturn]] static void cuda_fail(cudaError_t e, const char* what) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                           ") in " + what);
}
#define KL_CHECK(call)                                        \
  do {                                                        \
    cudaError_t kl_err_ = (call);                             \
    if (kl_err_ != cudaSuccess) ::kl::cuda_fail(kl_err_, #call); \
  } while (0)

// Makes `device` current for a scope and restores the caller's device after.
struct DeviceScope {
  int prev = -1;
  explicit DeviceScope(int device) {
    if (device < 0) throw std::invalid_argument("device: must be >= 0, got " + std::to_string(device));
    int cur = 0;
    KL_CHECK(cudaGetDevice(&cur));
    if (cur != device) {
      KL_CHECK(cudaSetDevice(device));
      prev = cur;
    }
  }
  ~DeviceScope() {
    if (prev >= 0) cudaSetDevice(prev);
  }
};

// ---- facts and attributes --------------------------------------------------------------------------
static py::dict attributes(std::uintptr_t fn, int device) {
  DeviceScope scope(device);
  cudaFuncAttributes a;
  KL_CHECK(cudaFuncGetAttributes(&a, as_fn(fn)));
  py::dict d;
  d["registers"] = a.numRegs;
  d["local_bytes"] = (long long)a.localSizeBytes;
  d["static_smem"] = (long long)a.sharedSizeBytes;
  d["max_threads"] = a.maxThreadsPerBlock;
  d["ptx_version"] = a.ptxVersion;  // 90: the sm_90a cubin runs; 80: the driver JIT-compiled compute_80 PTX
  d["binary_version"] = a.binaryVersion;
  return d;
}

static void set_attributes(std::uintptr_t fn, int device, long long max_dynamic_smem, int carveout,
                           bool nonportable_cluster) {
  DeviceScope scope(device);
  const void* f = as_fn(fn);
  if (max_dynamic_smem > 0)
    KL_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_dynamic_smem));
  if (carveout >= 0) KL_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
  if (nonportable_cluster) KL_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

static int occupancy(std::uintptr_t fn, int device, int block, long long smem) {
  DeviceScope scope(device);
  int n = 0;
  KL_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, as_fn(fn), block, (size_t)smem));
  return n;
}

static int max_active_clusters(std::uintptr_t fn, int device, int grid, int block, long long smem, int cluster) {
  DeviceScope scope(device);
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.gridDim = dim3(grid);
  lc.blockDim = dim3(block);
  lc.dynamicSmemBytes = (size_t)smem;
  lc.attrs = attr;
  lc.numAttrs = 1;
  int n = 0;
  KL_CHECK(cudaOccupancyMaxActiveClusters(&n, as_fn(fn), &lc));
  return n;
}

static py::dict device_info(int device) {
  DeviceScope scope(device);
  py::dict d;
  int v = 0;
  KL_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
  d["sms"] = v;
  int major = 0, minor = 0;
  KL_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  KL_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  d["cc"] = py::make_tuple(major, minor);
  KL_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  d["smem_optin"] = v;
  KL_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  d["smem_per_sm"] = v;
  KL_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrCooperativeLaunch, device));
  d["cooperative"] = v != 0;
  return d;
}

// ---- TMA descriptors: cuTensorMapEncodeTiled through cudart's driver entry point (no -lcuda) -----
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiledFn encode_fn() {
  static std::once_flag once;
  static EncodeTiledFn fn = nullptr;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    KL_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiledFn>(p);
  });
  if (!fn) throw std::runtime_error("cuTensorMapEncodeTiled is not available from the CUDA driver");
  return fn;
}

// A 2-D row-major tensor [rows, cols] of 16-bit elements (cols contiguous, row stride ld elements),
// boxes of [box_rows, box_cols], the 128-byte swizzle; 128 opaque bytes for a __grid_constant__ arg.
// `outer`: further dimensions outside the rows, each (size, stride in elements), boxes of 1 there
// (attention's (D, S, H, B) view: a box stops at its own head's rows); at most 3 (rank 5).
static py::bytes encode_tma(std::uintptr_t ptr, int dtype, unsigned long long rows, unsigned long long cols,
                            unsigned long long ld, unsigned box_rows, unsigned box_cols,
                            const std::vector<std::pair<unsigned long long, unsigned long long>>& outer) {
  if (dtype != 1 && dtype != 2) throw std::invalid_argument("dtype: 1 (float16) or 2 (bfloat16), got " + std::to_string(dtype));
  if (ptr % 16) throw std::invalid_argument("ptr: TMA needs a 16-byte aligned base address");
  if ((ld * 2) % 16) throw std::invalid_argument("ld: TMA needs a row stride that is a multiple of 16 bytes");
  if (outer.size() > 3) throw std::invalid_argument("outer: at most 3 dimensions beyond the rows (rank 5)");
  CUtensorMap map;
  cuuint64_t dims[5] = {cols, rows, 1, 1, 1};
  cuuint64_t strides[4] = {ld * 2, 0, 0, 0};
  cuuint32_t box[5] = {box_cols, box_rows, 1, 1, 1};
  cuuint32_t estr[5] = {1, 1, 1, 1, 1};
  for (size_t i = 0; i < outer.size(); ++i) {
    if ((outer[i].second * 2) % 16)
      throw std::invalid_argument("outer: TMA needs strides that are multiples of 16 bytes, got " +
                                  std::to_string(outer[i].second) + " elements");
    dims[2 + i] = outer[i].first;
    strides[1 + i] = outer[i].second * 2;
  }
  CUresult r = encode_fn()(&map, dtype == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                           (cuuint32_t)(2 + outer.size()), reinterpret_cast<void*>(ptr), dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string((int)r) + ")");
  static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
  return py::bytes(reinterpret_cast<const char*>(&map), sizeof(map));
}

// ---- the launcher ----------------------------------------------------------------------------------
struct alignas(64) Chunk {
  unsigned char b[64];
};

struct Step {
  const void* fn = nullptr;
  dim3 grid, block;
  size_t smem = 0;
  int cluster = 1;  // > 1: given as a launch attribute (kernels without compile-time cluster dims)
  bool cooperative = false;
  std::vector<Chunk> blob;    // the argument values, each at the offset the planner packed it at
  std::vector<void*> args;    // pointers into blob, one per kernel parameter
  std::vector<std::pair<void*, size_t>> zero;  // buffers zeroed on the stream before the kernel
};

class Launch {
 public:
  // steps: [(fn, (gx, gy, gz), block, smem, cluster, cooperative, blob, offsets, [(ptr, bytes), ...]), ...]
  Launch(int device, const py::list& steps) : device_(device) {
    if (device < 0) throw std::invalid_argument("device: must be >= 0");
    for (const auto& item : steps) {
      auto t = item.cast<py::tuple>();
      if (t.size() != 9) throw std::invalid_argument("steps: each step is a 9-tuple");
      Step s;
      s.fn = as_fn(t[0].cast<std::uintptr_t>());
      auto g = t[1].cast<std::tuple<long long, long long, long long>>();
      const long long gx = std::get<0>(g), gy = std::get<1>(g), gz = std::get<2>(g);
      if (gx < 0 || gy < 0 || gz < 0 || gx > 2147483647LL || gy > 65535 || gz > 65535)
        throw std::invalid_argument("grid: out of range");
      if (gx == 0 || gy == 0 || gz == 0) continue;  // nothing to do (an empty problem)
      s.grid = dim3((unsigned)gx, (unsigned)gy, (unsigned)gz);
      const int block = t[2].cast<int>();
      if (block < 1 || block > 1024) throw std::invalid_argument("block: must be in [1, 1024], got " + std::to_string(block));
      s.block = dim3(block);
      const long long smem = t[3].cast<long long>();
      if (smem < 0) throw std::invalid_argument("smem: must be >= 0");
      s.smem = (size_t)smem;
      s.cluster = t[4].cast<int>();
      if (s.cluster < 1 || s.cluster > 16) throw std::invalid_argument("cluster: must be in [1, 16]");
      s.cooperative = t[5].cast<bool>();
      const std::string blob = t[6].cast<std::string>();
      s.blob.resize((blob.size() + sizeof(Chunk) - 1) / sizeof(Chunk) + 1);
      std::memcpy(s.blob.data(), blob.data(), blob.size());
      for (const auto& o : t[7].cast<py::list>()) {
        const long long off = o.cast<long long>();
        if (off < 0 || (size_t)off >= blob.size()) throw std::invalid_argument("offsets: outside the argument blob");
        s.args.push_back(reinterpret_cast<unsigned char*>(s.blob.data()) + off);
      }
      for (const auto& z : t[8].cast<py::list>()) {
        auto zp = z.cast<std::pair<std::uintptr_t, long long>>();
        if (zp.first == 0 || zp.second < 0) throw std::invalid_argument("zero: (pointer, bytes) with a device pointer");
        s.zero.push_back({reinterpret_cast<void*>(zp.first), (size_t)zp.second});
      }
      steps_.push_back(std::move(s));
    }
  }

  // Enqueue every step on `stream` (torch.cuda.current_stream().cuda_stream): nothing here
  // synchronises, allocates or touches another stream, so a CUDA-graph capture records it all.
  void operator()(std::uintptr_t stream) {
    DeviceScope scope(device_);
    const cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    for (auto& s : steps_) {
      for (const auto& z : s.zero) KL_CHECK(cudaMemsetAsync(z.first, 0, z.second, st));
      void** args = s.args.data();
      if (s.cooperative) {
        KL_CHECK(cudaLaunchCooperativeKernel(s.fn, s.grid, s.block, args, s.smem, st));
      } else if (s.cluster > 1) {
        cudaLaunchConfig_t lc = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)s.cluster;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        lc.gridDim = s.grid;
        lc.blockDim = s.block;
        lc.dynamicSmemBytes = s.smem;
        lc.stream = st;
        lc.attrs = attr;
        lc.numAttrs = 1;
        KL_CHECK(cudaLaunchKernelExC(&lc, s.fn, args));
      } else {
        KL_CHECK(cudaLaunchKernel(s.fn, s.grid, s.block, args, s.smem, st));
      }
    }
  }

  size_t size() const { return steps_.size(); }

 private:
  int device_;
  std::vector<Step> steps_;
};

}  // namespace kl

PYBIND11_MODULE(kl_cuda, m) {
  m.doc() = "kernel-layers CUDA C++ layer: compiled kernel instances and one generic launcher (plans from dispatch.py)";
  m.def("kernels", [] {
    std::vector<std::string> names;
    for (const auto& e : kl::table()) names.push_back(e.first);
    return names;
  }, "names of every compiled kernel instance");
  m.def("kernel", [](const std::string& name) { return reinterpret_cast<std::uintptr_t>(kl::lookup(name)); },
        py::arg("name"), "the function handle (an integer) of a compiled instance, e.g. 'softmax_warp_kernel<float, 4, 8>'");
  m.def("attributes", &kl::attributes, py::arg("fn"), py::arg("device"),
        "cudaFuncGetAttributes of a kernel: registers, local (spill) bytes, static shared memory, PTX/binary version");
  m.def("set_attributes", &kl::set_attributes, py::arg("fn"), py::arg("device"), py::arg("max_dynamic_smem") = 0,
        py::arg("carveout") = -1, py::arg("nonportable_cluster") = false,
        "function attributes a plan needs, set once in prepare (never in the launch path)");
  m.def("occupancy", &kl::occupancy, py::arg("fn"), py::arg("device"), py::arg("block"), py::arg("smem") = 0,
        "resident blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor)");
  m.def("max_active_clusters", &kl::max_active_clusters, py::arg("fn"), py::arg("device"), py::arg("grid"),
        py::arg("block"), py::arg("smem"), py::arg("cluster"), "clusters of `cluster` CTAs co-resident at once");
  m.def("device_info", &kl::device_info, py::arg("device"), "SM count, compute capability, shared memory limits");
  m.def("encode_tma", &kl::encode_tma, py::arg("ptr"), py::arg("dtype"), py::arg("rows"), py::arg("cols"),
        py::arg("ld"), py::arg("box_rows"), py::arg("box_cols"),
        py::arg("outer") = std::vector<std::pair<unsigned long long, unsigned long long>>(),
        "128-byte CUtensorMap of a row-major 16-bit [rows, cols] tensor, [box_rows, box_cols] boxes, 128-byte swizzle; "
        "outer: further (size, stride) dimensions, boxes of 1");
  py::class_<kl::Launch>(m, "Launch", "a prepared plan: Launch(device, steps)(stream) enqueues it on `stream`")
      .def(py::init<int, const py::list&>(), py::arg("device"), py::arg("steps"))
      .def("__call__", &kl::Launch::operator(), py::arg("stream"))
      .def("__len__", &kl::Launch::size);
}
