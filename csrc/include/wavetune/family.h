// Kernel families (dense GEMM, grouped GEMM, attention, ...) as the libraries know them. Each family
// registers itself from its own folder (csrc/families/<name>/), so nothing lists the families by hand:
// the bindings, the table loader and the selector iterate over what is registered.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wavetune/lookup.h"
#include "wavetune/mapping.h"
#include "wavetune/types.h"

namespace wavetune {

// --- lookup library (libwavetune_lookup) ---------------------------------------------------------------

// The most groups (experts, sequences) or heads a problem may have (the selector's cache key holds 29 bits).
constexpr int64_t kMaxGroups = int64_t(1) << 29;

// How the lookup engine treats a family's tables and problems. A family's table_rules.cpp names what differs
// from these defaults, field by field.
struct TableFamily {
  const char* name = nullptr;       // as tables spell it (meta `family`)
  int64_t max_groups = 1;           // a problem's groups: 1 for a single GEMM, up to kMaxGroups (experts, sequences)
  bool exact_records = false;       // its tables may hold exact ranges
  bool data_parallel_only = false;  // its configs launch data_parallel only
  bool stream_k = false;            // its configs may launch stream_k (else data_parallel or split_k)
  // The family's (G, L) mapping (mapping.h): a problem's coordinates under a config (its tile, decomposition and
  // splits) on a GPU of `sm_count` SMs, and the launches it takes back to back. Every family names one.
  Coordinates (*coordinates)(const TileShape& tile, Decomposition decomposition, int32_t splits, const Problem& p,
                             int32_t sm_count, int64_t* launches) = nullptr;
  // How the selector chooses among the configs that take a problem's dtype and B layout.
  enum class Selection {
    // docs/tables.md: exact ranges, priors, the memory, traffic and compute floors, micro rules, stream-K where
    // modeled, behind a cache. The selector evaluates `coordinates` in a prepared form of the GEMM mapping over
    // balanced groups (grouped_mapping.h), which debug builds check against it: a family selecting so maps so.
    priors_and_floors,
    // The least predicted (its wave model times its launches, calibrated) of the configs that `fits`; uncached,
    // as the cache's key holds none of a family's own problem fields (Problem::key).
    least_predicted,
  };
  Selection selection = Selection::priors_and_floors;
  // least_predicted only: whether a config (tile, KV splits) can run the problem.
  bool (*fits)(const TileShape& tile, int32_t splits, const Problem& p) = nullptr;
  // The fields of its problem key (Problem::key), in key order: at most kProblemKeyFields, named as the bindings
  // take them, each in [min, max], `fallback` where a caller names none. Empty: its problems have none.
  struct KeyField {
    const char* name;
    int64_t min, max, fallback;
  };
  std::vector<KeyField> key_fields;
  // Checks of the family's own problem fields (InvalidArgument), or null.
  void (*check_problem)(const Problem& p) = nullptr;
  // The scales modes of its tables (as a table's meta `scales` names them; "" for unscaled operands, a table
  // without the key), one table per GPU model and mode: the config space's `scales` axis of the family's
  // variants. Null: its tables have no scales modes.
  std::vector<std::string> (*scales)() = nullptr;
};

// The registered table families, sorted by name; the one of that name, or nullptr.
WAVETUNE_API const std::vector<const TableFamily*>& table_families();
WAVETUNE_API const TableFamily* find_table_family(const std::string& name);

// A config space the libraries were generated from (python/wavetune/codegen/config_space.py): every variant of
// it, compiled into this build or not (what its tables may name), and the names of those the family's built-in
// choice takes. The Python package compiles a variant outside the build from this description.
struct ConfigSpace {
  const char* family;
  const char* hash;
  std::vector<VariantInfo> variants;       // ordered by id
  std::vector<const char*> heuristic_set;  // variant names
  // Per scales mode of its variants (a group's `scales`, "" for none): the hash of that mode's variants built for
  // the space's own architecture, which a table of that mode is tuned against.
  std::vector<std::pair<const char*, const char*>> scales_hashes;
};

// The generated config space of a family, or nullptr (a family with built-in variants only).
WAVETUNE_API const ConfigSpace* find_config_space(const std::string& family);

// --- kernel library (libwavetune_kernels) --------------------------------------------------------------

// A family's compiled kernels.
struct KernelFamily {
  const char* name;                               // as tables spell it
  const std::vector<VariantInfo>& (*variants)();  // compiled, ordered by id
  const char* (*config_space_hash)();             // of the config space they were generated from
  // Registers variants compiled after the build (variant_library.h): ops[i] is the family's ops object of
  // infos[i]. Returns how many were not registered before.
  int32_t (*add_variants)(const VariantInfo* infos, const void* const* ops, int32_t count);
};

// The registered kernel families, sorted by name; the one of that name, or nullptr.
WAVETUNE_API const std::vector<const KernelFamily*>& kernel_families();
WAVETUNE_API const KernelFamily* find_kernel_family(const std::string& name);

// A table file of `family` bound to that family's compiled variants that run on the current device (runnable;
// Selector's checks apply); InvalidArgument for a family that is not registered.
WAVETUNE_API std::shared_ptr<Selector> open_table(const std::string& path, const std::string& family);

// Those of `variants` that run on the current device (kernels.h, runs_here), in their order.
WAVETUNE_API std::vector<VariantInfo> runnable(const std::vector<VariantInfo>& variants);

}  // namespace wavetune
