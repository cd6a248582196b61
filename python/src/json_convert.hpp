// Conversion between the project's JSON (nlohmann ordered_json) and Python objects: objects
// <-> dict (insertion order kept), arrays <-> list, numbers, strings, booleans, None.
#pragma once

#include <pybind11/pybind11.h>

#include "trainplan/core/json.hpp"

namespace trainplan::python {

/// The JSON value as a Python object (dict, list, str, int, float, bool or None).
pybind11::object to_python(const json::Json& value);

/// A Python object as JSON: dict (string keys), list/tuple, str, int, float, bool, None.
/// Throws Error naming `what` and the JSON pointer of a value that has no JSON form.
json::Json from_python(const pybind11::handle& value, const std::string& what, const std::string& pointer = "");

}  // namespace trainplan::python
