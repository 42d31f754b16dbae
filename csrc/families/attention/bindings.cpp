// Bindings of the attention family (csrc/include/wavetune/attention.h), its FMHA variants and its paged
// kernels: tensors arrive as raw pointers and strides; the Python entry points do the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "choice_rules.h"
#include "model_bindings.h"
#include "paged_model.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/lookup.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

// (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim) and, per tensor, (pointer, batch, seq, head strides).
using PySizes = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>;
using PyTensor = std::tuple<uintptr_t, int64_t, int64_t, int64_t>;

AttentionTensor make_tensor(const PyTensor& t) {
  const auto& [ptr, batch, seq, head] = t;
  return {reinterpret_cast<const void*>(ptr), batch, seq, head};
}

AttentionProblem make_problem(const PySizes& sizes, const PyTensor& q, const PyTensor& k, const PyTensor& v,
                              const PyTensor& out, float scale, bool causal, int32_t dtype) {
  const auto& [batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim] = sizes;
  return {batch,           seqlen_q,        seqlen_k,        heads_q,           heads_kv, head_dim,
          make_tensor(q),  make_tensor(k),  make_tensor(v),  make_tensor(out),  scale,    causal,
          static_cast<DType>(dtype)};
}

// The sizes alone: what the workspace depends on.
AttentionProblem sized_problem(const PySizes& sizes) {
  const PyTensor none{0, 0, 0, 0};
  return make_problem(sizes, none, none, none, none, 1.0f, false, 0);
}

using PyTile = std::tuple<int32_t, int32_t, int32_t>;  // (block_q, block_kv, head_dim)

AttentionTile make_tile(const PyTile& t) { return {std::get<0>(t), std::get<1>(t), std::get<2>(t)}; }

AttentionShape make_shape(const PySizes& sizes, bool causal) {
  const auto& [batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim] = sizes;
  return {batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal};
}

// The rules of the run-time choice that read no device (choice_rules.h), with the model's fields that `model`
// names overridden.
void bind_choice_rules(py::module_& m) {
  bind_model<AttentionModel>(m, "attention");
  m.def(
      "attention_builtin_prefers_cudnn",
      [](const PySizes& sizes, bool causal, const std::tuple<bool, bool, bool>& routes, const py::dict& model) {
        const auto& [batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim] = sizes;
        if (std::min({batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim}) < 1) {
          throw std::invalid_argument("attention sizes must be >= 1");
        }
        const PyTensor none{0, 0, 0, 0};
        const auto& [cudnn, paged, cudnn_copies] = routes;
        return detail::builtin_prefers_cudnn(make_problem(sizes, none, none, none, none, 1.0f, causal, 0),
                                             {cudnn, paged, cudnn_copies}, model_with<AttentionModel>(model));
      },
      py::arg("sizes"), py::arg("causal"), py::arg("routes"), py::arg("model") = py::dict(),
      "Whether the built-in choice runs cuDNN's attention for a problem (sizes as attention_chosen_launch takes "
      "them), for a caller that runs routes = (cudnn, paged, cudnn_copies).");
  m.def(
      "attention_table_overrides",
      [](double builtin_us, double best_us, const py::dict& model) {
        return detail::table_overrides(builtin_us, best_us, model_with<AttentionModel>(model));
      },
      py::arg("builtin_us"), py::arg("best_us"), py::arg("model") = py::dict(),
      "Whether a table's candidate predicted best_us replaces the built-in choice it predicts builtin_us.");
}

// The paged kernels' problem: (batch, heads_q, heads_kv, head_dim, page_size, max_seq_len); (pointer, batch or
// token stride, head stride) of q and out; (k pointer, v pointer, page, row and head strides) of the caches;
// (pointer, row stride) of the table, the key_starts pointer and total_keys; (q_starts pointer, max_q_len,
// q_tokens, causal) of the queries.
using PyPagedSizes = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>;
using PyRows = std::tuple<uintptr_t, int64_t, int64_t>;
using PyCaches = std::tuple<uintptr_t, uintptr_t, int64_t, int64_t, int64_t>;
using PyKeys = std::tuple<uintptr_t, int64_t, uintptr_t, int64_t>;
using PyQueries = std::tuple<uintptr_t, int32_t, int32_t, bool>;

PagedAttentionProblem make_paged_problem(const PyPagedSizes& sizes, const PyRows& q, const PyCaches& caches,
                                         const PyKeys& keys, uintptr_t seq_lens, const PyRows& out,
                                         const PyQueries& queries, float scale, int32_t dtype) {
  const auto& [batch, heads_q, heads_kv, head_dim, page_size, max_seq_len] = sizes;
  const auto& [k, v, page_stride, row_stride, head_stride] = caches;
  const auto& [q_starts, max_q_len, q_tokens, causal] = queries;
  PagedAttentionProblem p{batch,
                          heads_q,
                          heads_kv,
                          head_dim,
                          reinterpret_cast<const void*>(std::get<0>(q)),
                          std::get<1>(q),
                          std::get<2>(q),
                          reinterpret_cast<const void*>(k),
                          reinterpret_cast<const void*>(v),
                          page_stride,
                          row_stride,
                          head_stride,
                          page_size,
                          reinterpret_cast<const int32_t*>(std::get<0>(keys)),
                          std::get<1>(keys),
                          reinterpret_cast<const int32_t*>(seq_lens),
                          max_seq_len,
                          reinterpret_cast<void*>(std::get<0>(out)),
                          std::get<1>(out),
                          std::get<2>(out),
                          scale,
                          static_cast<DType>(dtype)};
  p.q_starts = reinterpret_cast<const int32_t*>(q_starts);
  p.max_q_len = max_q_len;
  p.q_tokens = q_tokens;
  p.causal = causal;
  p.key_starts = reinterpret_cast<const int32_t*>(std::get<2>(keys));
  p.total_keys = std::get<3>(keys);
  return p;
}

void bind_fmha(py::module_& m, const FamilyBindings& registration) {
  m.def(
      "attention_problem_error",
      [](const PySizes& sizes, const PyTensor& q, const PyTensor& k, const PyTensor& v, const PyTensor& out, float scale,
         bool causal, int32_t dtype) {
        return attention_problem_error(make_problem(sizes, q, k, v, out, scale, causal, dtype));
      },
      "Empty string when an attention problem's sizes, pointers and strides are valid, else the reason.");
  m.def(
      "attention_workspace_bytes",
      [](const PySizes& sizes, int32_t splits) { return attention_workspace_bytes(sized_problem(sizes), splits); },
      py::arg("sizes"), py::arg("splits"), "Workspace bytes an attention call with these sizes and splits needs.");
  m.def(
      "attention_default_launch",
      [](const PySizes& sizes, const PyTensor& q, const PyTensor& k, const PyTensor& v, const PyTensor& out, float scale,
         bool causal, int32_t dtype) {
        const Launch how = attention_default_launch(make_problem(sizes, q, k, v, out, scale, causal, dtype));
        return py::make_tuple(how.variant, how.micro.splits);
      },
      "(variant id, splits) of the built-in choice on the current device.");
  m.def(
      "attention_chosen_launch",
      [&registration](const PySizes& sizes, const PyTensor& q, const PyTensor& k, const PyTensor& v,
                      const PyTensor& out, float scale, bool causal, int32_t dtype, int device,
                      const std::tuple<bool, bool, bool>& routes, const std::string& batch_invariance) {
        const auto& [cudnn, paged, cudnn_copies] = routes;
        const Launch how = choose(make_problem(sizes, q, k, v, out, scale, causal, dtype),
                                  registration.active_table(device), {cudnn, paged, cudnn_copies},
                                  choice_options(batch_invariance));
        return py::make_tuple(how.variant, how.micro.splits);
      },
      py::arg("sizes"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("scale"), py::arg("causal"),
      py::arg("dtype"), py::arg("device"), py::arg("routes") = std::tuple<bool, bool, bool>{false, false, false},
      py::arg("batch_invariance") = "off",
      "(variant id, splits) a launch with no forced config runs on the current device (ordinal `device`), by "
      "choose (attention.h) with that device's attention table; routes: (cudnn, paged, cudnn_copies), "
      "the AttentionRoutes the caller runs; batch-invariant as batch_invariance says (off, reduction_order, config).");
  m.def(
      "attention_mapping",
      [](const PySizes& sizes, bool causal, const PyTile& tile, int32_t splits) {
        const AttentionTile t = make_tile(tile);
        const FmhaGrid g = fmha_grid(make_shape(sizes, causal), splits);
        const auto [tiles, most] = kv_tiles_per_cta(g, t, causal);
        return py::make_tuple(fmha_ctas(g, t), tiles, most, g.launches);
      },
      py::arg("sizes"), py::arg("causal"), py::arg("tile"), py::arg("splits"),
      "(G CTAs, L KV tiles per CTA on average, the most, launches) of a problem under a (block_q, block_kv, "
      "head_dim) tile (attention_heuristic.h).");
  m.def(
      "attention_cost_us",
      [](const PyTile& tile, const PySizes& sizes, bool causal, int32_t splits, int32_t sm_count) {
        return attention_cost_us(make_shape(sizes, causal), make_tile(tile), splits, sm_count);
      },
      py::arg("tile"), py::arg("sizes"), py::arg("causal"), py::arg("splits"), py::arg("sm_count"),
      "The built-in model's predicted microseconds (attention_heuristic.h).");
  m.def(
      "attention_heuristic",
      [](const std::vector<PyTile>& tiles, const PySizes& sizes, bool causal, int32_t sm_count, int32_t split_limit) {
        if (tiles.empty()) throw std::invalid_argument("no candidate tiles");
        std::vector<AttentionTile> candidates;
        for (const PyTile& t : tiles) candidates.push_back(make_tile(t));
        const AttentionChoice c = choose_attention(candidates, make_shape(sizes, causal), sm_count, split_limit);
        return py::make_tuple(c.index, c.splits);
      },
      py::arg("tiles"), py::arg("sizes"), py::arg("causal"), py::arg("sm_count"), py::arg("split_limit") = kMaxAttentionSplits,
      "(index of the tile, splits) of the built-in choice over (block_q, block_kv, head_dim) tiles.");
  m.def("flash_attention_splits", &flash_attention_splits, py::arg("ctas"), py::arg("kv_tiles"), py::arg("sm_count"),
        py::arg("max_splits"), "FlashAttention's split rule (num_splits_heuristic, from its description).");
  m.def(
      "attention",
      [](const PySizes& sizes, const PyTensor& q, const PyTensor& k, const PyTensor& v, const PyTensor& out, float scale,
         bool causal, int32_t dtype, int32_t variant, int32_t splits, uintptr_t workspace, size_t workspace_bytes,
         uintptr_t stream) {
        attention(make_problem(sizes, q, k, v, out, scale, causal, dtype), kv_split_launch(variant, splits),
                  reinterpret_cast<void*>(workspace), workspace_bytes, reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "Attention forward with this variant and split count on the given stream.");
}

void bind_paged(py::module_& m) {
  m.def("paged_attention_variants", [] { return variant_dicts(paged_attention_variants()); });
  m.def("paged_attention_max_splits", [] { return kPagedAttentionMaxSplits; });
  m.def("paged_attention_resident_ctas", &paged_attention_resident_ctas, py::arg("variant"),
        "CTAs of a kernel resident per SM on the current device.");
  m.def("paged_attention_cluster_ctas", &paged_attention_cluster_ctas, py::arg("variant"), py::arg("cluster"),
        "CTAs of a kernel resident at once on the current device in clusters of `cluster` (0: no such clusters).");
  m.def("paged_attention_max_cluster_splits", [] { return kPagedAttentionMaxClusterSplits; });
  m.def(
      "paged_attention_problem_error",
      [](const PyPagedSizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype) {
        return paged_attention_problem_error(
            make_paged_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype));
      },
      "Empty string when a paged attention problem's sizes, pointers and strides are valid, else the reason.");
  m.def(
      "paged_attention_chosen_launch",
      [](const PyPagedSizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype, const std::string& batch_invariance) {
        const Launch how = choose(make_paged_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype),
                                  nullptr, choice_options(batch_invariance));
        return py::make_tuple(how.variant, how.micro.splits);
      },
      py::arg("sizes"), py::arg("q"), py::arg("caches"), py::arg("keys"), py::arg("seq_lens"), py::arg("out"),
      py::arg("queries"), py::arg("scale"), py::arg("dtype"), py::arg("batch_invariance") = "off",
      "(kernel id, KV splits) the wave model picks on the current device; batch-invariant as batch_invariance says.");
  m.def(
      "paged_attention_workspace_bytes",
      [](const PyPagedSizes& sizes, int32_t variant, int32_t splits, int32_t q_tokens) {
        const PyRows none{0, 0, 0};
        return paged_attention_workspace_bytes(
            make_paged_problem(sizes, none, {0, 0, 0, 0, 0}, {0, 0, 0, 0}, 0, none, {0, 1, q_tokens, true}, 1.0f, 0),
            kv_split_launch(variant, splits));
      },
      py::arg("sizes"), py::arg("variant"), py::arg("splits"), py::arg("q_tokens") = 0,
      "Workspace bytes a launch needs (q_tokens: rows of q, 0 for one per sequence).");
  m.def(
      "paged_attention",
      [](const PyPagedSizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype, int32_t variant, int32_t splits,
         uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
        paged_attention(make_paged_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype),
                        kv_split_launch(variant, splits), reinterpret_cast<void*>(workspace), workspace_bytes,
                        reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "Paged attention with this kernel and split count on the given "
      "stream.");
}

// What the paged kernels' wave model reads of a problem: (batch, heads_q, heads_kv, head_dim, max_q_len,
// max_seq_len, q_tokens (0: batch), total_keys (0: batch x max_seq_len), causal); and of a kernel on a GPU: (rows,
// step keys, computes with wgmma, resident CTAs per SM, resident CTAs in clusters of n for each n as
// paged_attention_cluster_ctas gives them; empty: no clusters).
using PyPagedShape = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int64_t, bool>;
using PyPagedKernel = std::tuple<int32_t, int32_t, bool, int32_t, std::vector<int64_t>>;

PagedAttentionProblem make_paged_shape(const PyPagedShape& shape) {
  PagedAttentionProblem p{};
  std::tie(p.batch, p.heads_q, p.heads_kv, p.head_dim, p.max_q_len, p.max_seq_len, p.q_tokens, p.total_keys,
           p.causal) = shape;
  if (std::min({p.batch, p.heads_q, p.heads_kv, p.head_dim, p.max_q_len}) < 1 || p.heads_q % p.heads_kv != 0) {
    throw std::invalid_argument("batch, heads_q, heads_kv, head_dim and max_q_len must be >= 1 and heads_q a "
                                "multiple of heads_kv");
  }
  if (p.max_seq_len < 0 || p.q_tokens < 0 || p.total_keys < 0) {
    throw std::invalid_argument("max_seq_len, q_tokens and total_keys must be >= 0");
  }
  return p;
}

// The kernel as the model reads it (VariantInfo: tile_m rows, tile_n step keys, schedule cooperative for wgmma).
VariantInfo make_paged_kernel(const PyPagedKernel& kernel) {
  const auto& [rows, step_keys, wgmma, resident, cluster_ctas] = kernel;
  if (rows < 1 || step_keys < 1 || step_keys % detail::paged::kTileKeys != 0 || resident < 1 ||
      std::any_of(cluster_ctas.begin(), cluster_ctas.end(), [](int64_t n) { return n < 0; })) {
    throw std::invalid_argument("a kernel's rows and resident CTAs must be >= 1, its step keys a positive multiple "
                                "of 16 and its CTAs in clusters >= 0");
  }
  VariantInfo v{};
  v.tile_m = rows, v.tile_n = step_keys, v.schedule = wgmma ? Schedule::cooperative : Schedule::decode;
  return v;
}

// The kernel's resident CTAs in clusters of n, as its tuple lists them (0 past them).
auto cluster_ctas_of(const PyPagedKernel& kernel) {
  return [&listed = std::get<4>(kernel)](int32_t n) { return size_t(n) < listed.size() ? listed[n] : int64_t(0); };
}

// The GPU a prediction is for: (SMs, peak DRAM bytes per us).
void check_gpu(int32_t sm_count, double memory_bytes_per_us) {
  if (sm_count < 1 || !(memory_bytes_per_us > 0)) {
    throw std::invalid_argument("sm_count must be >= 1 and memory_bytes_per_us > 0");
  }
}

// The paged kernels' wave model (paged_model.h), with the model's fields that `model` names overridden.
void bind_paged_model(py::module_& m) {
  m.def(
      "paged_attention_predicted_us",
      [](const PyPagedShape& shape, const PyPagedKernel& kernel, int32_t splits, int32_t sm_count,
         double memory_bytes_per_us, const py::dict& model) {
        if (splits < 1) throw std::invalid_argument("splits must be >= 1");
        check_gpu(sm_count, memory_bytes_per_us);
        return detail::predicted_launch_us(make_paged_shape(shape), make_paged_kernel(kernel), splits, sm_count,
                                           int64_t(sm_count) * std::get<3>(kernel), memory_bytes_per_us,
                                           cluster_ctas_of(kernel), model_with<AttentionModel>(model));
      },
      py::arg("problem"), py::arg("kernel"), py::arg("splits"), py::arg("sm_count"), py::arg("memory_bytes_per_us"),
      py::arg("model") = py::dict(),
      "The wave model's predicted microseconds of a launch of the kernel at a requested split count (the splits it "
      "runs, merged in its clusters where they hold the grid) on a GPU of sm_count SMs and that peak DRAM bandwidth.");
  m.def(
      "paged_attention_best_splits",
      [](const PyPagedShape& shape, const PyPagedKernel& kernel, int32_t sm_count, double memory_bytes_per_us,
         const py::dict& model) {
        check_gpu(sm_count, memory_bytes_per_us);
        return detail::best_splits(make_paged_shape(shape), make_paged_kernel(kernel), sm_count,
                                   int64_t(sm_count) * std::get<3>(kernel), memory_bytes_per_us,
                                   cluster_ctas_of(kernel), model_with<AttentionModel>(model));
      },
      py::arg("problem"), py::arg("kernel"), py::arg("sm_count"), py::arg("memory_bytes_per_us"),
      py::arg("model") = py::dict(),
      "(splits, predicted microseconds): the split count the choice gives the kernel (the least predicted; ties: "
      "fewer), problem and kernel as paged_attention_predicted_us takes them.");
  m.def(
      "paged_attention_weighs_kernel",
      [](const PyPagedShape& shape, const PyPagedKernel& kernel) {
        return detail::weighs_kernel(make_paged_shape(shape), make_paged_kernel(kernel));
      },
      py::arg("problem"), py::arg("kernel"),
      "Whether the choice weighs the kernel for the problem (where a KV head's query rows fit one 16-row tile, only "
      "the keys_split kernels and the warp-specialized one of 64 rows).");
  m.def(
      "paged_attention_beats",
      [](double us, int32_t resident, double best_us, int32_t best_resident, const py::dict& model) {
        return detail::beats(us, resident, best_us, best_resident, model_with<AttentionModel>(model));
      },
      py::arg("us"), py::arg("resident"), py::arg("best_us"), py::arg("best_resident"), py::arg("model") = py::dict(),
      "Whether a kernel predicted `us` with `resident` CTAs per SM takes the choice from the best so far (a tie goes "
      "to more resident CTAs).");
}

}  // namespace

void bind_attention(py::module_& m, const FamilyBindings& registration) {
  bind_choice_rules(m);
  bind_fmha(m, registration);
  bind_paged(m);
  bind_paged_model(m);
}

}  // namespace wavetune::bindings
