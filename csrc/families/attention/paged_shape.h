// The paged attention kernels' fixed shapes (sm90_paged_attention.cuh, sm90_paged_attention_ws.cuh), which their
// wave model (paged_model.h) reads too: host-only, no CUDA.
#pragma once

namespace wavetune::detail::paged {

constexpr int kRows = 16;           // rows per tile (an mma's M)
constexpr int kTileKeys = 16;       // keys per warp step (an mma's K for P V)
constexpr int kWarpgroupRows = 64;  // query rows per computing warpgroup of the warp-specialized kernels (a wgmma's M)
constexpr int kWsCopyWarps = 4;     // the warp-specialized kernels' copying warpgroup

}  // namespace wavetune::detail::paged
