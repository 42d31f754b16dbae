// Shared by the binding files of wavetune._C (module.cpp, one file per kernel family beside it).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "wavetune/lookup.h"
#include "wavetune/types.h"

namespace wavetune::bindings {

// The table a family's launches with no forced variant consult on a device (use_table), or nullptr.
const Selector* active_table(const std::string& family, int device);

// A compiled variant as the dict that python/wavetune/api.py turns into a KernelConfig.
pybind11::dict variant_dict(const VariantInfo& v);

// The grouped-GEMM family (grouped.cpp).
void bind_grouped(pybind11::module_& m);

}  // namespace wavetune::bindings
