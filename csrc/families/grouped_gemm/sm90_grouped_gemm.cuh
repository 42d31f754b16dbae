// The CUTLASS template behind the grouped family's Hopper variants (cutlass_configs/sm90_grouped_gemm.toml; its
// Ampere-style ones: sm80_grouped_gemm.cuh): a Hopper ptr-array grouped GEMM (TMA warp-specialized, persistent,
// fp32 accumulation, no C operand) running out[rows of e] = x[rows of e] @ w[e].T for every expert e in one
// launch, its operand types, scales and epilogue given by an Operands policy of its scales mode
// (grouped_scales.cuh): scales in the epilogue, or in the mainloop (CUTLASS's blockwise scaling), laid out as
// grouped.h's GroupedScalesLayout of the mode says. Generated sources instantiate it once per translation unit
// with grouped_scales.cuh's macros.
#pragma once

// NOTES: the same switch as sm90_gemm.cuh: every multiple of 8 as tile N gets a wgmma atom of its own.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass_launch.cuh"
#include "grouped_experts.cuh"
#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune::detail {

// An Operands policy (grouped_scales.cuh) gives: Input (x's and w's element) and Out; kScales, its mode;
// kMainloopScales, whether CUTLASS's blockwise-scaling mainloop applies the scales (as the products of each
// k-block are promoted to fp32), else the epilogue does; Fusion<TileShape, kSwapAB>, the epilogue; and
// epilogue_arguments<FusionArguments>(per-expert scale_x pointers, scale_w pointers).
template <class Operands, bool kSwapAB_, Schedule kSchedule, int kTileM, int kTileN, int kTileK, int kClusterM,
          int kClusterN>
struct Sm90GroupedGemm {
  // NOTES: swap-AB runs out[rows of e]^T = w[e] @ x[rows of e]^T: the expert's few tokens go to tile N,
  // which wgmma takes in multiples of 8, instead of tile M, which is 64 rows per warpgroup. With 8 tokens
  // per expert a 16-wide tile N does half its MMA work on padding, a 64-row tile M 7/8 of it (15/16 for a
  // 128-row cooperative tile), while the weights' N, thousands of rows, fills tile M. Both operands stay
  // K-major either way, and `out` row-major [rows, N] is the swapped output [N, rows] column-major: no
  // transposes in memory.
  static constexpr bool kSwapAB = kSwapAB_;
  static constexpr bool kCooperative = kSchedule == Schedule::cooperative;

  using Input = typename Operands::Input;
  using Out = typename Operands::Out;
  static constexpr GroupedScales kScales = Operands::kScales;
  static constexpr GroupedScalesLayout kScalesLayout = grouped_scales_layout(kScales);
  static constexpr bool kBlockScaled = Operands::kMainloopScales;
  static_assert(!kBlockScaled || (kScalesLayout.x_block_k == kTileK && kScalesLayout.w_block_k == kTileK),
                "a k-tile is one scale block");
  static_assert(kScalesLayout.x_block_m <= 1, "a block of x's rows is one token or all of x: a longer one would "
                "span experts");
  using LayoutA = cutlass::layout::RowMajor;     // x[rows of e] [rows, K], or swapped w[e] [N, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // w[e] as [K, N], or swapped x[rows of e] as [K, rows]
  // NOTES: block scales as their producers lay them out, K-major: x's [rows, K/128] (quantize_fp8 with
  // group_size=128) and w's [experts, N/128, K/128] (checkpoints' weight_scale_inv). The kernel's A is w[e]
  // when swapped, so its granularity along M is w_block_n weight rows, else 1 token; B the other way round.
  // Modes that scale in the epilogue leave these types unused.
  static constexpr int kWeightRowsPerScale = kBlockScaled ? kScalesLayout.w_block_n : 1;
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<kSwapAB ? kWeightRowsPerScale : 1,
                                                                kSwapAB ? 1 : kWeightRowsPerScale, kTileK,
                                                                cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using MainloopLayoutA = std::conditional_t<kBlockScaled, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using MainloopLayoutB = std::conditional_t<kBlockScaled, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  // TMA moves 16-byte rows: K and N fill whole 16 bytes (the problem checks say so).
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Input>::value;
  static constexpr int kOutAlignment = 128 / cutlass::sizeof_bits<Out>::value;

  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per expert
  using ExpertShape = typename ProblemShape::UnderlyingProblemShape;
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using MainloopSchedule = Sm90MainloopSchedule<true, kBlockScaled, kCooperative>;
  using EpilogueSchedule = Sm90EpilogueSchedule<true, kCooperative>;

  using Fusion = typename Operands::template Fusion<TileShape, kSwapAB>;
  // ElementC = void: no source operand, so the epilogue's shared memory goes to mainloop stages.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kOutAlignment, Out, LayoutD*,
      kOutAlignment, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Input, MainloopLayoutA, kAlignment, Input,
      MainloopLayoutB, kAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  static_assert(cute::tile_size<1>(typename Mainloop::TiledMma{}) == kTileN,
                "the wgmma atom does not span the tile's N: is CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED defined?");
  using Kernel = WaitsForPreviousGrid<cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arguments = typename Adapter::Arguments;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-expert arguments CUTLASS reads, written on the GPU by prepare_experts; the scale pointers only
  // for scaled operands, the scale layouts only for block scales.
  struct ExpertArrays {
    ExpertShape* shapes;
    const Input** a;
    const Input** b;
    Out** d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
    const float** scale_x;
    const float** scale_w;
    LayoutSFA* layout_sfa;
    LayoutSFB* layout_sfb;
  };

  static size_t cutlass_workspace_bytes(int32_t experts, const DeviceInfo& dev) {
    Arguments args{};
    args.problem_shape = {experts, nullptr, nullptr};
    args.hw_info.device_id = dev.device;
    args.hw_info.sm_count = dev.sm_count;
    return Kernel::get_workspace_size(args);
  }

  // Where each part of the workspace starts: the expert arrays, then CUTLASS's own workspace (TMA
  // descriptors per SM).
  struct WorkspaceLayout : WorkspaceParts {
    size_t shapes, a, b, d, stride_a, stride_b, stride_d, scale_x, scale_w, layout_sfa, layout_sfb, cutlass;

    WorkspaceLayout(int32_t experts, const DeviceInfo& dev) {
      const size_t e = size_t(experts);
      shapes = take(e * sizeof(ExpertShape));
      a = take(e * sizeof(Input*));
      b = take(e * sizeof(Input*));
      d = take(e * sizeof(Out*));
      stride_a = take(e * sizeof(StrideA));
      stride_b = take(e * sizeof(StrideB));
      stride_d = take(e * sizeof(StrideD));
      constexpr bool kScaled = kScales != GroupedScales::none;
      scale_x = take(kScaled ? e * sizeof(float*) : 0);
      scale_w = take(kScaled ? e * sizeof(float*) : 0);
      layout_sfa = take(kBlockScaled ? e * sizeof(LayoutSFA) : 0);
      layout_sfb = take(kBlockScaled ? e * sizeof(LayoutSFB) : 0);
      cutlass = take(cutlass_workspace_bytes(experts, dev));
    }
    ExpertArrays arrays(void* workspace) const {
      return {workspace_part<ExpertShape>(workspace, shapes),      workspace_part<const Input*>(workspace, a),
              workspace_part<const Input*>(workspace, b),          workspace_part<Out*>(workspace, d),
              workspace_part<StrideA>(workspace, stride_a),        workspace_part<StrideB>(workspace, stride_b),
              workspace_part<StrideD>(workspace, stride_d),        workspace_part<const float*>(workspace, scale_x),
              workspace_part<const float*>(workspace, scale_w),    workspace_part<LayoutSFA>(workspace, layout_sfa),
              workspace_part<LayoutSFB>(workspace, layout_sfb)};
    }
  };

  static size_t workspace_bytes(int32_t experts, const DeviceInfo& dev) { return WorkspaceLayout(experts, dev).total; }

  static Arguments arguments(const GroupedGemmProblem& p, const ExpertArrays& arrays, const DeviceInfo& dev) {
    cutlass::KernelHardwareInfo hw_info;
    hw_info.device_id = dev.device;
    hw_info.sm_count = dev.sm_count;
    // No host copy of the shapes: CUTLASS then launches a persistent grid of one CTA per SM (whole clusters)
    // whose scheduler reads each expert's shape on the GPU and skips experts with no tiles.
    Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                   {p.experts, arrays.shapes, nullptr},
                   mainloop_arguments(arrays),
                   {{}, nullptr, arrays.stride_d, arrays.d, arrays.stride_d},
                   hw_info};
    args.epilogue.thread =
        Operands::template epilogue_arguments<decltype(args.epilogue.thread)>(arrays.scale_x, arrays.scale_w);
    return args;
  }

  static typename Mainloop::Arguments mainloop_arguments(const ExpertArrays& arrays) {
    if constexpr (kBlockScaled) {
      const float** sfa = kSwapAB ? arrays.scale_w : arrays.scale_x;
      const float** sfb = kSwapAB ? arrays.scale_x : arrays.scale_w;
      return {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b, sfa, arrays.layout_sfa, sfb, arrays.layout_sfb};
    } else {
      return {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b};
    }
  }

  // Expert e's problem size, operand pointers and strides (and, for scaled operands, where its scales start), as
  // prepare_experts (grouped_experts.cuh) hands it over.
  __device__ static void write_expert(const GroupedGemmProblem& p, int e, const Expert<Input, Out>& expert,
                                      const ExpertArrays& arrays) {
    const int m = kSwapAB ? p.n : expert.rows, n = kSwapAB ? expert.rows : p.n;
    arrays.shapes[e] = {m, n, p.k};
    arrays.a[e] = kSwapAB ? expert.w : expert.x;
    arrays.b[e] = kSwapAB ? expert.x : expert.w;
    arrays.d[e] = expert.out;
    arrays.stride_a[e] = cutlass::make_cute_packed_stride(StrideA{}, {m, p.k, 1});
    arrays.stride_b[e] = cutlass::make_cute_packed_stride(StrideB{}, {n, p.k, 1});
    arrays.stride_d[e] = cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1});
    if constexpr (kScales != GroupedScales::none) {
      const int64_t x_scales = scale_blocks(p.k, kScalesLayout.x_block_k);  // per token, or for all of x
      const int64_t w_scales =  // per expert
          scale_blocks(p.n, kScalesLayout.w_block_n) * scale_blocks(p.k, kScalesLayout.w_block_k);
      arrays.scale_x[e] = p.scale_x + (kScalesLayout.x_block_m ? expert.start * x_scales : 0);
      arrays.scale_w[e] = p.scale_w + e * w_scales;
    }
    if constexpr (kBlockScaled) {
      arrays.layout_sfa[e] = ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, p.k, 1));
      arrays.layout_sfb[e] = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, p.k, 1));
    }
  }

  static void run(const GroupedGemmProblem& p, void* workspace, const DeviceInfo& dev, Stream stream);

  static constexpr GroupedVariantOps ops() { return {kScales, &workspace_bytes, &run}; }
};

template <class Operands, bool kSwapAB, Schedule kSchedule, int kTileM, int kTileN, int kTileK, int kClusterM,
          int kClusterN>
void Sm90GroupedGemm<Operands, kSwapAB, kSchedule, kTileM, kTileN, kTileK, kClusterM, kClusterN>::run(
    const GroupedGemmProblem& p, void* workspace, const DeviceInfo& dev, Stream stream) {
  const WorkspaceLayout layout(p.experts, dev);
  const ExpertArrays arrays = layout.arrays(workspace);
  launch_prepare_experts<Sm90GroupedGemm>(p, arrays, stream);
  void* cutlass_workspace = workspace_part<char>(workspace, layout.cutlass);
  launch_gemm_universal<Adapter>(arguments(p, arrays, dev), dev, cutlass_workspace, layout.total - layout.cutlass,
                                 programmatic_launch(), stream, [&] { return describe(p); });
}

}  // namespace wavetune::detail
