// The `trainplan` Python module: one PYBIND11_MODULE that registers each part (bindings.hpp).
#include <pybind11/pybind11.h>

#include "bindings.hpp"

PYBIND11_MODULE(trainplan, m) {
  m.doc() = "trainplan: plan, simulate and cost distributed deep-learning training on cloud GPUs";
  m.attr("__version__") = TRAINPLAN_VERSION;
  trainplan::python::bind_errors(m);
  trainplan::python::bind_catalog(m);
  trainplan::python::bind_models(m);
  trainplan::python::bind_planning(m);
  trainplan::python::bind_reports(m);
}
