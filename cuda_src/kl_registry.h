// The kernel table of the pybind11 module: every compiled template instance by the name the planner
// (dispatch.py) and NVRTC use for it, e.g. "softmax_warp_kernel<float, 4, 8>". The build generates
// one translation unit per kernel source that includes the source and registers its instances
// (dispatch.py --emit-instances); bindings.cpp resolves names to function pointers.
#pragma once

namespace kl {

struct KernelEntry {
  const char* name;
  const void* fn;
};

void register_kernels(const KernelEntry* entries, int count);

struct KernelRegistrar {
  KernelRegistrar(const KernelEntry* entries, int count) { register_kernels(entries, count); }
};

}  // namespace kl
