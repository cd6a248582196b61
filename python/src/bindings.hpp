// One function per part of the module; module.cpp calls them in order.
#pragma once

#include <pybind11/pybind11.h>

namespace trainplan::python {

void bind_errors(pybind11::module_& m);
void bind_catalog(pybind11::module_& m);
void bind_models(pybind11::module_& m);
void bind_planning(pybind11::module_& m);
void bind_reports(pybind11::module_& m);

}  // namespace trainplan::python
