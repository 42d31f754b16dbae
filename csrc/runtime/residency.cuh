// How many CTAs of a non-persistent or occupancy-sized CUTLASS 2.x kernel are resident on an SM (the multistage
// templates sm80_gemm.cuh and sm80_grouped_gemm.cuh): a wave of such a kernel is that many CTAs per SM.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <string>

#include "device.h"

namespace wavetune::detail {

// CTAs of a kernel resident on an SM of a device (0: none fit, `error` says why).
struct Residency {
  int ctas_per_sm = 0;
  std::string error;
};

// The kernel's shared-memory limit is raised to `bytes` first (dynamic shared memory above 48 KB needs it).
inline Residency query_residency(const void* entry, int threads, int bytes, int device) {
  Residency r;
  if (bytes >= (48 << 10) &&
      cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next CUDA call does not report it
    int limit = 0;
    cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    r.error = "the kernel needs " + std::to_string(bytes / 1024) + " KB of shared memory per CTA; this GPU gives a "
              "CTA at most " + std::to_string(limit / 1024) + " KB (choose a variant with fewer stages or a "
              "smaller tile)";
    return r;
  }
  const cudaError_t error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r.ctas_per_sm, entry, threads, bytes);
  if (error != cudaSuccess || r.ctas_per_sm < 1) {
    cudaGetLastError();
    r.ctas_per_sm = 0;
    r.error = std::string("no CTA of the kernel fits an SM: ") + cudaGetErrorString(error);
  }
  return r;
}

// The residency of `Kernel` launched through its entry point `kEntry` (cutlass::Kernel or Kernel2 of it), read
// once per device.
template <class Kernel, auto kEntry>
const Residency& residency(int device) {
  static std::array<std::once_flag, kMaxDevices> done;
  static std::array<Residency, kMaxDevices> found;
  std::call_once(done.at(device), [device] {
    found[device] = query_residency(reinterpret_cast<const void*>(kEntry), Kernel::kThreadCount,
                                    int(sizeof(typename Kernel::SharedStorage)), device);
  });
  return found[device];
}

}  // namespace wavetune::detail
