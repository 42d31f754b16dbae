// Shared by the binding files of wavetune._C (module.cpp, one file per kernel family beside it).
#pragma once

#include <pybind11/pybind11.h>

#include "wavetune/types.h"

namespace wavetune::bindings {

// A compiled variant as the dict that python/wavetune/api.py turns into a KernelConfig.
pybind11::dict variant_dict(const VariantInfo& v);

// The grouped-GEMM family (grouped.cpp).
void bind_grouped(pybind11::module_& m);

}  // namespace wavetune::bindings
