#include "common.hpp"

#include <fmt/format.h>

#include <cmath>

#include "json_convert.hpp"
#include "trainplan/core/strings.hpp"

namespace py = pybind11;

namespace trainplan::python {

CatalogHandle CatalogHandle::builtin() {
  // The built-in catalog lives as long as the process; the handle does not own it.
  return {std::shared_ptr<const hw::Catalog>(&hw::Catalog::builtin(), [](const hw::Catalog*) {})};
}

std::shared_ptr<const hw::Catalog> catalog_of(const py::object& obj) {
  if (obj.is_none()) return CatalogHandle::builtin().catalog;
  return obj.cast<const CatalogHandle&>().catalog;
}

bool is_path(const py::handle& obj) {
  return py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__");
}

std::string path_of(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  return py::module_::import("os").attr("fspath")(obj).cast<std::string>();
}

LoadedPlan load_plan(const py::object& obj) {
  if (is_path(obj)) {
    std::string path = path_of(obj);
    return {plan::read_plan_file(path), path};
  }
  if (py::isinstance<py::dict>(obj)) return {plan::parse_plan(from_python(obj, "<plan>"), "<plan>"), "<plan>"};
  throw Error(fmt::format("a plan is a dict (plan JSON) or a path to a plan file, got {}",
                          py::str(py::type::of(obj)).cast<std::string>()))
      .hint("e.g. trainplan.plan(...)[\"best\"] or \"plan.json\"");
}

std::string option_text(const py::handle& v, const std::string& option) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::bool_>(v))
    throw Error(fmt::format("{} takes a value, not True/False", option)).hint("e.g. a number or a string with units");
  if (py::isinstance<py::int_>(v)) return py::str(v).cast<std::string>();
  if (py::isinstance<py::float_>(v)) {
    const double x = v.cast<double>();
    if (!std::isfinite(x)) throw Error(fmt::format("{} must be finite, got {}", option, x));
    return fmt::format("{}", x);
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::string> parts;
    for (const auto& e : v) parts.push_back(option_text(e, option));
    return join(parts, ",");
  }
  if (py::hasattr(v, "__fspath__")) return path_of(v);
  throw Error(fmt::format("{} takes a str, a number or a list of them, got {}", option,
                          py::str(py::type::of(v)).cast<std::string>()));
}

int64_t int_value(const py::handle& v, const std::string& option) {
  if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0)
      throw Error(fmt::format("{} takes a 64-bit integer, got {}", option, py::str(v).cast<std::string>().substr(0, 40)))
          .hint("give a value within the option's range");
    return x;
  }
  throw Error(fmt::format("{} takes an int, got {}", option, py::str(py::repr(v)).cast<std::string>()));
}

double float_value(const py::handle& v, const std::string& option) {
  if ((py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) && !py::isinstance<py::bool_>(v)) return v.cast<double>();
  throw Error(fmt::format("{} takes a number, got {}", option, py::str(py::repr(v)).cast<std::string>()));
}

bool bool_value(const py::handle& v, const std::string& option) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  throw Error(fmt::format("{} takes True or False, got {}", option, py::str(py::repr(v)).cast<std::string>()));
}

std::vector<std::string> text_list(const py::handle& v, const std::string& option) {
  if (py::isinstance<py::str>(v)) return {v.cast<std::string>()};
  std::vector<std::string> out;
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    for (const auto& e : v) out.push_back(option_text(e, option));
    return out;
  }
  throw Error(fmt::format("{} takes a str or a list of str", option));
}

void unknown_keyword(const std::string& name, const std::vector<std::string>& known, const std::string& function) {
  throw Error(fmt::format("{}() got an unknown keyword argument \"{}\"", function, name))
      .hint(suggestion(name, known) + " (help(trainplan." + function + ") lists them)");
}

}  // namespace trainplan::python
