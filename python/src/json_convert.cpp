#include "json_convert.hpp"

#include <fmt/format.h>

#include <cmath>

namespace py = pybind11;

namespace trainplan::python {

py::object to_python(const json::Json& v) {
  switch (v.type()) {
    case json::Json::value_t::null: return py::none();
    case json::Json::value_t::boolean: return py::bool_(v.get<bool>());
    case json::Json::value_t::number_integer: return py::int_(v.get<int64_t>());
    case json::Json::value_t::number_unsigned: return py::int_(v.get<uint64_t>());
    case json::Json::value_t::number_float: return py::float_(v.get<double>());
    case json::Json::value_t::string: return py::str(v.get_ref<const std::string&>());
    case json::Json::value_t::array: {
      py::list out;
      for (const auto& e : v) out.append(to_python(e));
      return out;
    }
    case json::Json::value_t::object: {
      py::dict out;
      for (const auto& [k, e] : v.items()) out[py::str(k)] = to_python(e);
      return out;
    }
    case json::Json::value_t::binary:
    case json::Json::value_t::discarded: break;
  }
  return py::none();
}

json::Json from_python(const py::handle& v, const std::string& what, const std::string& pointer) {
  if (v.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<int64_t>();
    } catch (const py::cast_error&) {
      return v.cast<double>();
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::dict>(v)) {
    json::Json out = json::Json::object();
    for (const auto& [k, e] : v.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k))
        throw Error(fmt::format("a dict key must be a string, got {}", py::str(py::type::of(k)).cast<std::string>()))
            .at(what, pointer.empty() ? "/" : pointer)
            .hint("JSON objects have string keys");
      const auto key = k.cast<std::string>();
      out[key] = from_python(e, what, pointer + "/" + json::escape_pointer_token(key));
    }
    return out;
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    json::Json out = json::Json::array();
    size_t i = 0;
    for (const auto& e : v) out.push_back(from_python(e, what, pointer + "/" + std::to_string(i++)));
    return out;
  }
  throw Error(fmt::format("{} has no JSON form", py::str(py::type::of(v)).cast<std::string>()))
      .at(what, pointer.empty() ? "/" : pointer)
      .hint("use dict, list, str, int, float, bool or None");
}

}  // namespace trainplan::python
