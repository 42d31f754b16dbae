// The CUTLASS template behind every grouped variant (cutlass_configs/sm90_grouped_gemm.toml): a Hopper
// ptr-array grouped GEMM (TMA warp-specialized, persistent, fp32 accumulation, no C operand) running
// out[rows of e] = x[rows of e] @ w[e].T for every expert e in one launch, its operand types, scales and
// epilogue given by an Operands policy of its scales mode (grouped_scales.cuh): scales in the epilogue, or in
// the mainloop (CUTLASS's blockwise scaling), laid out as grouped.h's GroupedScalesLayout of the mode says.
// Generated sources instantiate it once per translation unit with grouped_scales.cuh's macros.
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
  // descriptors per SM), each 128-byte aligned.
  struct WorkspaceLayout {
    size_t shapes, a, b, d, stride_a, stride_b, stride_d, scale_x, scale_w, layout_sfa, layout_sfb, cutlass,
        total = 0;

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
    size_t take(size_t bytes) {
      const size_t offset = total;
      total = (total + bytes + 127) / 128 * 128;
      return offset;
    }
    ExpertArrays arrays(void* workspace) const {
      char* base = static_cast<char*>(workspace);
      return {reinterpret_cast<ExpertShape*>(base + shapes),    reinterpret_cast<const Input**>(base + a),
              reinterpret_cast<const Input**>(base + b),        reinterpret_cast<Out**>(base + d),
              reinterpret_cast<StrideA*>(base + stride_a),      reinterpret_cast<StrideB*>(base + stride_b),
              reinterpret_cast<StrideD*>(base + stride_d),      reinterpret_cast<const float**>(base + scale_x),
              reinterpret_cast<const float**>(base + scale_w),  reinterpret_cast<LayoutSFA*>(base + layout_sfa),
              reinterpret_cast<LayoutSFB*>(base + layout_sfb)};
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

  static void run(const GroupedGemmProblem& p, void* workspace, const DeviceInfo& dev, Stream stream);

  static constexpr GroupedVariantOps ops() { return {kScales, &workspace_bytes, &run}; }
};

// One thread per expert: its rows from the offsets, then its problem size, operand pointers and strides
// (and, for scaled operands, where its scales start).
template <class Gemm>
__global__ void prepare_experts(GroupedGemmProblem p, typename Gemm::ExpertArrays arrays) {
  using Input = typename Gemm::Input;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  release_dependents_and_wait();  // the offsets and operands may come from the kernel before
  if (e >= p.experts) return;
  // Clamped, so offsets out of order or past the rows give an expert no rows rather than a bad access.
  const int32_t start = e == 0 ? 0 : min(max(p.offsets[e - 1], 0), p.rows);
  const int32_t rows = min(max(p.offsets[e], start), p.rows) - start;
  const Input* x = static_cast<const Input*>(p.x) + int64_t(start) * p.k;
  const Input* w = static_cast<const Input*>(p.w) + int64_t(e) * p.n * p.k;
  const int m = Gemm::kSwapAB ? p.n : rows, n = Gemm::kSwapAB ? rows : p.n;
  arrays.shapes[e] = {m, n, p.k};
  arrays.a[e] = Gemm::kSwapAB ? w : x;
  arrays.b[e] = Gemm::kSwapAB ? x : w;
  arrays.d[e] = static_cast<typename Gemm::Out*>(p.out) + int64_t(start) * p.n;
  arrays.stride_a[e] = cutlass::make_cute_packed_stride(typename Gemm::StrideA{}, {m, p.k, 1});
  arrays.stride_b[e] = cutlass::make_cute_packed_stride(typename Gemm::StrideB{}, {n, p.k, 1});
  arrays.stride_d[e] = cutlass::make_cute_packed_stride(typename Gemm::StrideD{}, {m, n, 1});
  if constexpr (Gemm::kScales != GroupedScales::none) {
    constexpr GroupedScalesLayout layout = Gemm::kScalesLayout;
    const int64_t x_scales = scale_blocks(p.k, layout.x_block_k);  // per token, or for all of x
    const int64_t w_scales = scale_blocks(p.n, layout.w_block_n) * scale_blocks(p.k, layout.w_block_k);  // per expert
    arrays.scale_x[e] = p.scale_x + (layout.x_block_m ? start * x_scales : 0);
    arrays.scale_w[e] = p.scale_w + e * w_scales;
  }
  if constexpr (Gemm::kBlockScaled) {
    arrays.layout_sfa[e] = Gemm::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, p.k, 1));
    arrays.layout_sfb[e] = Gemm::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, p.k, 1));
  }
}

template <class Operands, bool kSwapAB, Schedule kSchedule, int kTileM, int kTileN, int kTileK, int kClusterM,
          int kClusterN>
void Sm90GroupedGemm<Operands, kSwapAB, kSchedule, kTileM, kTileN, kTileK, kClusterM, kClusterN>::run(
    const GroupedGemmProblem& p, void* workspace, const DeviceInfo& dev, Stream stream) {
  const WorkspaceLayout layout(p.experts, dev);
  ExpertArrays arrays = layout.arrays(workspace);
  constexpr int kThreads = 128;
  void* args[] = {const_cast<GroupedGemmProblem*>(&p), &arrays};  // read only
  check_launch(launch_programmatic(reinterpret_cast<const void*>(prepare_experts<Sm90GroupedGemm>),
                                   dim3(unsigned((p.experts + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream,
                                   args),
               "the expert argument kernel");

  void* cutlass_workspace = static_cast<char*>(workspace) + layout.cutlass;
  launch_gemm_universal<Adapter>(arguments(p, arrays, dev), dev, cutlass_workspace, layout.total - layout.cutlass,
                                 programmatic_launch(), stream, [&] {
                                   return "the grouped GEMM (rows=" + std::to_string(p.rows) + " experts=" +
                                          std::to_string(p.experts) + " N=" + std::to_string(p.n) +
                                          " K=" + std::to_string(p.k) + ")";
                                 });
}

}  // namespace wavetune::detail
