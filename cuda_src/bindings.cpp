// pybind11 module kl_cuda: the CUDA C++ host launchers, taking raw device pointers (integers),
// sizes, strides (elements), a dtype code (0 float32, 1 float16, 2 bfloat16), the stream handle
// and the device index. No libtorch dependency: the Python adapter (backends/cuda_layer.py) passes
// tensor.data_ptr(), tensor.stride(0) and torch.cuda.current_stream().cuda_stream.
//
// Errors: std::invalid_argument -> ValueError (bad argument, named in the message),
// std::runtime_error -> RuntimeError (a CUDA call or launch failed, with CUDA's message).
#include <pybind11/pybind11.h>

#include "launchers.h"

namespace py = pybind11;

#ifdef KL_HAVE_GEMM
// Defined in cuda_src/gemm_bindings.cpp (the GEMM engineer's file); CMake defines KL_HAVE_GEMM
// when that file exists, so the module builds before and after it lands.
void bind_gemm_epilogue(pybind11::module_& m);
#endif

static py::dict plan_dict(const kl::SoftmaxPlan& p) {
  py::dict d;
  d["path"] = p.path;
  d["vec"] = p.vec;
  d["chunks"] = p.chunks;
  d["threads"] = p.threads;
  d["rows_per_block"] = p.rows_per_block;
  d["cluster"] = p.cluster;
  d["seg"] = p.seg;
  d["groups"] = p.groups;
  d["blocks_per_sm"] = p.blocks_per_sm;
  d["smem"] = p.smem;
  d["parts"] = p.parts;
  d["grid"] = p.grid;
  d["kernel"] = p.kernel;
  return d;
}

PYBIND11_MODULE(kl_cuda, m) {
  m.doc() = "kernel-layers CUDA C++ layer: vector_add and softmax launchers (raw device pointers)";
  m.attr("DTYPES") = py::dict(py::arg("float32") = 0, py::arg("float16") = 1, py::arg("bfloat16") = 2);

  m.def("vector_add", &kl::vector_add, "out[i] = x[i] + y[i] for i < n, launched on `stream`",
        py::arg("x"), py::arg("y"), py::arg("out"), py::arg("n"), py::arg("dtype"), py::arg("stream"),
        py::arg("device"), py::arg("grid") = 0, py::arg("block") = 0);
  m.def(
      "vector_add_plan",
      [](std::uintptr_t x, std::uintptr_t y, std::uintptr_t out, long long n, int dtype, int device, long long grid,
         int block) {
        const kl::VectorAddPlan p = kl::vector_add_plan(x, y, out, n, dtype, device, grid, block);
        py::dict d;
        d["vec"] = p.vec;
        d["head"] = p.head;
        d["unroll"] = p.unroll;
        d["block"] = p.block;
        d["grid"] = p.grid;
        return d;
      },
      "the launch configuration vector_add would use (no launch)", py::arg("x"), py::arg("y"), py::arg("out"),
      py::arg("n"), py::arg("dtype"), py::arg("device"), py::arg("grid") = 0, py::arg("block") = 0);

  m.def("softmax", &kl::softmax,
        "row softmax of x [M, N] (row stride sx) into out (row stride sy); path auto|warp|block|online|rows|smem|split "
        "(max_spin: split's polls before NaN, -1 = 2^20)",
        py::arg("path"), py::arg("x"), py::arg("out"), py::arg("M"), py::arg("N"), py::arg("sx"), py::arg("sy"),
        py::arg("dtype"), py::arg("stream"), py::arg("device"), py::arg("threads") = 0, py::arg("ept") = 0,
        py::arg("cluster") = 0, py::arg("blocks_per_sm") = 0, py::arg("max_spin") = -1);
  m.def(
      "softmax_plan",
      [](const std::string& path, std::uintptr_t x, std::uintptr_t out, long long M, long long N, long long sx,
         long long sy, int dtype, int device, int threads, int ept, int cluster, int blocks_per_sm) {
        return plan_dict(kl::softmax_plan(path, x, out, M, N, sx, sy, dtype, device, threads, ept, cluster,
                                          blocks_per_sm));
      },
      "the path, template instance and launch shape softmax would use (no launch)", py::arg("path"), py::arg("x"),
      py::arg("out"), py::arg("M"), py::arg("N"), py::arg("sx"), py::arg("sy"), py::arg("dtype"), py::arg("device"),
      py::arg("threads") = 0, py::arg("ept") = 0, py::arg("cluster") = 0, py::arg("blocks_per_sm") = 0);

#ifdef KL_HAVE_GEMM
  bind_gemm_epilogue(m);
  m.attr("HAS_GEMM") = true;
#else
  m.attr("HAS_GEMM") = false;
#endif
}
