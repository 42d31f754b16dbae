// Launch details shared by the CUTLASS templates (sm90_gemm.cuh, sm90_grouped_gemm.cuh, sm90_scaled_gemm.cuh,
// sm90_attention.cuh).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <string>
#include <tuple>

#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "device.h"
#include "programmatic_launch.cuh"
#include "wavetune/errors.h"

namespace wavetune::detail {

// NOTES: CUTLASS 4.2's ptr-array grouped kernels and its FMHA have no grid-dependency instructions, and its
// stream-K scheduler does not compile with them (sm90_tile_scheduler_stream_k.hpp, is_last_tile). Such a
// kernel runs as this subclass, which waits before the kernel's first instruction: launched programmatically,
// its launch and CTA start overlap the previous kernel's tail, and the next kernel's launch overlaps it.
template <class Kernel>
struct WaitsForPreviousGrid : Kernel {
  __device__ void operator()(const typename Kernel::Params& params, char* shared) {
    release_dependents_and_wait();
    Kernel::operator()(params, shared);
  }
};

// NOTES: CUTLASS's Adapter::initialize raises the kernel's dynamic shared-memory limit on every call, a
// driver call per launch; the limit belongs to the kernel on a device, so the templates set it once per
// device here and then do the rest of initialize (workspace, params) themselves.
template <class Kernel>
void allow_dynamic_shared_memory(int device) {
  static std::array<std::once_flag, kMaxDevices> done;
  std::call_once(done.at(device), [] {
    constexpr int bytes = Kernel::SharedStorageSize;
    if constexpr (bytes >= (48 << 10)) {
      cudaError_t error =
          cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (error != cudaSuccess) {
        cudaGetLastError();  // clear it, so the next CUDA call does not report it
        WAVETUNE_FAIL("cannot give the kernel ", bytes, " bytes of shared memory: ", cudaGetErrorString(error));
      }
    }
  });
}

// The sm90 warp-specialized mainloop and epilogue schedules of a GEMM kernel: ping-pong or cooperative, one
// GEMM or a ptr-array group of them, e4m3 block scales applied in the mainloop (FP8Blockwise) or not.
template <bool kPtrArray, bool kBlockScaled, bool kCooperative>
using Sm90MainloopSchedule = std::tuple_element_t<
    4 * kPtrArray + 2 * kBlockScaled + kCooperative,
    std::tuple<cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
               cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
               cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>>;
template <bool kPtrArray, bool kCooperative>
using Sm90EpilogueSchedule = std::tuple_element_t<
    2 * kPtrArray + kCooperative,
    std::tuple<cutlass::epilogue::TmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecializedCooperative,
               cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>>;

// A GemmUniversal kernel's tile-scheduler arguments from the run-time micro parameters; the stream-K
// scheduler's decomposition and split count only where the kernel has that scheduler.
template <bool kStreamK, class SchedulerArguments>
void set_scheduler(SchedulerArguments& scheduler, const MicroParams& micro) {
  using RasterOrder = cutlass::gemm::kernel::detail::RasterOrderOptions;
  scheduler.raster_order = micro.raster == Raster::along_m   ? RasterOrder::AlongM
                           : micro.raster == Raster::along_n ? RasterOrder::AlongN
                                                             : RasterOrder::Heuristic;
  scheduler.max_swizzle_size = micro.max_swizzle;
  if constexpr (kStreamK) {
    using Mode = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
    scheduler.splits = micro.splits;
    scheduler.decomposition_mode = micro.decomposition == Decomposition::data_parallel ? Mode::DataParallel
                                   : micro.decomposition == Decomposition::split_k     ? Mode::SplitK
                                   : micro.decomposition == Decomposition::stream_k    ? Mode::StreamK
                                                                                       : Mode::Heuristic;
    // Deterministic (turnstile) reduction: results do not depend on which CTA finishes first.
    scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
  }
}

// Checks, initializes the workspace and launches a GemmUniversal kernel through its adapter; `problem()`
// names the call in errors ("M=... N=... K=..."), built only when one is raised.
template <class Adapter, class Describe>
void launch_gemm_universal(const typename Adapter::Arguments& args, const DeviceInfo& dev, void* workspace,
                           size_t workspace_bytes, bool programmatic, Stream stream, Describe problem) {
  using Kernel = typename Adapter::GemmKernel;
  cutlass::Status status = Adapter::can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    WAVETUNE_INVALID("CUTLASS cannot implement ", problem(), ": ", cutlassGetStatusString(status));
  }
  require_workspace(Adapter::get_workspace_size(args), workspace, workspace_bytes);
  allow_dynamic_shared_memory<Kernel>(dev.device);
  status = Kernel::initialize_workspace(args, workspace, stream);
  if (status != cutlass::Status::kSuccess) {
    WAVETUNE_FAIL("CUTLASS initialize_workspace failed: ", cutlassGetStatusString(status), " (", problem(), ")");
  }
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
  status = Adapter::run(params, stream, nullptr, programmatic);
  const cudaError_t launch = cudaGetLastError();
  if (status != cutlass::Status::kSuccess || launch != cudaSuccess) {
    WAVETUNE_FAIL("kernel launch failed: ", cutlassGetStatusString(status), ", ", cudaGetErrorString(launch), " (",
                  problem(), ")");
  }
}

}  // namespace wavetune::detail
