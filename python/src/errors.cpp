// trainplan.Error: the Python face of trainplan::Error, with file, pointer, message and hint.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "trainplan/core/error.hpp"

namespace py = pybind11;

namespace trainplan::python {

void bind_errors(py::module_& m) {
  // Leaked on purpose: the type must outlive every translation, and a static destructor would
  // run after the interpreter is gone.
  static auto* error_type = new py::exception<Error>(m, "Error");
  error_type->doc() =
      "Bad input or an infeasible request. str(e) is the CLI's message without 'error: '; the parts are the "
      "attributes file, pointer (a JSON pointer or an option), message and hint (each '' when absent).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object instance = py::handle(error_type->ptr())(py::str(e.what()));
      instance.attr("file") = e.file();
      instance.attr("pointer") = e.pointer();
      instance.attr("message") = e.message();
      instance.attr("hint") = e.hint_text();
      PyErr_SetObject(error_type->ptr(), instance.ptr());
    }
  });
}

}  // namespace trainplan::python
