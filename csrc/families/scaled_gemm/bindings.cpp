// Bindings of the scaled GEMM family (csrc/include/wavetune/scaled_gemm.h): tensors arrive as raw pointers and
// sizes; the Python entry point does the framework-level checks.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

#include "bindings.h"
#include "model_bindings.h"
#include "scaled_model.h"
#include "wavetune/scaled_gemm.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

// Sizes, pointers and scale kinds (ScaleKind codes) as Python passes them: (m, n, k, a, lda, b, ldb, d, ldd,
// out_dtype, scale_a, scale_a_kind, scale_b, scale_b_kind, bias).
ScaledGemmProblem make_problem(int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb,
                               uintptr_t d, int64_t ldd, int32_t out_dtype, uintptr_t scale_a, int32_t a_kind,
                               uintptr_t scale_b, int32_t b_kind, uintptr_t bias) {
  return {m,
          n,
          k,
          reinterpret_cast<const void*>(a),
          lda,
          reinterpret_cast<const void*>(b),
          ldb,
          reinterpret_cast<void*>(d),
          ldd,
          static_cast<DType>(out_dtype),
          reinterpret_cast<const float*>(scale_a),
          static_cast<ScaleKind>(a_kind),
          reinterpret_cast<const float*>(scale_b),
          static_cast<ScaleKind>(b_kind),
          reinterpret_cast<const void*>(bias)};
}

// The sizes and kind of scales the built-in models read of a problem (scaled_model.h).
ScaledGemmProblem sized_problem(int32_t m, int32_t n, int32_t k, int32_t scale_kind) {
  if (m < 1 || n < 1 || k < 1) {
    throw std::invalid_argument("m, n and k must be >= 1, got " + std::to_string(m) + ", " + std::to_string(n) +
                                ", " + std::to_string(k));
  }
  if (scale_kind < 0 || scale_kind > int32_t(ScaleKind::block128)) {
    throw std::invalid_argument("scale_kind is a code of scale_kinds(), got " + std::to_string(scale_kind));
  }
  return make_problem(m, n, k, 0, k, 0, k, 0, n, 0, 0, scale_kind, 0, scale_kind, 0);
}

void require_positive(int64_t value, const char* what) {
  if (value < 1) throw std::invalid_argument(std::string(what) + " must be >= 1, got " + std::to_string(value));
}

// A decode variant as the replays give it: (tile rows, tokens, K per loop step, persistent, resident CTAs per SM).
using PyDecodeTile = std::tuple<int64_t, int64_t, int64_t, bool, int32_t>;

detail::DecodeTile make_decode_tile(const PyDecodeTile& t, int32_t sm_count) {
  const auto& [rows, tokens, tile_k, persistent, resident] = t;
  for (const int64_t v : {rows, tokens, tile_k, int64_t(resident), int64_t(sm_count)}) {
    require_positive(v, "a decode tile's rows, tokens, K step and resident CTAs, and sm_count");
  }
  return {rows, tokens, tile_k, persistent, resident};
}

// The built-in models' functions (scaled_model.h) with the model's fields that `model` names overridden.
void bind_model_functions(py::module_& m) {
  bind_model<ScaledGemmModel>(m, "scaled_gemm");
  m.def(
      "scaled_gemm_predicted_steps",
      [](const PyDecodeTile& tile, int32_t m_, int32_t n, int32_t k, int32_t splits, int32_t sm_count,
         const py::dict& model) {
        require_positive(splits, "splits");
        return detail::predicted_steps(make_decode_tile(tile, sm_count), sized_problem(m_, n, k, 0), splits, sm_count,
                                       model_with<ScaledGemmModel>(model));
      },
      py::arg("tile"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("splits"), py::arg("sm_count"),
      py::arg("model") = py::dict(),
      "The decode wave model's loop steps for a decode variant, tile = (rows, tokens, K per loop step, persistent, "
      "resident CTAs per SM), on an M x N x K problem with that many K splits.");
  m.def(
      "scaled_gemm_decode_splits",
      [](const PyDecodeTile& tile, int32_t m_, int32_t n, int32_t k, int32_t sm_count, const py::dict& model) {
        return detail::decode_splits(make_decode_tile(tile, sm_count), sized_problem(m_, n, k, 0), sm_count,
                                     model_with<ScaledGemmModel>(model));
      },
      py::arg("tile"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("sm_count"), py::arg("model") = py::dict(),
      "The K splits the choice gives a decode variant (tile as scaled_gemm_predicted_steps takes it).");
  m.def(
      "scaled_gemm_cutlass_cost_us",
      [](const std::tuple<int32_t, int32_t, int32_t>& tile, bool swap_ab, const std::string& schedule, int32_t m_,
         int32_t n, int32_t k, int32_t scale_kind, int32_t sm_count, double memory_bytes_per_us,
         const py::dict& model) {
        VariantInfo v{};
        std::tie(v.tile_m, v.tile_n, v.tile_k) = tile;
        v.swap_ab = swap_ab;
        v.schedule = parse_name<Schedule>(schedule, 2, "CUTLASS schedule");
        for (const int64_t x : {int64_t(v.tile_m), int64_t(v.tile_n), int64_t(v.tile_k), int64_t(sm_count)}) {
          require_positive(x, "the tile's sides and sm_count");
        }
        if (!(memory_bytes_per_us > 0)) throw std::invalid_argument("memory_bytes_per_us must be > 0");
        return detail::cutlass_cost_us(v, sized_problem(m_, n, k, scale_kind), sm_count, memory_bytes_per_us,
                                       model_with<ScaledGemmModel>(model));
      },
      py::arg("tile"), py::arg("swap_ab"), py::arg("schedule"), py::arg("m"), py::arg("n"), py::arg("k"),
      py::arg("scale_kind"), py::arg("sm_count"), py::arg("memory_bytes_per_us"), py::arg("model") = py::dict(),
      "The CUTLASS variants' wave model: the predicted microseconds of a (tile M, N, K) variant, swapped or not, of "
      "schedule cooperative or pingpong, on a GPU of sm_count SMs and that peak DRAM bandwidth.");
  m.def(
      "scaled_gemm_cluster_rank",
      [](const std::tuple<int32_t, int32_t>& cluster, bool swap_ab, int32_t m_, int32_t n) {
        VariantInfo v{};
        std::tie(v.cluster_m, v.cluster_n) = cluster;
        v.swap_ab = swap_ab;
        return detail::cluster_rank(v, sized_problem(m_, n, 1, 0));
      },
      py::arg("cluster"), py::arg("swap_ab"), py::arg("m"), py::arg("n"),
      "How the CUTLASS choice breaks ties between clusters of one tile: 0 a pair along the kernel's longer output "
      "side, 1 the other pair, 2 none.");
  m.def(
      "scaled_gemm_cutlass_fills_the_gpu",
      [](int32_t tile_rows, int32_t tokens, int32_t m_, int32_t n, int32_t scale_kind, int32_t sm_count,
         const py::dict& model) {
        require_positive(tile_rows, "tile_rows");
        require_positive(sm_count, "sm_count");
        if (tokens < 0) throw std::invalid_argument("tokens must be >= 0 (0: no decode variant takes the problem)");
        return detail::cutlass_fills_the_gpu(tile_rows, tokens, sized_problem(m_, n, 1, scale_kind), sm_count,
                                             model_with<ScaledGemmModel>(model));
      },
      py::arg("tile_rows"), py::arg("tokens"), py::arg("m"), py::arg("n"), py::arg("scale_kind"), py::arg("sm_count"),
      py::arg("model") = py::dict(),
      "Whether, at up to 16 tokens, a swapped CUTLASS variant of tile_rows-row weight tiles takes the problem from "
      "the decode variants of `tokens`-token tiles (0: none takes it).");
}

}  // namespace

void bind_scaled_gemm(py::module_& m, const FamilyBindings&) {
  bind_model_functions(m);
  m.def(
      "scaled_gemm_max_tokens",
      [](bool block_scales) { return block_scales ? kScaledGemmMaxBlockTokens : kScaledGemmMaxTokens; },
      py::arg("block_scales") = false,
      "The most tokens the default choice gives the variants (with block_scales: the decode variants, in a build "
      "without the block-scaled CUTLASS ones).");
  m.def("scale_kinds", [] { return py::make_tuple("tensor", "row", "block128"); },
        "The ScaleKind names, by code.");
  m.def(
      "scaled_gemm_problem_error",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias) {
        return scaled_gemm_problem_error(
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias));
      },
      "Empty string when a scaled GEMM's sizes, pointers and alignment are valid, else the reason.");
  m.def(
      "scaled_gemm_chosen_variant",
      [](int32_t m, int32_t n, int32_t k, int32_t out_dtype, int32_t a_kind, int32_t b_kind, bool bias) {
        // The choice reads the sizes, the output dtype, the kinds of scales and whether there is a bias (cuBLASLt
        // then needs a kernel with its bias epilogue), never the data: a stand-in address marks the bias.
        const uintptr_t bias_mark = bias ? 256 : 0;
        return choose(make_problem(m, n, k, 0, k, 0, k, 0, n, out_dtype, 0, a_kind, 0, b_kind, bias_mark), nullptr)
            .variant;
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("out_dtype"), py::arg("scale_a_kind"),
      py::arg("scale_b_kind"), py::arg("bias") = false,
      "The variant a scaled_gemm call with no config runs on the current device; -1: another GEMM runs it "
      "(torch._scaled_mm, or for 128-block scales the block-scaled grouped GEMM).");
  m.def("scaled_gemm_resident_ctas", &scaled_gemm_resident_ctas, py::arg("variant"),
        "CTAs of a decode variant resident per SM on the current device (0 for the other variants).");
  m.def(
      "scaled_gemm_workspace_bytes",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias,
         int32_t variant, int32_t splits) {
        return scaled_gemm_workspace_bytes(
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias), variant,
            splits);
      },
      "The workspace bytes scaled_gemm needs with the given variant and K splits (0 but for stream-K variants).");
  m.def(
      "scaled_gemm",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias,
         int32_t variant, int32_t splits, uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
        const ScaledGemmProblem p =
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias);
        scaled_gemm(p, variant, splits, reinterpret_cast<void*>(workspace), workspace_bytes,
                    reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "d = scale_a scale_b (a @ b.T) (+ bias) with the given variant and K splits (0: its own) on the current "
      "device and the given stream, with a workspace of workspace_bytes (0 and null where none is needed).");
  m.def(
      "quantize_fp8",
      [](uintptr_t x, int64_t ldx, int32_t dtype, int32_t rows, int32_t k, int32_t group_size, uintptr_t q,
         uintptr_t scale, uintptr_t static_scale, uintptr_t stream) {
        quantize_fp8(reinterpret_cast<const void*>(x), ldx, static_cast<DType>(dtype), rows, k, group_size,
                     reinterpret_cast<void*>(q), reinterpret_cast<float*>(scale),
                     reinterpret_cast<const float*>(static_scale), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "x (bf16/fp16) to e4m3 per row or per 128-group (scales written) or with one static scale, on the given "
      "stream.");
}

}  // namespace wavetune::bindings
