// spatialgrad._core.ascend_*: the rule table of spatialgrad/ascend.h for spatialgrad.ascend.
#include "spatialgrad/ascend.h"

#include <pybind11/stl.h>

#include "numpy_view.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/error.h"

namespace spatialgrad::python {
namespace {

double dtype_code(const std::string& name) {
  for (DType d : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    if (name == dtype_name(d)) return static_cast<double>(d);
  }
  detail::fail(ErrorKind::kType, "ascend.check(): expected a floating dtype, but got ", name);
}

// The facts as the core takes them: numbers, and "dtype" by name.
ascend::Facts facts_of(const py::dict& facts) {
  ascend::Facts out;
  for (const auto& [key, value] : facts) {
    const auto name = key.cast<std::string>();
    out.emplace_back(name, name == "dtype" ? dtype_code(value.cast<std::string>()) : value.cast<double>());
  }
  return out;
}

// The names of the chips in `mask`, in table order.
py::list chip_names(uint8_t mask) {
  py::list names;
  for (uint8_t bit = 1; bit & ascend::kAllChips; bit <<= 1) {
    if (mask & bit) names.append(ascend::chip_name(ascend::Chip(bit)));
  }
  return names;
}

py::tuple as_tuple(const ascend::Rule& rule) {
  return py::make_tuple(rule.op, rule.argument, rule.text, rule.source, rule.rejects);
}

}  // namespace

void bind_ascend(py::module_& m) {
  m.def("ascend_chips", [] { return chip_names(ascend::kAllChips); }, "The chip names the rules know.");
  m.def("ascend_validate_chip", [](const std::string& name) { ascend::chip_from_name(name); }, py::arg("name"),
        "A ValueError listing the known chips unless name is one.");
  m.def("ascend_check", [](const std::string& op, const std::string& chip, const py::dict& facts) {
    const ascend::Chip c = ascend::chip_from_name(chip);
    py::list out;
    for (const ascend::Finding& f : ascend::check(op, c, facts_of(facts))) {
      out.append(py::make_tuple(as_tuple(*f.rule), f.value, ascend::message(f, c)));
    }
    return out;
  }, py::arg("op"), py::arg("chip"), py::arg("facts"),
        "The rules of op on chip that the call described by facts breaks: ((op, argument, rule, source, "
        "rejects), value, message) each.");
  m.def("ascend_rules", [] {
    py::list out;
    for (const ascend::Rule& rule : ascend::rules()) {
      out.append(py::make_tuple(as_tuple(rule), chip_names(rule.chips)));
    }
    return out;
  }, "Every rule: ((op, argument, rule, source, rejects), chips).");
}

}  // namespace spatialgrad::python
