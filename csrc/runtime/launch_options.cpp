// What every family's launches read of the environment (kernels.h): programmatic dependent launch and the
// architecture the kernels serve the device as (WAVETUNE_ARCH).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "device.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace {

std::atomic<bool>& programmatic() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("WAVETUNE_PDL");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return on;
}

// Empty when `arch` is "sm" and two or three digits, optionally ending in "a"; else why it is no architecture name.
std::string arch_name_error(const std::string& arch) {
  const size_t digits_end = !arch.empty() && arch.back() == 'a' ? arch.size() - 1 : arch.size();
  const std::string digits = arch.size() > 2 ? arch.substr(2, digits_end - 2) : "";
  const bool well_formed = arch.compare(0, 2, "sm") == 0 && (digits.size() == 2 || digits.size() == 3) &&
                           std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c) != 0; });
  if (well_formed) return {};
  return "'" + arch + "' is not an architecture name: use sm followed by the compute capability's digits, as " +
         "sm80 (A100), sm86, sm89 (L4, L40S, RTX 4090), sm90 (H100)";
}

// WAVETUNE_ARCH as read once: its compute capability (0 where unset) or why it is refused.
struct ArchOverride {
  int32_t cc = 0;
  std::string error;
};

const ArchOverride& read_arch_override() {
  static const ArchOverride value = [] {
    ArchOverride o;
    const char* env = std::getenv("WAVETUNE_ARCH");
    if (!env || !*env) return o;
    o.error = arch_name_error(env);
    if (o.error.empty()) {
      o.cc = parse_compute_capability(env);
    } else {
      o.error = "WAVETUNE_ARCH: " + o.error;
    }
    return o;
  }();
  return value;
}

// The lowest compute capability a device has been served as in this process (device.cu notes each; WAVETUNE_ARCH's
// from the start), INT32_MAX before any.
std::atomic<int32_t>& lowest_served() {
  static std::atomic<int32_t> cc{read_arch_override().cc > 0 ? read_arch_override().cc : INT32_MAX};
  return cc;
}

}  // namespace

int32_t parse_compute_capability(const std::string& arch) {
  const std::string error = arch_name_error(arch);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return std::stoi(arch.substr(2, arch.back() == 'a' ? arch.size() - 3 : arch.size() - 2));
}

Arch parse_arch(const std::string& name) {
  if (name == "any") return arch::any;
  return {parse_compute_capability(name), name.back() == 'a'};
}

int32_t detail::arch_override(std::string* error) {
  const ArchOverride& o = read_arch_override();
  *error = o.error;
  return o.cc;
}

int32_t arch_override() {
  std::string error;
  const int32_t cc = detail::arch_override(&error);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return cc;
}

std::string unsupported_device_error(int device, const std::string& name, int major, int minor) {
  if (major * 10 + minor >= kMinComputeCapability) return {};
  std::ostringstream os;
  os << "CUDA device " << device << " (" << name << ") has compute capability " << major << "." << minor
     << "; wavetune needs compute capability " << kMinComputeCapability / 10 << "." << kMinComputeCapability % 10
     << " or later (Ampere: A100, A10, RTX 30xx; Ada, Hopper, Blackwell)";
  return os.str();
}

bool runs_here(const VariantInfo& v) {
  // NOTES: code for one architecture only (sm90a) also needs the device itself to be it: a newer GPU served as
  // sm90 (WAVETUNE_ARCH) runs the portable kernels, not Hopper's.
  const int32_t cc = served_compute_capability();
  return cc == 0 || (runs_on(v, cc) && (!v.arch.specific || runs_on(v, detail::own_compute_capability())));
}

std::string detail::arch_error(const VariantInfo& v) {
  if (runs_here(v)) return {};
  const int32_t served = served_compute_capability();
  std::ostringstream os;
  os << "variant " << v.name << " is built for " << to_string(v.arch)
     << (v.arch.specific ? " (that architecture only)" : " and later") << "; this GPU is served as sm" << served
     << (wavetune::arch_override() > 0 ? " (WAVETUNE_ARCH)" : "");
  if (served != detail::own_compute_capability()) os << " and is itself sm" << detail::own_compute_capability();
  return os.str();
}

void set_programmatic_launch(bool on) { programmatic().store(on, std::memory_order_relaxed); }

// NOTES: griddepcontrol and the launch attribute need compute capability 9.0; on a GPU served as an older one the
// kernels launch without it.
bool programmatic_launch() {
  return programmatic().load(std::memory_order_relaxed) && lowest_served().load(std::memory_order_relaxed) >= 90;
}

void detail::note_served_compute_capability(int32_t cc) {
  int32_t lowest = lowest_served().load(std::memory_order_relaxed);
  while (cc < lowest && !lowest_served().compare_exchange_weak(lowest, cc, std::memory_order_relaxed)) {
  }
}

}  // namespace wavetune
