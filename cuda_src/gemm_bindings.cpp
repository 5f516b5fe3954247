// pybind11 bindings of the gemm_epilogue launchers (cuda_src/gemm_epilogue.cu).
//
// Every function takes raw device pointers as integers (tensor.data_ptr()), sizes and row strides
// in elements, a dtype code (1 float16, 2 bfloat16), an activation code (0 none, 1 relu, 2 gelu
// tanh), has_bias, the stream handle as an integer (torch.cuda.current_stream().cuda_stream) and
// the device index. Bad arguments raise ValueError naming the argument; CUDA failures raise
// RuntimeError with CUDA's message.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "gemm_api.cuh"

namespace py = pybind11;

namespace {

klgemm::GemmArgs make_args(std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M,
                           long long N, long long K, long long lda, long long ldb, long long ldc, int dtype, int act,
                           bool has_bias, std::uintptr_t stream, int device) {
  klgemm::GemmArgs g;
  g.a = reinterpret_cast<const void*>(a);
  g.b = reinterpret_cast<const void*>(b);
  g.bias = has_bias ? reinterpret_cast<const void*>(bias) : nullptr;
  g.c = reinterpret_cast<void*>(c);
  g.M = M;
  g.N = N;
  g.K = K;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.dtype = dtype;
  g.act = act;
  g.has_bias = has_bias ? 1 : 0;
  g.stream = reinterpret_cast<void*>(stream);
  g.device = device;
  return g;
}

#define KLG_ARGS                                                                                        \
  py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("c"), py::arg("M"), py::arg("N"), py::arg("K"), \
      py::arg("lda"), py::arg("ldb"), py::arg("ldc"), py::arg("dtype"), py::arg("act"), py::arg("has_bias"), \
      py::arg("stream") = 0, py::arg("device") = -1

}  // namespace

void bind_gemm_epilogue(py::module_& m) {
  m.def(
      "gemm_epilogue_wgmma",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device, int tile_n, int group_m, int max_ctas) {
        klgemm::WgmmaConfig cfg;
        cfg.tile_n = tile_n;
        cfg.group_m = group_m;
        cfg.max_ctas = max_ctas;
        klgemm::gemm_epilogue_wgmma(make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device),
                                    cfg);
      },
      KLG_ARGS, py::arg("tile_n") = 256, py::arg("group_m") = 8, py::arg("max_ctas") = 0,
      "C = act(A @ B + bias) on the Hopper path: TMA ring + warp-specialised wgmma (sm_90a). "
      "Needs K, N, lda, ldb multiples of 8 and 16-byte aligned a, b.");
  m.def(
      "gemm_epilogue_pingpong",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device, int group_m, int max_ctas, int cluster_m) {
        klgemm::PingpongConfig cfg;
        cfg.group_m = group_m;
        cfg.max_ctas = max_ctas;
        cfg.cluster_m = cluster_m;
        klgemm::gemm_epilogue_pingpong(
            make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device), cfg);
      },
      KLG_ARGS, py::arg("group_m") = 8, py::arg("max_ctas") = 0, py::arg("cluster_m") = 1,
      "C = act(A @ B + bias) on the Hopper ping-pong path: TMA ring, two consumer warpgroups on alternating "
      "128x128 tiles, TMA-store epilogue (sm_90a); cluster_m=2 pairs CTAs and multicasts B. Needs K, N, lda, "
      "ldb, ldc multiples of 8 and 16-byte aligned a, b, c.");
  m.def(
      "gemm_pingpong_unsupported",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device) -> py::object {
        std::string why = klgemm::gemm_pingpong_unsupported(
            make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device));
        if (why.empty()) return py::none();
        return py::str(why);
      },
      KLG_ARGS, "None when the ping-pong Hopper kernel can run these arguments on this device, else the reason.");
  m.def(
      "gemm_epilogue_mma",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device) {
        klgemm::gemm_epilogue_mma(make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device));
      },
      KLG_ARGS, "C = act(A @ B + bias) on the portable path: mma.sync + ldmatrix + cp.async ring (sm_80+), any shape.");
  m.def(
      "gemm_epilogue",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device, const std::string& hopper) {
        return klgemm::gemm_epilogue_auto(
            make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device), hopper);
      },
      KLG_ARGS, py::arg("hopper") = "wgmma",
      "Dispatcher: a Hopper kernel when it can run these arguments (hopper=\"wgmma\": cooperative 128x256, "
      "\"pingpong\": ping-pong 128x128, \"pingpong_c2\": the same in 2x1 clusters; both fall back to wgmma), else the portable path. Returns the path used.");
  m.def(
      "gemm_wgmma_unsupported",
      [](std::uintptr_t a, std::uintptr_t b, std::uintptr_t bias, std::uintptr_t c, long long M, long long N,
         long long K, long long lda, long long ldb, long long ldc, int dtype, int act, bool has_bias,
         std::uintptr_t stream, int device) -> py::object {
        std::string why = klgemm::gemm_wgmma_unsupported(
            make_args(a, b, bias, c, M, N, K, lda, ldb, ldc, dtype, act, has_bias, stream, device));
        if (why.empty()) return py::none();
        return py::str(why);
      },
      KLG_ARGS, "None when the Hopper path can run these arguments on this device, else the reason.");
  m.def(
      "gemm_kernel_attributes",
      [](int device) {
        py::dict out;
        for (const auto& k : klgemm::gemm_kernel_attributes(device))
          out[py::str(k.name)] = py::dict(py::arg("registers") = k.registers, py::arg("local_bytes") = k.local_bytes,
                                          py::arg("static_smem") = k.static_smem,
                                          py::arg("dynamic_smem") = k.dynamic_smem,
                                          py::arg("ptx_version") = k.ptx_version,
                                          py::arg("binary_version") = k.binary_version);
        return out;
      },
      py::arg("device") = -1, "Per-kernel registers, local (spill) bytes and shared memory from cudaFuncGetAttributes.");
  py::dict cfg;
  cfg["wgmma"] = py::dict(py::arg("tile_m") = 128, py::arg("tile_n") = 256, py::arg("tile_k") = 64,
                          py::arg("stages") = 4, py::arg("threads") = 384, py::arg("group_m") = 8,
                          py::arg("schedule") = "persistent, 1 producer + 2 consumer warpgroups");
  cfg["pingpong"] = py::dict(py::arg("tile_m") = 128, py::arg("tile_n") = 128, py::arg("tile_k") = 64,
                             py::arg("stages") = 5, py::arg("threads") = 384, py::arg("group_m") = 8,
                             py::arg("epilogue") = "stmatrix -> swizzled smem -> TMA store",
                             py::arg("cluster_m") = 1,
                             py::arg("schedule") = "persistent, 1 producer + 2 consumer warpgroups on alternating tiles");
  cfg["pingpong_c2"] = py::dict(py::arg("tile_m") = 128, py::arg("tile_n") = 128, py::arg("tile_k") = 64,
                                py::arg("stages") = 5, py::arg("threads") = 384, py::arg("group_m") = 8,
                                py::arg("epilogue") = "stmatrix -> swizzled smem -> TMA store", py::arg("cluster_m") = 2,
                                py::arg("schedule") = "as pingpong, 2x1 clusters with TMA multicast of B");
  cfg["mma"] = py::dict(py::arg("tile_m") = 128, py::arg("tile_n") = 128, py::arg("tile_k") = 32,
                        py::arg("stages") = 4, py::arg("threads") = 256, py::arg("warp_tile") = "64x32");
  m.attr("gemm_config") = cfg;
}
