// The CUTLASS template behind every attention variant (cutlass_configs/sm90_attention.toml): the Hopper
// FMHA forward kernel of CUTLASS's example 88 (TMA warp-specialized, fp32 softmax and accumulation,
// output in the input type plus an fp32 log-sum-exp per row), instantiated from the nvidia-cutlass
// package's headers. Each variant compiles two kernels, unmasked and bottom-right causal, because the
// mask is part of the problem, not of the choice. Generated sources instantiate it once per translation
// unit with WAVETUNE_ATTENTION_INSTANTIATE_VARIANT.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "88_hopper_fmha/collective/fmha_collective_tma_warpspecialized.hpp"
#include "88_hopper_fmha/collective/fmha_epilogue.hpp"
#include "88_hopper_fmha/collective/fmha_fusion.hpp"
#include "88_hopper_fmha/kernel/fmha_kernel_tma_warpspecialized.hpp"
#include "88_hopper_fmha/kernel/fmha_options.hpp"
#include "88_hopper_fmha/kernel/fmha_tile_scheduler.hpp"
#include "attention_ops.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass_launch.cuh"
#include "wavetune/errors.h"

namespace wavetune::detail {

// NOTES: CUTLASS's CausalFusion puts the queries at the start of the keys (top-left), which is right for
// training on one sequence; in inference the queries are the newest tokens (a prefill after a cached
// prefix, a chunked prefill), so row i sees keys j <= i + keys - rows (bottom-right, FlashAttention's
// convention). The KV tiles left of the block's first row's diagonal run unmasked, the rest masked.
struct BottomRightCausalFusion : cutlass::fmha::collective::DefaultFusion {
  template <class ProblemSize>
  CUTLASS_HOST_DEVICE static int offset(ProblemSize const& p) {
    return cute::get<3>(p) - cute::get<2>(p);
  }

  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_trip_count(BlkCoord const& blk, TileShape const& tile, ProblemSize const& p) {
    // Keys [0, seen) are visible to some row of the block (its last row sees the most).
    const int seen = (cute::get<0>(blk) + 1) * cute::get<0>(tile) + offset(p);
    return std::min(cute::ceil_div(cute::get<3>(p), cute::get<1>(tile)),
                    cute::ceil_div(std::max(seen, 0), cute::get<1>(tile)));
  }

  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_unmasked_trip_count(BlkCoord const& blk, TileShape const& tile, ProblemSize const& p) {
    // Whole tiles that the block's first row sees entirely need no mask.
    const int first_row_sees = cute::get<0>(blk) * cute::get<0>(tile) + offset(p) + 1;
    return std::min(get_trip_count(blk, tile, p), std::max(first_row_sees, 0) / int(cute::get<1>(tile)));
  }

  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_masked_trip_count(BlkCoord const& blk, TileShape const& tile, ProblemSize const& p) {
    return get_trip_count(blk, tile, p) - get_unmasked_trip_count(blk, tile, p);
  }

  template <class AccQK, class IndexQK, class ProblemSize>
  CUTLASS_DEVICE void before_softmax(AccQK& acc_qk, IndexQK const& index_qk, ProblemSize const& p) {
    const int off = offset(p);
    const int keys = cute::get<3>(p);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(acc_qk); i++) {
      auto pos = index_qk(i);
      if (cute::get<1>(pos) > cute::get<0>(pos) + off || cute::get<1>(pos) >= keys) acc_qk(i) = -INFINITY;
    }
  }
};

// NOTES: the hardware dispatches CTAs in blockIdx order, x fastest. CUTLASS's individual scheduler puts
// the query tiles of one head on x, lightest (first) first, so under a causal mask every head ends with
// its heaviest tile and the last head's heavy tiles run alone at the end of the grid. Here each head's
// query tiles run heaviest first: the grid ends on light tiles, and CTAs that run together still share
// their head's K and V in L2. (Putting all heads' heaviest tiles first instead loses that sharing: on a
// 10 x 2488-token GQA prefill, H100, that order ran 1.37x slower than the persistent kernel in the same
// run; this one 0.94x its time, in a later run.)
struct HeaviestFirstTileScheduler {
  struct Params {
    dim3 grid;
  };
  bool valid = true;

  CUTLASS_DEVICE explicit HeaviestFirstTileScheduler(Params const&) {}

  template <class ProblemSize, class ClusterShape, class TileShape>
  static Params to_underlying_arguments(ProblemSize const& p, cutlass::KernelHardwareInfo, ClusterShape const&,
                                        TileShape const& tile) {
    return {dim3(cute::ceil_div(cute::size<2>(p), cute::size<0>(tile)), cute::size<0>(p), cute::size<1>(p))};
  }
  static dim3 get_grid_shape(Params const& params) { return params.grid; }
  CUTLASS_DEVICE bool is_valid() const { return valid; }
  CUTLASS_DEVICE auto get_block_coord() const {
    return cute::make_coord(int(gridDim.x - 1 - blockIdx.x), cute::_0{}, cute::make_coord(int(blockIdx.y), int(blockIdx.z)));
  }
  CUTLASS_DEVICE HeaviestFirstTileScheduler& operator++() {
    valid = false;
    return *this;
  }
};

template <DType kDType, Schedule kSchedule, int kBlockQ, int kBlockKV, int kHeadDim, TileScheduler kScheduler>
struct Sm90Attention {
  using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  using TileShape = cute::Shape<cute::Int<kBlockQ>, cute::Int<kBlockKV>, cute::Int<kHeadDim>>;
  // (rows, head dim, (B, H)): rows strided, head dim contiguous, two batch modes.
  using StrideQKVO = cute::tuple<int, cute::_1, cute::tuple<int, int>>;
  using StrideLSE = cute::tuple<cute::_1, cute::tuple<int, int>>;
  static constexpr bool kPersistent = kScheduler == TileScheduler::persistent;
  static constexpr bool kPingpong = kSchedule == Schedule::pingpong;
  static_assert(!kPingpong || kPersistent, "CUTLASS's ping-pong FMHA is persistent");
  template <auto kTag, class Value>
  using Option = cutlass::fmha::kernel::Option<kTag, Value>;
  using Tag = cutlass::fmha::kernel::Tag;
  // What CUTLASS's FmhaBuilder composes, with the scheduler chosen here: one consumer warpgroup per 64
  // query rows; ping-pong loads each warpgroup's queries separately and interleaves their work.
  using Options = cute::tuple<Option<Tag::kNumMmaWarpGroups, cute::Int<kBlockQ / 64>>,
                              Option<Tag::kIsPersistent, std::bool_constant<kPersistent>>,
                              Option<Tag::kLoadsQSeparately, std::bool_constant<kPingpong>>>;
  using Scheduler = std::conditional_t<kPersistent, cutlass::fmha::kernel::PersistentTileScheduler, HeaviestFirstTileScheduler>;

  template <class Fusion, class... Opts>
  static auto compose(cute::tuple<Opts...>) {
    using Mainloop = cutlass::fmha::collective::FmhaMainloopTmaWarpSpecialized<Element, float, float, TileShape,
                                                                              StrideQKVO, StrideQKVO, StrideQKVO, Fusion, Opts...>;
    using Epilogue = cutlass::fmha::collective::FmhaFwdEpilogue<Element, float, typename Mainloop::TileShapePV>;
    return cutlass::fmha::kernel::FmhaKernelTmaWarpSpecialized<Mainloop, Epilogue, Scheduler, Opts...>{};
  }
  template <class Fusion>
  using Kernel = decltype(compose<Fusion>(Options{}));
  using Unmasked = Kernel<cutlass::fmha::collective::ResidualFusion>;
  using Causal = Kernel<BottomRightCausalFusion>;

  template <class Fmha>
  static void launch(const FmhaCall& c, const DeviceInfo& dev, Stream stream) {
    using K = WaitsForPreviousGrid<Fmha>;
    auto stride = [](int64_t row, int64_t b, int64_t h) { return StrideQKVO{int(row), {}, {int(b), int(h)}}; };
    typename K::Arguments arguments{
        {c.b, c.h, c.rows, c.keys, c.head_dim},
        {static_cast<const Element*>(c.q), stride(c.q_row, c.q_b, c.q_h), static_cast<const Element*>(c.k),
         stride(c.k_row, c.k_b, c.k_h), static_cast<const Element*>(c.v), stride(c.v_row, c.v_b, c.v_h)},
        {static_cast<Element*>(c.o), stride(c.o_row, c.o_b, c.o_h), c.lse, StrideLSE{{}, {int(c.lse_b), int(c.lse_h)}}},
        cutlass::KernelHardwareInfo{dev.device, dev.sm_count}};
    typename K::Params params = K::to_underlying_arguments(arguments, nullptr);
    params.mainloop.scale_softmax = c.scale;
    params.mainloop.scale_softmax_log2 = c.scale * float(M_LOG2E);
    allow_dynamic_shared_memory<K>(dev.device);
    void* args[] = {&params};
    const cudaError_t error = launch_programmatic(reinterpret_cast<const void*>(cutlass::device_kernel<K>),
                                                  K::get_grid_shape(params), K::get_block_shape(),
                                                  K::SharedStorageSize, stream, args);
    if (error != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("attention kernel launch failed: ", cudaGetErrorString(error), " (B=", c.b, " H=", c.h,
                    " rows=", c.rows, " keys=", c.keys, ")");
    }
  }

  static void run(const FmhaCall& c, const DeviceInfo& dev, Stream stream) {
    if (c.causal) {
      launch<Causal>(c, dev, stream);
    } else {
      launch<Unmasked>(c, dev, stream);
    }
  }

  static constexpr AttentionVariantOps ops() { return AttentionVariantOps{&Sm90Attention::run}; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the attention registry (registry.cpp) lists.
// The config's tile M x N x K is the FMHA tile: query rows x KV rows x head dim.
#define WAVETUNE_ATTENTION_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN, SCHEDULER) \
  namespace wavetune::detail {                                                                                          \
  static_assert(BLayout::B_LAYOUT == BLayout::col && !SWAP_AB && CM == 1 && CN == 1);                                \
  extern const AttentionVariantOps variant_##NAME;                                                                      \
  const AttentionVariantOps variant_##NAME =                                                                            \
      Sm90Attention<DType::DTYPE, Schedule::SCHEDULE, TM, TN, TK, TileScheduler::SCHEDULER>::ops();                   \
  }
