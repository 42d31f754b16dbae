// How the lookup engine treats attention tables (family.h): a problem is a batch of sequences (groups) with
// heads and a mask (its key: attention_lookup_problem), a config's KV splits are its split_k, and the family
// maps problems itself (attention_heuristic.h) rather than by the GEMM wave model.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/errors.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {

// The heads of an attention problem (off the GEMM path, which never reads them).
void check_heads(const Problem& p) {
  const AttentionShape s = attention_shape(p);
  if (s.heads_kv < 1 || s.heads_q < s.heads_kv || s.heads_q % s.heads_kv != 0 || s.heads_q > kMaxGroups) {
    WAVETUNE_INVALID("problem heads_q=", s.heads_q, " must be a positive multiple of heads_kv=", s.heads_kv);
  }
}

// The attention family's coordinates of a problem under a config (attention_heuristic.h): G is the CTAs of
// one launch, L the KV tiles a CTA walks (the average, rounded), one CTA per SM; `launches` launches run
// back to back.
Coordinates attention_coordinates(const TileShape& t, Decomposition, int32_t splits, const Problem& p,
                                  int32_t sm_count, int64_t* launches) {
  const AttentionShape shape = attention_shape(p);
  const AttentionTile tile{t.tile_m, t.tile_n, t.tile_k};
  const FmhaGrid g = fmha_grid(shape, splits);
  const int64_t ctas = fmha_ctas(g, tile) / g.launches;
  *launches = g.launches;
  return {ctas, std::max<int64_t>(1, std::llround(kv_tiles_per_cta(g, tile, shape.causal).first)), sm_count,
          detail::ceil_div(ctas, sm_count)};
}

// Whether an attention config can run the problem: its head dim, and KV splits only for decode with a whole
// KV tile per split.
bool attention_fits(const TileShape& t, int32_t splits, const Problem& p) {
  return t.tile_k == p.k && (splits == 1 || (p.m == 1 && p.n / splits >= t.tile_n));
}

TableFamily attention_rules() {
  TableFamily f{"attention"};
  f.max_groups = kMaxGroups;
  f.coordinates = &attention_coordinates;
  f.selection = TableFamily::Selection::least_predicted;
  f.fits = &attention_fits;
  f.key_fields = {{"heads_q", 1, kMaxGroups, 1}, {"heads_kv", 1, kMaxGroups, 1}, {"causal", 0, 1, 0}};
  f.check_problem = &check_heads;
  return f;
}

// Besides its config space's FMHA variants, its tables may name the cuDNN and paged candidates.
std::vector<std::string> builtin_candidate_names() {
  std::vector<std::string> names;
  for (const VariantInfo& v : attention_candidates()) names.push_back(v.name);
  return names;
}
const lookup_detail::TableRegistration registration(attention_rules(), &builtin_candidate_names);

}  // namespace
}  // namespace wavetune
