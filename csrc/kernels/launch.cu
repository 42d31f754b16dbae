// The CUDA side of the kernel library: device checks, workspace, and the launch entry points.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cutlass/version.h"
#include "variant_ops.h"
#include "cuda_check.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

struct DeviceSlot {
  std::once_flag once;
  DeviceInfo info{};
  std::string error;  // why this device cannot run the kernels, empty when it can
};

// Properties are read once per device: a launch must not pay for cudaGetDeviceProperties.
const DeviceSlot& current_device() {
  static std::array<DeviceSlot, kMaxDevices> slots;
  int device = 0;
  WAVETUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) WAVETUNE_FAIL("device ordinal ", device, " out of range");
  DeviceSlot& slot = slots[device];
  std::call_once(slot.once, [&] {
    int major = 0, minor = 0, sms = 0;
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    slot.info = DeviceInfo{device, sms};
    if (major != 9 || minor != 0) {
      std::ostringstream os;
      os << "CUDA device " << device << " has compute capability " << major << "." << minor
         << "; wavetune's kernels are built for sm_90a (Hopper: H100, H200, GH200)";
      slot.error = os.str();
    }
  });
  return slot;
}

// NOTES: a buffer that was handed out is never freed while the process runs. A CUDA graph captured with
// a launch keeps that launch's workspace pointer, and replaying it after a larger eager problem had grown
// the workspace wrote into freed memory (an "unspecified launch failure", or worse, silent corruption of
// whatever was allocated there). Outgrown buffers are retired instead; growth at least doubles, so all
// of them together stay below twice the largest.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::vector<void*> retired;
  ~Workspace() {  // may run after the CUDA runtime shut down at exit; nothing to report then
    for (void* old : retired) cudaFree(old);
    if (ptr) cudaFree(ptr);
  }
};

}  // namespace

const DeviceInfo& current_device_info() {
  const DeviceSlot& slot = current_device();
  if (!slot.error.empty()) WAVETUNE_INVALID(slot.error);
  return slot.info;
}

void* workspace(const DeviceInfo& dev, Stream stream, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, Stream>, Workspace> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  Workspace& ws = buffers[{dev.device, stream}];
  if (ws.bytes < bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    WAVETUNE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      WAVETUNE_INVALID("this launch needs ", bytes, " bytes of workspace (split-K, stream-K or cuBLAS), which cannot be "
                       "allocated while the stream is being captured into a CUDA graph: run the same GEMM "
                       "once on that stream before capturing (the workspace is then reused)");
    }
    const size_t grown = std::max(bytes, 2 * ws.bytes);
    void* fresh = nullptr;
    WAVETUNE_CUDA_CHECK(cudaMalloc(&fresh, grown));
    if (ws.ptr) ws.retired.push_back(ws.ptr);
    ws.ptr = fresh;
    ws.bytes = grown;
  }
  return ws.ptr;
}

}  // namespace detail

BuildInfo build_info() {
  return {!variants().empty(), detail::kernel_set_name(), detail::config_space_hash(), CUDART_VERSION,
          CUTLASS_MAJOR * 100 + CUTLASS_MINOR * 10 + CUTLASS_PATCH};
}

namespace {
// Everything that can be said without launching: the problem, the variant, the device.
std::string check(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, const detail::DeviceSlot** dev,
                  const detail::VariantOps** ops) {
  std::string error = problem_error(p);
  if (!error.empty()) return error;
  const VariantInfo* variant = find_variant(variant_id);
  if (!variant) {
    return "variant id " + std::to_string(variant_id) + " is not compiled into this build (kernel set '" +
           detail::kernel_set_name() + "'); wavetune.configs() lists the compiled ones";
  }
  error = detail::variant_error(*variant, p, micro);
  if (!error.empty()) return error;
  *dev = &detail::current_device();
  if (!(*dev)->error.empty()) return (*dev)->error;
  *ops = detail::variant_ops(variant_id);
  return {};
}
}  // namespace

std::string why_not(const GemmProblem& p, int32_t variant_id, const MicroParams& micro) {
  const detail::DeviceSlot* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, &dev, &ops);
  return error.empty() ? ops->why_not(p, micro, dev->info) : error;
}

void gemm(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, Stream stream) {
  const detail::DeviceSlot* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, &dev, &ops);
  if (!error.empty()) WAVETUNE_INVALID(error);
  ops->run(p, micro, dev->info, stream);
}

}  // namespace wavetune
