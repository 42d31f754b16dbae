// Stands in for device.cu when the build found no CUDA compiler: the package still imports, and every
// launch says why it cannot run.
#include "device.h"
#include "unavailable.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {

namespace detail {
const char* current_device_error() { return kNoKernels; }
const DeviceInfo& current_device_info() { WAVETUNE_FAIL(kNoKernels); }
void require_workspace(size_t, const void*, size_t) { WAVETUNE_FAIL(kNoKernels); }
}  // namespace detail

using detail::kNoKernels;

int32_t served_compute_capability() { return arch_override(); }

DeviceProperties device_properties() { WAVETUNE_FAIL(kNoKernels); }

std::string no_device_reason() { return kNoKernels; }

}  // namespace wavetune
