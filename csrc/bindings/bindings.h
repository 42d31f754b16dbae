// Shared by the binding files of wavetune._C (module.cpp, one file per kernel family beside it).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "wavetune/lookup.h"
#include "wavetune/types.h"

namespace wavetune::bindings {

// The kernel families that launch from tables, in the order of kTableFamilies (module.cpp).
enum class TableFamily : int { gemm = 0, grouped_gemm = 1, attention = 2 };

// The table a family's launches with no forced variant consult on a device (use_table), or nullptr.
// A plain array read: it is on every launch's path.
const Selector* active_table(TableFamily family, int device);

// A compiled variant as the dict that python/wavetune/api.py turns into a KernelConfig.
pybind11::dict variant_dict(const VariantInfo& v);

// The grouped-GEMM family (grouped.cpp).
void bind_grouped(pybind11::module_& m);

// The attention family (attention.cpp).
void bind_attention(pybind11::module_& m);

}  // namespace wavetune::bindings
