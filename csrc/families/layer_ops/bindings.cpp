// Bindings of the layer ops (csrc/include/wavetune/layer_ops.h): tensors arrive as raw pointers and strides; the
// Python entry points do the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <tuple>

#include "bindings.h"
#include "wavetune/layer_ops.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

void bind(py::module_& m);
FamilyBindings registration("layer_ops", &bind);

// (pointer, batch, head and seq strides) of a [batch, heads, seq, head_dim] tensor.
using PyHeads = std::tuple<uintptr_t, int64_t, int64_t, int64_t>;

HeadsView heads_view(const PyHeads& v) {
  return {reinterpret_cast<const void*>(std::get<0>(v)), std::get<1>(v), std::get<2>(v), std::get<3>(v)};
}

HeadsOut heads_out(const PyHeads& v) {
  return {reinterpret_cast<void*>(std::get<0>(v)), std::get<1>(v), std::get<2>(v), std::get<3>(v)};
}

// (batch, seq, heads_q, heads_k, head_dim); q, k; (q_out, k_out); (cos, sin, cos batch stride, cos seq stride).
RotaryProblem make_rotary(const std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>& sizes, const PyHeads& q,
                          const PyHeads& k, const std::tuple<PyHeads, PyHeads>& out,
                          const std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>& tables, int32_t dtype) {
  const auto& [batch, seq, heads_q, heads_k, head_dim] = sizes;
  return {batch,
          seq,
          heads_q,
          heads_k,
          head_dim,
          heads_view(q),
          heads_view(k),
          heads_out(std::get<0>(out)),
          heads_out(std::get<1>(out)),
          reinterpret_cast<const void*>(std::get<0>(tables)),
          reinterpret_cast<const void*>(std::get<1>(tables)),
          std::get<2>(tables),
          std::get<3>(tables),
          static_cast<DType>(dtype)};
}

// (values, key cache, value cache, cache batch/head/seq strides, capacity, length, arrivals): values as PyHeads.
using PyCache = std::tuple<PyHeads, uintptr_t, uintptr_t, int64_t, int64_t, int64_t, int32_t, uintptr_t, uintptr_t>;

StaticCacheWrite make_cache(const PyCache& c) {
  const auto& [values, keys, cache_values, batch_stride, head_stride, seq_stride, capacity, length, arrivals] = c;
  return {heads_view(values),
          reinterpret_cast<void*>(keys),
          reinterpret_cast<void*>(cache_values),
          batch_stride,
          head_stride,
          seq_stride,
          capacity,
          reinterpret_cast<int64_t*>(length),
          reinterpret_cast<uint32_t*>(arrivals)};
}

MoeRouting make_routing(uintptr_t expert_ids, int32_t tokens, int32_t top_k, int32_t experts) {
  return {reinterpret_cast<const int64_t*>(expert_ids), tokens, top_k, experts};
}

void bind(py::module_& m) {
  m.def("layer_ops_config_space_hash", [] { return find_kernel_family("layer_ops")->config_space_hash(); },
        "Identifies the layer ops' kernels.");
  m.def(
      "rms_norm",
      [](uintptr_t x, int64_t ldx, uintptr_t weight, uintptr_t out, int64_t ldo, int32_t rows, int32_t width, float eps,
         int32_t dtype, uintptr_t stream) {
        rms_norm(reinterpret_cast<const void*>(x), ldx, reinterpret_cast<const void*>(weight),
                 reinterpret_cast<void*>(out), ldo, rows, width, eps, static_cast<DType>(dtype),
                 reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "RMS normalization of rows, on the given stream.");
  m.def(
      "add_rms_norm",
      [](uintptr_t x, int64_t ldx, uintptr_t residual, int64_t ldr, uintptr_t sum, int64_t lds, uintptr_t weight,
         uintptr_t out, int64_t ldo, int32_t rows, int32_t width, float eps, int32_t dtype, uintptr_t stream) {
        add_rms_norm(reinterpret_cast<const void*>(x), ldx, reinterpret_cast<const void*>(residual), ldr,
                     reinterpret_cast<void*>(sum), lds, reinterpret_cast<const void*>(weight), reinterpret_cast<void*>(out),
                     ldo, rows, width, eps, static_cast<DType>(dtype), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "x + residual into sum, and its RMS normalization into out, on the given stream.");
  m.def(
      "silu_and_mul",
      [](uintptr_t x, int64_t ldx, uintptr_t out, int64_t ldo, int32_t rows, int32_t width, int32_t dtype,
         uintptr_t stream) {
        silu_and_mul(reinterpret_cast<const void*>(x), ldx, reinterpret_cast<void*>(out), ldo, rows, width,
                     static_cast<DType>(dtype), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "SiLU of the first half of each row times its second half.");
  m.def(
      "rotary_embedding",
      [](const std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>& sizes, const PyHeads& q, const PyHeads& k,
         const std::tuple<PyHeads, PyHeads>& out, const std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>& tables,
         int32_t dtype, uintptr_t stream) {
        rotary_embedding(make_rotary(sizes, q, k, out, tables, dtype), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "Rotary position embedding of q and k into q_out and k_out, on the given stream.");
  m.def(
      "rotary_problem_error",
      [](const std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>& sizes, const PyHeads& q, const PyHeads& k,
         const std::tuple<PyHeads, PyHeads>& out, const std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>& tables,
         int32_t dtype) { return rotary_problem_error(make_rotary(sizes, q, k, out, tables, dtype)); },
      "Why rotary_embedding would refuse these arguments; empty when it would not. Needs no GPU.");
  m.def(
      "rotary_cache_write",
      [](const std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>& sizes, const PyHeads& q, const PyHeads& k,
         const PyHeads& q_out, const std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>& tables, const PyCache& cache,
         int32_t dtype, uintptr_t stream) {
        rotary_cache_write(make_rotary(sizes, q, k, {q_out, PyHeads{}}, tables, dtype), make_cache(cache),
                           reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "Rotary position embedding of q into q_out and of k into a static cache, the values beside them, on the given "
      "stream.");
  m.def(
      "cache_write_error",
      [](const std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>& sizes, const PyHeads& q, const PyHeads& k,
         const PyHeads& q_out, const std::tuple<uintptr_t, uintptr_t, int64_t, int64_t>& tables, const PyCache& cache,
         int32_t dtype) { return cache_write_error(make_rotary(sizes, q, k, {q_out, PyHeads{}}, tables, dtype), make_cache(cache)); },
      "Why rotary_cache_write would refuse these arguments; empty when it would not. Needs no GPU.");
  m.attr("moe_max_experts") = kMoeMaxExperts;
  m.def(
      "moe_align",
      [](uintptr_t ids, int32_t tokens, int32_t top_k, int32_t experts, uintptr_t offsets, uintptr_t positions,
         uintptr_t stream) {
        moe_align(make_routing(ids, tokens, top_k, experts), reinterpret_cast<int32_t*>(offsets),
                  reinterpret_cast<int32_t*>(positions), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "The pairs of an MoE routing sorted by expert: offsets and positions.");
  m.def(
      "moe_gather",
      [](uintptr_t x, int64_t ldx, uintptr_t positions, int32_t pairs, int32_t top_k, uintptr_t rows, int64_t ldr,
         int32_t width, int32_t dtype, uintptr_t stream) {
        moe_gather(reinterpret_cast<const void*>(x), ldx, reinterpret_cast<const int32_t*>(positions), pairs, top_k,
                   reinterpret_cast<void*>(rows), ldr, width, static_cast<DType>(dtype), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "Each token's row to the rows of its experts.");
  m.def(
      "moe_combine",
      [](uintptr_t rows, int64_t ldr, uintptr_t positions, uintptr_t ids, int32_t tokens, int32_t top_k, int32_t experts,
         uintptr_t weights, uintptr_t out, int64_t ldo, int32_t width, int32_t dtype, uintptr_t stream) {
        moe_combine(reinterpret_cast<const void*>(rows), ldr, reinterpret_cast<const int32_t*>(positions),
                    make_routing(ids, tokens, top_k, experts), reinterpret_cast<const float*>(weights),
                    reinterpret_cast<void*>(out), ldo, width, static_cast<DType>(dtype), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(), "The experts' rows weighted and summed per token.");
  m.def(
      "moe_routing_error",
      [](int32_t tokens, int32_t top_k, int32_t experts) {
        return moe_routing_error(make_routing(tokens > 0 ? 16 : 0, tokens, top_k, experts));
      },
      "Why the MoE routing ops would refuse these sizes; empty when they would not. Needs no GPU.");
  m.def(
      "rows_error",
      [](uintptr_t x, int64_t ldx, uintptr_t out, int64_t ldo, int32_t rows, int32_t width) {
        return rows_error(reinterpret_cast<const void*>(x), ldx, reinterpret_cast<const void*>(out), ldo, rows, width);
      },
      "Why rms_norm or silu_and_mul would refuse these rows; empty when they would not. Needs no GPU.");
}

}  // namespace
}  // namespace wavetune::bindings
