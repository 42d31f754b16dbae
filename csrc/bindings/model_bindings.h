// A family's built-in model in Python: the struct codegen generates from the [model] table of its config file
// (<family>_model_data.h, python/wavetune/codegen/config_space.py) as a dict of its fields, and the same struct with
// fields a dict overrides, for the bound model functions that the Python replays call while sweeping a constant.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace wavetune::bindings {

// The model's fields by name, in its file's order.
template <class Model>
pybind11::dict model_dict(const Model& model) {
  pybind11::dict out;
  Model::visit_fields(model, [&](const char* name, const auto& value) { out[name] = value; });
  return out;
}

// The family's model with the fields that `overrides` names set to its values; std::invalid_argument (Python's
// ValueError) naming an unknown field or a value of the wrong type.
template <class Model>
Model model_with(const pybind11::dict& overrides) {
  Model model;
  size_t matched = 0;
  Model::visit_fields(model, [&](const char* name, auto& field) {
    if (!overrides.contains(name)) return;
    using Field = std::decay_t<decltype(field)>;
    try {
      field = overrides[name].template cast<Field>();
    } catch (const pybind11::cast_error&) {
      throw std::invalid_argument(std::string("model field '") + name + "' takes a value like " +
                                  std::string(pybind11::repr(pybind11::cast(field))) + ", got " +
                                  std::string(pybind11::repr(overrides[name])));
    }
    ++matched;
  });
  if (matched != overrides.size()) {
    const pybind11::dict known = model_dict(model);
    for (const auto& item : overrides) {
      if (!known.contains(item.first)) {
        throw std::invalid_argument("unknown model field " + std::string(pybind11::repr(item.first)) +
                                    "; its fields: " + std::string(pybind11::str(pybind11::list(known))));
      }
    }
  }
  return model;
}

// <family>_model(): the family's model as its config file sets it.
template <class Model>
void bind_model(pybind11::module_& m, const std::string& family) {
  m.def((family + "_model").c_str(), [] { return model_dict(Model{}); },
        ("The built-in model of the " + family + " family: each constant of its config file's [model] table.").c_str());
}

}  // namespace wavetune::bindings
