// Kernel families (dense GEMM, grouped GEMM, attention, ...) as the libraries know them. Each family
// registers itself from its own folder (csrc/families/<name>/), so nothing lists the families by hand:
// the bindings, the table loader and the selector iterate over what is registered.
#pragma once

#include <memory>
#include <string>
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
  // Null for the GEMM wave model (mapping.h, grouped_mapping.h) with priors and micro rules. Set for a
  // family with its own mapping: whether a config (tile, KV splits) can run the problem, and its
  // coordinates and the launches it takes; the selector then picks the least predicted of the configs
  // that fit.
  bool (*fits)(const TileShape& tile, int32_t splits, const Problem& p) = nullptr;
  Coordinates (*coordinates)(const TileShape& tile, int32_t splits, const Problem& p, int32_t sm_count,
                             int64_t* launches) = nullptr;
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

// A table file of `family` bound to that family's compiled variants (Selector's checks apply);
// InvalidArgument for a family that is not registered.
WAVETUNE_API std::shared_ptr<Selector> open_table(const std::string& path, const std::string& family);

}  // namespace wavetune
