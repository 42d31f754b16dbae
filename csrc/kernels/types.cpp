#include "wavetune/types.h"

namespace wavetune {

const char* to_string(DType v) { return v == DType::bf16 ? "bf16" : "fp16"; }
const char* to_string(BLayout v) { return v == BLayout::col ? "col" : "row"; }
const char* to_string(Schedule v) { return v == Schedule::cooperative ? "cooperative" : "pingpong"; }
const char* to_string(TileScheduler v) { return v == TileScheduler::persistent ? "persistent" : "stream_k"; }

const char* to_string(Decomposition v) {
  switch (v) {
    case Decomposition::data_parallel: return "data_parallel";
    case Decomposition::split_k: return "split_k";
    case Decomposition::stream_k: return "stream_k";
    default: return "heuristic";
  }
}

const char* to_string(Raster v) {
  switch (v) {
    case Raster::along_m: return "along_m";
    case Raster::along_n: return "along_n";
    default: return "heuristic";
  }
}

}  // namespace wavetune
