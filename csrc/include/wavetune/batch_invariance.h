// Batch-invariant choices (docs/cpp.md, "Batch-invariant choices"): every family's `choose` takes ChoiceOptions
// (types.h); with batch_invariance on it chooses only configs whose per-row reduction order is fixed, so that a
// row's result does not depend on M, on the tokens per expert, or on the other sequences of a batch.
//
// A config's reduction order is derived from its variant and launch (reduction_order): the instruction that
// accumulates (the architecture its code was built for), the K splits and where they fall. Header-only, no CUDA:
// the lookup engine, the kernel library and Python (through the bindings) read the same definition.
#pragma once

#include <cstdint>
#include <string>

#include "wavetune/types.h"

namespace wavetune {

// How a config sums each output's K products, as far as its data tells.
struct ReductionOrder {
  // Whether the order is fixed by (N, K) and the config alone. False: it depends on M or on other problems
  // (stream-K and heuristic decompositions spread K by the tile count; cuBLAS picks its kernel and split-K by M;
  // the decode GEMM's cluster sums are an order no kernel serving larger M shares).
  bool fixed;
  // The configs of one class sum every output in the same order (BatchInvariance::reduction_order); 0 when not
  // fixed. The accumulating instruction (the variant's architecture: wgmma for sm90a code, mma.sync for portable
  // code), the K splits, and with splits the K tile at whose multiples they fall.
  int64_t order_class;
  // In words: "wgmma, K unsplit", "mma.sync, 4 K splits of 64-wide K tiles", or why it is not fixed.
  std::string condition;
};

// NOTES: within one instruction the K products of an output are accumulated in K order, 16 (16-bit operands) or 32
// (e4m3) at a time, into one fp32 accumulator, whatever the tile's M and N extents, its K extent (a whole multiple
// of the instruction's), the schedule or the operand order (swap-AB computes D^T from the same products). Configs
// that share an order_class are assumed to give bit-identical rows on that ground; tests/test_batch_invariance_gpu.py
// checks it on the GPU across M and across configs. BatchInvariance::config makes no such assumption.
inline ReductionOrder reduction_order(const VariantInfo& v, Decomposition decomposition, int32_t splits) {
  if (v.schedule == Schedule::cublas || v.schedule == Schedule::cudnn) {
    return {false, 0, "a vendor library's heuristics pick its kernel and K splits by the problem"};
  }
  if (v.schedule == Schedule::decode) {
    return {false, 0, "the decode GEMM sums its K splits in a cluster, an order no kernel of larger M shares"};
  }
  if (decomposition == Decomposition::stream_k ||
      (decomposition == Decomposition::heuristic && v.scheduler == TileScheduler::stream_k)) {
    return {false, 0, "stream-K spreads the K steps over the tiles, whose count depends on M"};
  }
  const bool wgmma = v.arch.specific && v.arch.cc >= 90;
  const int32_t s = decomposition == Decomposition::split_k ? splits : 1;
  const int64_t tile_k = s > 1 ? v.tile_k : 0;
  std::string condition = wgmma ? "wgmma, " : "mma.sync, ";
  condition += s > 1 ? std::to_string(s) + " K splits of " + std::to_string(tile_k) + "-wide K tiles" : "K unsplit";
  return {true, int64_t(wgmma) << 62 | int64_t(s) << 32 | tile_k, condition};
}

// A heuristic's batch-invariant variant where no table chooses: its variant for the problem (`own`) where that
// shares the reduction order of its variant for the largest M (`anchor`), else the anchor (with
// BatchInvariance::config, always), either launched data-parallel; nullptr where the anchor's order is not fixed.
inline const VariantInfo* invariant_heuristic_variant(const VariantInfo& own, const VariantInfo& anchor,
                                                      BatchInvariance level) {
  const ReductionOrder order = reduction_order(anchor, Decomposition::data_parallel, 1);
  if (!order.fixed) return nullptr;
  const bool shares = level == BatchInvariance::reduction_order &&
                      reduction_order(own, Decomposition::data_parallel, 1).order_class == order.order_class;
  return shares ? &own : &anchor;
}

}  // namespace wavetune
