// The device state every kernel family's launch shares (device.h), and what the public API says of the
// device (kernels.h: device_properties, no_device_reason).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "device.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// Peak DRAM bandwidth: double data rate at the memory clock over the bus width.
double memory_bytes_per_s(int device) {
  int khz = 0, bits = 0;
  WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device));
  WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * khz * 1e3 * bits / 8;
}

// Why the GPU of compute capability `own` cannot be served as `served` (WAVETUNE_ARCH), empty where it can.
std::string override_error(int32_t served, int32_t own, int device, const char* name) {
  std::ostringstream os;
  if (served > own) {
    os << "WAVETUNE_ARCH=sm" << served << " names compute capability " << served / 10 << "." << served % 10
       << ", above CUDA device " << device << "'s (" << name << ", " << own / 10 << "." << own % 10
       << "): it serves a GPU as an older architecture only";
  } else if (served < kMinComputeCapability) {
    os << "WAVETUNE_ARCH=sm" << served << " names compute capability " << served / 10 << "." << served % 10
       << "; wavetune needs " << kMinComputeCapability / 10 << "." << kMinComputeCapability % 10 << " or later";
  }
  return os.str();
}

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
    cudaDeviceProp prop{};
    WAVETUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    const int32_t own = prop.major * 10 + prop.minor;
    slot.error = unsupported_device_error(device, prop.name, prop.major, prop.minor);
    std::string malformed;
    const int32_t emulated = arch_override(&malformed);
    const int32_t served = emulated > 0 ? emulated : own;
    if (slot.error.empty()) slot.error = malformed.empty() ? override_error(served, own, device, prop.name) : malformed;
    slot.info = DeviceInfo{device, prop.multiProcessorCount, memory_bytes_per_s(device) / 1e6, served, own};
    if (slot.error.empty()) note_served_compute_capability(served);
  });
  return slot;
}

// The driver functions that say which SMs the current context runs on, resolved through the runtime (the
// library does not link libcuda); null where the driver lacks them.
struct ContextQueries {
  CUresult (*get_current)(CUcontext*) = nullptr;
  CUresult (*get_id)(CUcontext, unsigned long long*) = nullptr;
  CUresult (*get_resource)(CUcontext, CUdevResource*, CUdevResourceType) = nullptr;
};

const ContextQueries& context_queries() {
  static const ContextQueries queries = [] {
    ContextQueries q;
    auto resolve = [](const char* symbol, auto*& fn) {
      void* address = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion(symbol, &address, 12050, cudaEnableDefault, &found) == cudaSuccess &&
          found == cudaDriverEntryPointSuccess) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(address);
      }
      cudaGetLastError();
    };
    resolve("cuCtxGetCurrent", q.get_current);
    resolve("cuCtxGetId", q.get_id);
    resolve("cuCtxGetDevResource", q.get_resource);
    return q;
  }();
  return queries;
}

// NOTES: a green context (or an MPS partition) runs on fewer SMs than its device has. The wave mapping's
// capacity, the persistent kernels' grids, the profiler and the tables' device check must all see those SMs,
// so a GPU emulated that way is tuned and served as the smaller GPU it stands for.
// The current context and its process-unique id; a null context where there is none yet or the driver cannot say.
CUcontext current_context(unsigned long long* id) {
  const ContextQueries& q = context_queries();
  CUcontext context = nullptr;
  *id = 0;
  if (!q.get_current || !q.get_id || !q.get_resource || q.get_current(&context) != CUDA_SUCCESS || !context ||
      q.get_id(context, id) != CUDA_SUCCESS) {
    return nullptr;
  }
  return context;
}

// The SMs `context` runs on, at most `device_sms`; `device_sms` for a null context.
int context_sm_count(CUcontext context, int device_sms) {
  CUdevResource sms{};
  if (!context || context_queries().get_resource(context, &sms, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS ||
      sms.sm.smCount == 0) {
    return device_sms;
  }
  return std::min<int>(device_sms, int(sms.sm.smCount));
}

}  // namespace

const char* current_device_error() {
  const DeviceSlot& slot = current_device();
  return slot.error.empty() ? nullptr : slot.error.c_str();
}

const DeviceInfo& current_device_info() {
  const DeviceSlot& slot = current_device();
  if (!slot.error.empty()) WAVETUNE_INVALID(slot.error);
  // Per thread, as the current context is: the device's properties with the current context's SMs, looked up
  // again only when the context changes.
  thread_local DeviceInfo info{-1, 0, 0, 0, 0};
  thread_local unsigned long long info_context = 0;
  unsigned long long id = 0;
  const CUcontext context = current_context(&id);
  if (info.device != slot.info.device || id != info_context || id == 0) {
    info = slot.info;
    info.sm_count = context_sm_count(context, slot.info.sm_count);
    info_context = id;
  }
  return info;
}

void require_workspace(size_t needed, const void* workspace, size_t workspace_bytes) {
  if (workspace_bytes < needed || (needed && !workspace)) {
    WAVETUNE_INVALID("this launch needs ", needed, " bytes of workspace, got ", workspace_bytes,
                     " (gemm_workspace_bytes gives the size)");
  }
}

}  // namespace detail

int32_t served_compute_capability() {
  const detail::DeviceSlot* slot = nullptr;
  try {
    slot = &detail::current_device();
  } catch (const RuntimeError&) {  // no usable device: a build host
    return arch_override();
  }
  if (!slot->error.empty()) WAVETUNE_INVALID(slot->error);
  return slot->info.compute_capability;
}

int32_t detail::own_compute_capability() {
  try {
    const detail::DeviceSlot& slot = detail::current_device();
    if (slot.error.empty()) return slot.info.own_compute_capability;
  } catch (const RuntimeError&) {  // no usable device: a build host
  }
  return served_compute_capability();
}

std::string no_device_reason() {
  // NOTES: without a driver the runtime says "cudaErrorInsufficientDriver", which reads as an outdated
  // driver; the missing library says what is wrong.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
  dlclose(driver);
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next CUDA call does not report it
    return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  }
  return count > 0 ? "" : "the CUDA runtime sees no device";
}

DeviceProperties device_properties() {
  int device = 0;
  WAVETUNE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  WAVETUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  unsigned long long id = 0;
  const int sms = detail::context_sm_count(detail::current_context(&id), prop.multiProcessorCount);
  std::string name = prop.name;
  // A context confined to fewer SMs is another GPU to the tables (their file names come from this name).
  if (sms < prop.multiProcessorCount) name += " (" + std::to_string(sms) + " SMs)";
  return {name, sms, prop.l2CacheSize, prop.major, prop.minor, detail::memory_bytes_per_s(device)};
}

}  // namespace wavetune
