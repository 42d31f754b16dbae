// cuBLAS and cuBLASLt opened at run time, for the families whose candidates are library calls: the dense GEMM's
// cuBLAS candidate (gemm/cublas_variant.cu) and the scaled GEMM's cuBLASLt one (scaled_gemm/cublaslt_variant.cu).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <mutex>
#include <type_traits>

#include "device.h"
#include "wavetune/errors.h"
#include "wavetune/types.h"

namespace wavetune::detail {

// NOTES: the libraries are opened with dlopen and declared here from their C ABI (cublas_api.h and cublasLt.h,
// CUDA 12.9 and 13), not linked: the package then builds where the toolkit has no cuBLAS headers (CI) and imports
// where no libcublas is installed, with the candidates absent. The enumerators are the headers' values.
namespace cublas {

using Status = int;  // cublasStatus_t, 0: success
using Handle = void*;
constexpr int kF32 = 0, kF16 = 2, kBF16 = 14, kE4m3 = 28;  // cudaDataType
constexpr int kComputeF32 = 68;                            // CUBLAS_COMPUTE_32F
constexpr int kOpN = 0, kOpT = 1;                          // cublasOperation_t
// cublasLtMatmulDescAttributes_t, cublasLtEpilogue_t, cublasLtMatmulPreferenceAttributes_t,
// cublasLtMatmulMatrixScale_t.
constexpr int kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8;
constexpr int kDescAScalePointer = 17, kDescBScalePointer = 18, kDescBiasDataType = 26;
constexpr int kDescAScaleMode = 31, kDescBScaleMode = 32;
constexpr uint32_t kEpilogueBias = 4;
constexpr int kPrefMaxWorkspaceBytes = 1;
constexpr int kScaleScalar = 0, kScaleOuterVector = 3, kScaleVector128 = 4, kScaleBlock128 = 5;
// 32 MiB: the workspace cuBLAS recommends on Hopper, and what torch gives its handles there.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct Heuristic {  // cublasLtMatmulHeuristicResult_t
  uint64_t algo[8];
  size_t workspace_bytes;
  Status state;
  float waves;
  int reserved[4];
};

// cuBLASLt's entry points.
struct Lt {
  Status (*create)(Handle*);
  Status (*desc_create)(Handle*, int, int);
  Status (*desc_set)(Handle, int, const void*, size_t);
  Status (*desc_destroy)(Handle);
  Status (*layout_create)(Handle*, int, uint64_t, uint64_t, int64_t);
  Status (*layout_destroy)(Handle);
  Status (*pref_create)(Handle*);
  Status (*pref_set)(Handle, int, const void*, size_t);
  Status (*pref_destroy)(Handle);
  Status (*heuristic)(Handle, Handle, Handle, Handle, Handle, Handle, Handle, int, Heuristic*, int*);
  Status (*matmul)(Handle, Handle, const void*, const void*, Handle, const void*, Handle, const void*, const void*,
                   Handle, void*, Handle, const void*, void*, size_t, Stream);
  const char* (*status_name)(Status);
};

// A library by its soname for this build's CUDA major version (the copy torch has loaded, or one on the
// loader's path), else that file in the directories WAVETUNE_CUBLAS lists (':'-separated; the Python
// package adds the nvidia-cublas wheel's). WAVETUNE_CUBLAS=0 turns the candidates off. nullptr: none.
inline void* open_library(const char* name) {
  const std::string soname = std::string(name) + ".so." + std::to_string(WAVETUNE_CUDA_MAJOR);
  const char* env = std::getenv("WAVETUNE_CUBLAS");
  const std::string dirs = env ? env : "";
  if (dirs == "0") return nullptr;
  if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  for (size_t begin = 0; begin < dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string path = dirs.substr(begin, end - begin) + "/" + soname;
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    begin = end + 1;
  }
  return nullptr;
}

// Binds `fn` to `symbol` of `library`; false when it is missing.
template <class Fn>
bool bind(void* library, Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  return fn != nullptr;
}

// cuBLASLt, opened once; nullptr when it cannot be.
inline const Lt* lt() {
  static const Lt* loaded = []() -> const Lt* {
    void* lib = open_library("libcublasLt");
    if (!lib) return nullptr;
    static Lt a;
    const bool complete =
        bind(lib, a.create, "cublasLtCreate") && bind(lib, a.desc_create, "cublasLtMatmulDescCreate") &&
        bind(lib, a.desc_set, "cublasLtMatmulDescSetAttribute") &&
        bind(lib, a.desc_destroy, "cublasLtMatmulDescDestroy") &&
        bind(lib, a.layout_create, "cublasLtMatrixLayoutCreate") &&
        bind(lib, a.layout_destroy, "cublasLtMatrixLayoutDestroy") &&
        bind(lib, a.pref_create, "cublasLtMatmulPreferenceCreate") &&
        bind(lib, a.pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
        bind(lib, a.pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
        bind(lib, a.heuristic, "cublasLtMatmulAlgoGetHeuristic") && bind(lib, a.matmul, "cublasLtMatmul") &&
        bind(lib, a.status_name, "cublasLtGetStatusName");
    return complete ? &a : nullptr;
  }();
  return loaded;
}

inline void check(Status status, const char* what) {
  if (status != 0) WAVETUNE_FAIL("cuBLASLt ", what, " failed: ", lt()->status_name(status));
}

// The cuBLASLt handle of `device`, made on first use there. cuBLASLt takes its stream and workspace per call,
// so every family's calls share it without a lock.
inline Handle lt_handle(int device) {
  static std::array<std::once_flag, kMaxDevices> made;
  static std::array<Handle, kMaxDevices> handles{};
  std::call_once(made.at(device), [&] { check(lt()->create(&handles[device]), "handle creation"); });
  return handles[device];
}

// The descriptors of one cuBLASLt call, destroyed with it: the matmul descriptor, a preference capped at
// kWorkspaceBytes, and the A, B and D layouts (C is D).
struct LtCall {
  Handle desc = nullptr, pref = nullptr, layouts[3] = {nullptr, nullptr, nullptr};

  explicit LtCall(int scale_type) {
    check(lt()->desc_create(&desc, kComputeF32, scale_type), "matmul descriptor");
    check(lt()->pref_create(&pref), "preference");
    check(lt()->pref_set(pref, kPrefMaxWorkspaceBytes, &kWorkspaceBytes, sizeof(kWorkspaceBytes)), "workspace");
  }
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    for (Handle layout : layouts) {
      if (layout) lt()->layout_destroy(layout);
    }
    if (pref) lt()->pref_destroy(pref);
    if (desc) lt()->desc_destroy(desc);
  }

  template <class T>
  void set(int attribute, const T& value, const char* what) {
    check(lt()->desc_set(desc, attribute, &value, sizeof(value)), what);
  }

  // Column-major layouts: layouts[i] is rows x cols with leading dimension ld.
  void layout(int i, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    check(lt()->layout_create(&layouts[i], type, rows, cols, ld), "matrix layout");
  }

  // The heuristic's first algorithm for D = op(A) op(B) on `handle`; false when it has none.
  bool first_algorithm(Handle handle, Heuristic& best) {
    int found = 0;
    const Status status =
        lt()->heuristic(handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref, 1, &best, &found);
    return status == 0 && found > 0;
  }

  void run(Handle handle, const Heuristic& algorithm, const void* a, const void* b, void* d, void* workspace,
           Stream stream) {
    const float alpha = 1, beta = 0;
    check(lt()->matmul(handle, desc, &alpha, a, layouts[0], b, layouts[1], &beta, d, layouts[2], d, layouts[2],
                       algorithm.algo, workspace, kWorkspaceBytes, stream),
          "matmul");
  }
};

}  // namespace cublas
}  // namespace wavetune::detail
