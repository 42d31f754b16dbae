// What an architecture offers the kernels beyond Ampere, by compute capability as 10 * major + minor (80, 86,
// 89, 90, 100, 120): that of a device, or that of the code the driver loaded for a kernel (kernel_code_arch in
// programmatic_launch.cuh), which is 80 for a kernel JIT-compiled from compute_80 PTX on any GPU. Host-only, so
// that the families' choices can ask too.
#pragma once

namespace wavetune::detail {

// Thread block clusters and distributed shared memory (the paged attention kernels' cluster merge).
constexpr bool clusters_supported(int compute_capability) { return compute_capability >= 90; }

// Programmatic dependent launch: griddepcontrol in the kernels, the stream-serialization launch attribute.
constexpr bool programmatic_launch_supported(int compute_capability) { return compute_capability >= 90; }

}  // namespace wavetune::detail
