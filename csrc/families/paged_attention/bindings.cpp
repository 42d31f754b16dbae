// Bindings of the paged attention family (csrc/include/wavetune/paged_attention.h): tensors arrive as raw
// pointers and strides; the Python entry point does the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <tuple>

#include "bindings.h"
#include "wavetune/paged_attention.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

void bind(py::module_& m);
FamilyBindings registration("paged_attention", &bind);

// (batch, heads_q, heads_kv, head_dim, page_size, max_seq_len); (pointer, batch or token stride, head stride)
// of q and out; (k pointer, v pointer, page, row and head strides) of the caches; (pointer, row stride) of the
// table, the key_starts pointer and total_keys; (q_starts pointer, max_q_len, q_tokens, causal) of the queries.
using PySizes = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>;
using PyRows = std::tuple<uintptr_t, int64_t, int64_t>;
using PyCaches = std::tuple<uintptr_t, uintptr_t, int64_t, int64_t, int64_t>;
using PyKeys = std::tuple<uintptr_t, int64_t, uintptr_t, int64_t>;
using PyQueries = std::tuple<uintptr_t, int32_t, int32_t, bool>;

PagedAttentionProblem make_problem(const PySizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys,
                                   uintptr_t seq_lens, const PyRows& out, const PyQueries& queries, float scale,
                                   int32_t dtype) {
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

void bind(py::module_& m) {
  m.def("paged_attention_variants", [] {
    py::list out;
    for (const VariantInfo& v : paged_attention_variants()) out.append(variant_dict(v));
    return out;
  });
  m.def("paged_attention_config_space_hash", &paged_attention_config_space_hash,
        "Identifies the compiled paged attention catalog.");
  m.def("paged_attention_max_splits", [] { return kPagedAttentionMaxSplits; });
  m.def("paged_attention_resident_ctas", &paged_attention_resident_ctas, py::arg("variant"),
        "CTAs of a kernel resident per SM on the current device.");
  m.def("paged_attention_cluster_ctas", &paged_attention_cluster_ctas, py::arg("variant"), py::arg("cluster"),
        "CTAs of a kernel resident at once on the current device in clusters of `cluster` (0: no such clusters).");
  m.def("paged_attention_max_cluster_splits", [] { return kPagedAttentionMaxClusterSplits; });
  m.def(
      "paged_attention_problem_error",
      [](const PySizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype) {
        return paged_attention_problem_error(make_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype));
      },
      "Empty string when a paged attention problem's sizes, pointers and strides are valid, else the reason.");
  m.def(
      "paged_attention_choice",
      [](const PySizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype) {
        const PagedAttentionLaunch how =
            paged_attention_choice(make_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype));
        return py::make_tuple(how.variant, how.splits);
      },
      "(kernel id, KV splits) the wave model picks on the current device.");
  m.def(
      "paged_attention_workspace_bytes",
      [](const PySizes& sizes, int32_t variant, int32_t splits, int32_t q_tokens) {
        const PyRows none{0, 0, 0};
        return paged_attention_workspace_bytes(
            make_problem(sizes, none, {0, 0, 0, 0, 0}, {0, 0, 0, 0}, 0, none, {0, 1, q_tokens, true}, 1.0f, 0),
            {variant, splits});
      },
      py::arg("sizes"), py::arg("variant"), py::arg("splits"), py::arg("q_tokens") = 0,
      "Workspace bytes a launch needs (q_tokens: rows of q, 0 for one per sequence).");
  m.def(
      "paged_attention",
      [](const PySizes& sizes, const PyRows& q, const PyCaches& caches, const PyKeys& keys, uintptr_t seq_lens,
         const PyRows& out, const PyQueries& queries, float scale, int32_t dtype, int32_t variant, int32_t splits,
         uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
        paged_attention(make_problem(sizes, q, caches, keys, seq_lens, out, queries, scale, dtype), {variant, splits},
                        reinterpret_cast<void*>(workspace), workspace_bytes, reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "Paged attention with this kernel and split count on the given "
      "stream.");
}

}  // namespace
}  // namespace wavetune::bindings
