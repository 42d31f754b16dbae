// The lookup engine: reads a tuned table (docs/tables.md) and picks, for a problem, the variant and micro
// parameters to launch, from the table's exact entries or its latency model. No CUDA, no Python.
//
//   wavetune::Table table = wavetune::Table::load("tables/nvidia-h200.wtt");
//   wavetune::Selector selector(std::move(table), wavetune::variants(), wavetune::build_info().config_space_hash);
//   selector.check_device(props.name, props.sm_count);                     // once, for the running GPU
//   wavetune::Choice c = selector.select({wavetune::DType::bf16, wavetune::BLayout::col, m, n, k});
//   size_t bytes = wavetune::gemm_workspace_bytes(problem, c.variant, c.micro);   // kernels.h
//   wavetune::gemm(problem, c.variant, c.micro, workspace, bytes, stream);
//
// Table problems throw wavetune::TableError; a problem the table cannot serve throws InvalidArgument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wavetune/batch_invariance.h"
#include "wavetune/errors.h"
#include "wavetune/mapping.h"
#include "wavetune/types.h"

namespace wavetune {

// A table that cannot be used: unreadable, malformed, corrupt, or made for another build or GPU.
class WAVETUNE_API TableError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// `T_us = a + b*G + c*L + d*G*L` for problems of `wave` waves (a `wave` record).
struct WaveModel {
  int64_t wave;
  double a, b, c, d;
};

// From `min_wave` waves up, launch with this raster order and max swizzle (a `micro` record).
struct MicroRule {
  int64_t min_wave;
  Raster raster;
  int32_t max_swizzle;
};

// A candidate (a `config` record) with its `wave` and `micro` records, in file order.
struct TableConfig {
  std::string variant_name;
  Decomposition decomposition;  // data_parallel, split_k or stream_k
  int32_t splits;               // 1 unless split_k
  std::vector<WaveModel> waves;
  std::vector<MicroRule> micro;
  // A `calibration` record: the prediction is multiplied by exp(c0 + c1 ln M + c2 ln N + c3 ln K), a power
  // law fitted to the config's measurements on generic LLM-like shapes. All zero: no record, factor 1.
  double calibration[4] = {0, 0, 0, 0};
  // An `occupancy` record: CTAs of the variant resident per SM of the table's GPU, which multiplies the mapping's
  // capacity (mapping.h, resident_capacity). No record: 1.
  int32_t ctas_per_sm = 1;
};

// The measured best config for the problems of one (dtype, B layout, N, K) with M in [m_first, m_last]
// (an `exact` record). Ranges of one (dtype, B layout, N, K) do not overlap.
struct ExactEntry {
  DType dtype;
  BLayout b_layout;
  int64_t m_first, m_last, n, k;
  int32_t config;
  Raster raster;
  int32_t max_swizzle;
  double us;  // the latency at m_last, measured there or interpolated between measurements
};

// A default config for the problems of its dtype and B layout with M <= max_m (0: any M; in a grouped
// table, M per busy group: ceil(M / min(groups, M))) (a `prior`
// record): the model's choice replaces it only when predicted more than `margin` (a fraction) faster.
struct PriorRule {
  int32_t config;
  int64_t max_m;
  double margin;
};

// A parsed table file, nothing resolved against a build yet. `load` and `parse` check the syntax, the
// checksum, the required meta keys and the config references; the Selector checks the rest.
struct WAVETUNE_API Table {
  std::map<std::string, std::string> meta;
  std::vector<TableConfig> configs;  // index = config id
  std::vector<ExactEntry> exact;
  std::vector<PriorRule> priors;
  // The fastest operand traffic measured while tuning, in bytes per microsecond (a `memory` record); every
  // prediction is at least 2*(M*K + N*K + M*N) / memory_bytes_per_us. 0: no record, no floor.
  double memory_bytes_per_us = 0;
  // The fastest tile traffic measured while tuning, in bytes per microsecond (a `traffic` record): every
  // config's prediction is at least its G*L K-steps, each moving a tile_k slice of both operand tiles,
  // over this rate (traffic_floor in selector.cpp). 0: no record, no floor.
  double traffic_bytes_per_us = 0;
  // The fastest arithmetic measured while tuning, in flop per microsecond (a `compute` record): every
  // calibrated prediction is at least 2*M*N*K / compute_flop_per_us. 0: no record, no floor.
  double compute_flop_per_us = 0;
  std::string origin;  // the file path (or what `parse` was told), for messages

  // The value of a meta key; TableError naming the key and the origin when it is absent.
  const std::string& meta_value(const std::string& key) const;

  static Table load(const std::string& path);
  static Table parse(const std::string& text, const std::string& origin);
};

// The file-name stem of a GPU's table: "NVIDIA H200" -> "nvidia-h200" (tables/<slug>.wtt).
WAVETUNE_API std::string table_slug(const std::string& gpu_name);

// FNV-1a 64 of `size` bytes: the table checksum (docs/tables.md), for tools that write tables.
WAVETUNE_API uint64_t table_checksum(const char* data, size_t size);

// The most fields a family's problem key holds (Problem::key).
constexpr int kProblemKeyFields = 3;

// A GEMM problem, or a grouped one (a table of another family than "gemm"): `groups` GEMMs of N x K
// weights over m rows in all, which the host assumes spread evenly over min(groups, m) of them
// (grouped_mapping.h); a dense GEMM is one group. Other families map their problems onto these fields and
// their key (an attention table's: attention_heuristic.h).
struct Problem {
  DType dtype;
  BLayout b_layout;
  int64_t m, n, k;      // each in [1, 2^31 - 1]
  int64_t groups = 1;  // in [1, 2^29]; 1 for a gemm table
  // The family's own fields: its TableFamily names them (key_fields, family.h) and reads them; 0 where unused.
  int64_t key[kProblemKeyFields] = {};
};

enum class ChoiceSource : int32_t { exact = 0, model = 1 };
inline const char* to_string(ChoiceSource v) { return v == ChoiceSource::exact ? "exact" : "model"; }

struct Choice {
  int32_t variant;       // VariantInfo::id, for wavetune::gemm
  MicroParams micro;     // the config's decomposition and splits, the micro rule's raster and swizzle
  double predicted_us;   // the model's prediction, or the latency an exact range records (at its m_last)
  ChoiceSource source;
  int32_t config;        // the table's config id
};

// One candidate as the model sees it (Selector::explain).
struct Prediction {
  int32_t config;
  int32_t variant;
  Coordinates coords;
  double predicted_us;  // at least the table's memory floor (Table::memory_bytes_per_us)
  bool choosable = true;  // false: a stream-K launch the lookup does not choose there (stream_k_modeled)
  ReductionOrder order;   // of its launch at the problem's K (batch_invariance.h)
};

// The largest M that Selector::select_invariant weighs the classes at (a long prompt's tokens).
constexpr int64_t kInvariantReferenceRows = 8192;

class WAVETUNE_API Selector {
 public:
  // Resolves the configs' variant names against `compiled`, the compiled variants of kernel family
  // `family` (configs of other variants are skipped and counted), and refuses (TableError) a table of
  // another family (meta `family`, default "gemm") or tuned against another config space than `build_hash`,
  // or whose configs or exact entries contradict their variants, or whose exact ranges overlap.
  Selector(Table table, const std::vector<VariantInfo>& compiled, const std::string& build_hash,
           const std::string& family = "gemm");
  ~Selector();
  // Movable (a moved-from Selector may only be destroyed or assigned to), not copyable: it owns its cache.
  Selector(Selector&&) noexcept;
  Selector& operator=(Selector&&) noexcept;
  Selector(const Selector&) = delete;
  Selector& operator=(const Selector&) = delete;

  // Refuses (TableError) a table tuned on another GPU: gpu_name or sm_count differ from the running one's.
  void check_device(const std::string& gpu_name, int32_t sm_count) const;

  // The exact range holding the problem's M if there is one, else the candidate the model predicts
  // fastest (ties: the lower config id), or the prior for the problem's M when the model predicts it
  // within the prior's margin of that. Cached; thread-safe. InvalidArgument for sizes out of range or
  // when no compiled config takes the problem's dtype and layout (fall back to default_variant then).
  Choice select(const Problem& p) const;
  // The same without the cache: no allocation, no locks.
  Choice select_uncached(const Problem& p) const;
  // The model's choice alone, as if the table had no exact entries (uncached): for judging the model.
  Choice select_model(const Problem& p) const;
  // The batch-invariant choice (batch_invariance.h; `level` not off): per (dtype, B layout, N, K, groups) the
  // reduction order class (with BatchInvariance::config, the config) of least geomean predicted slowdown against
  // each M's least predicted candidate over M = 1, 2, 4, ..., kInvariantReferenceRows, among the candidates whose
  // order is fixed; then within it the exact range holding M if its config is of that class, else the least
  // predicted. Cached; thread-safe. InvalidArgument where no candidate's order is fixed, and for a table of a
  // family that selects by its own mapping (attention: its choose fixes the batch instead).
  Choice select_invariant(const Problem& p, BatchInvariance level) const;
  // Every candidate in config-id order with its coordinates and prediction (the exact table is not
  // consulted); empty when there is none.
  std::vector<Prediction> explain(const Problem& p) const;

  const Table& table() const;
  const std::string& family() const;  // the table's kernel family: "gemm", "grouped_gemm", "attention"
  const std::string& scales() const;  // the scales mode of its configs (meta `scales`; "": unscaled, family.h)
  size_t skipped_configs() const;                               // configs whose variant is not compiled
  size_t candidate_count(DType dtype, BLayout b_layout) const;  // compiled configs for that dtype and layout
  int32_t sm_count() const;                                     // the table's meta sm_count

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wavetune
