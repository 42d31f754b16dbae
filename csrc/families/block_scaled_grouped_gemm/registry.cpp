// The compiled block-scaled FP8 grouped variants, as listed by the generated block_scaled_grouped_registry.inc
// (see python/wavetune/codegen/config_space.py), and the problem checks that need no GPU.
#include <string>
#include <vector>

#include "block_scaled_grouped_ops.h"
#include "block_scaled_grouped_registry.inc"
#include "e4m3_grouped_checks.h"
#include "registered.h"
#include "variant_registry.h"
#include "wavetune/block_scaled_grouped.h"
#include "wavetune/family.h"

namespace wavetune {
namespace detail {

#define WAVETUNE_DECLARE_OPS(ID, NAME, ...) extern const BlockScaledGroupedVariantOps variant_##NAME;
WAVETUNE_BLOCK_SCALED_GROUPED_VARIANT_LIST(WAVETUNE_DECLARE_OPS)
#undef WAVETUNE_DECLARE_OPS

namespace {
VariantRegistry<BlockScaledGroupedVariantOps>& registry() {
  static VariantRegistry<BlockScaledGroupedVariantOps> list(
      {WAVETUNE_BLOCK_SCALED_GROUPED_VARIANT_LIST(WAVETUNE_REGISTRY_ENTRY)});
  return list;
}
}  // namespace

const BlockScaledGroupedVariantOps* block_scaled_grouped_variant_ops(int32_t id) {
  const auto* e = registry().find(id);
  return e ? e->ops : nullptr;
}

}  // namespace detail

const std::vector<VariantInfo>& block_scaled_grouped_variants() { return detail::registry().infos(); }

const char* block_scaled_grouped_config_space_hash() { return WAVETUNE_BLOCK_SCALED_GROUPED_CONFIG_SPACE_HASH; }

const VariantInfo* find_block_scaled_grouped_variant(int32_t id) {
  const auto* e = detail::registry().find(id);
  return e ? &e->info : nullptr;
}

std::string block_scaled_grouped_problem_error(const BlockScaledGroupedGemmProblem& p) {
  return detail::e4m3_grouped_problem_error(p.gemm, p.scale_x, p.scale_w);
}

namespace {
const KernelFamily kBlockScaledGroupedGemm{"block_scaled_grouped_gemm", &block_scaled_grouped_variants,
                                           &block_scaled_grouped_config_space_hash,
                                           [](const VariantInfo* infos, const void* const* ops, int32_t count) {
                                             return detail::registry().add(infos, ops, count);
                                           }};
const detail::Registration<KernelFamily> registration(&kBlockScaledGroupedGemm);
}  // namespace

}  // namespace wavetune
