// Launch options every family's launches read (kernels.h): programmatic dependent launch.
#include <atomic>
#include <cstdlib>
#include <cstring>

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

}  // namespace

void set_programmatic_launch(bool on) { programmatic().store(on, std::memory_order_relaxed); }

bool programmatic_launch() { return programmatic().load(std::memory_order_relaxed); }

}  // namespace wavetune
