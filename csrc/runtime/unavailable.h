// What a build without a CUDA compiler says instead of launching (unavailable.cpp, and each family's own).
#pragma once

namespace wavetune::detail {

constexpr const char* kNoKernels =
    "this wavetune build has no GPU kernels: no CUDA compiler (nvcc) was found when it was built. Install a "
    "CUDA 12.x/13.x toolkit, make nvcc visible (PATH or CUDACXX) and reinstall with pip install .";

}  // namespace wavetune::detail
