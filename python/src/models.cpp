// trainplan.Model, trainplan.model() and trainplan.models(): the model catalog, Hugging Face
// config import (dict or path) and the numbers `trainplan model --json` shows.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.hpp"
#include "common.hpp"
#include "json_convert.hpp"
#include "trainplan/models/model.hpp"

namespace py = pybind11;

namespace trainplan::python {
namespace {

// A model spec with its graph built once.
struct ModelHandle {
  std::shared_ptr<const models::ModelGraph> graph;
  explicit ModelHandle(const models::ModelSpec& spec) : graph(std::make_shared<models::ModelGraph>(models::build_graph(spec))) {}
  const models::ModelSpec& spec() const { return graph->spec(); }
};

// The "name" of a model imported from a config dict: the given one, else the config's
// "_name_or_path" folder name (as HF writes it), else "hf-model".
std::string config_name(const json::Json& doc, const py::object& name) {
  if (!name.is_none()) return name.cast<std::string>();
  if (doc.is_object() && doc.contains("_name_or_path") && doc["_name_or_path"].is_string()) {
    std::string n = doc["_name_or_path"].get<std::string>();
    if (auto slash = n.find_last_of('/'); slash != std::string::npos) n = n.substr(slash + 1);
    if (!n.empty()) return n;
  }
  return "hf-model";
}

}  // namespace

void bind_models(py::module_& m) {
  py::class_<ModelHandle>(m, "Model",
                          "A model: a catalog name, a path to a Hugging Face config.json or a model JSON file "
                          "(Model(name_or_path)), a config dict (Model.from_hf_config) or a spec dict in the "
                          "catalog format (Model.from_spec).")
      .def(py::init([](const py::object& name_or_path) {
             const std::string s = is_path(name_or_path) ? path_of(name_or_path) : name_or_path.cast<std::string>();
             return ModelHandle(models::resolve_model(s));
           }),
           py::arg("name_or_path"))
      .def_static(
          "from_hf_config",
          [](const py::object& config, const py::object& name) {
            if (is_path(config)) {
              models::ModelSpec spec = models::import_hf_config(path_of(config));
              if (!name.is_none()) spec.name = name.cast<std::string>();
              return ModelHandle(spec);
            }
            const json::Json doc = from_python(config, "<config>");
            const std::string n = config_name(doc, name);
            return ModelHandle(models::import_hf_config_json(doc, n, "<config " + n + ">"));
          },
          py::arg("config"), py::arg("name") = py::none(),
          "Imports a Hugging Face config (a dict as json.load gives it, or a path to config.json); model_type gpt2, "
          "llama, mistral or bert.")
      .def_static(
          "from_spec",
          [](const py::dict& spec) {
            const json::Json doc = from_python(spec, "<spec>");
            return ModelHandle(models::parse_model_spec(json::Reader(doc, "<spec>")));
          },
          py::arg("spec"), "A model from a dict in the catalog format (models/README.md).")
      .def_property_readonly("name", [](const ModelHandle& h) { return h.spec().name; })
      .def_property_readonly("display_name", [](const ModelHandle& h) { return h.spec().display_name; })
      .def_property_readonly("family", [](const ModelHandle& h) { return std::string(models::family_name(h.spec().family)); })
      .def_property_readonly("params", [](const ModelHandle& h) { return h.graph->total_params(); }, "Parameters.")
      .def_property_readonly("published_params", [](const ModelHandle& h) { return h.spec().published_params; })
      .def_property_readonly("tokens_per_sample", [](const ModelHandle& h) { return h.graph->tokens_per_sample(); })
      .def_property_readonly("training_flops_per_token", [](const ModelHandle& h) { return h.graph->training_flops_per_token(); },
                             "Forward + backward FLOPs per token, no recomputation.")
      .def_property_readonly("training_flops_per_sample", [](const ModelHandle& h) { return h.graph->training_flops_per_sample(); })
      .def(
          "to_json",
          [](const ModelHandle& h, std::optional<int> ops_unit) { return to_python(models::model_json(*h.graph, ops_unit)); },
          py::arg("ops_unit") = py::none(),
          "As `trainplan model NAME --json` (with ops_unit: `--ops --unit N`, every op of that unit).")
      .def("__repr__", [](const ModelHandle& h) {
        return "<trainplan.Model " + h.spec().name + ": " + std::to_string(static_cast<long long>(h.graph->total_params())) +
               " parameters>";
      });

  m.def(
      "model",
      [](const py::object& name_or_path, std::optional<int> ops_unit) {
        const std::string s = is_path(name_or_path) ? path_of(name_or_path) : name_or_path.cast<std::string>();
        return to_python(models::model_json(models::build_graph(models::resolve_model(s)), ops_unit));
      },
      py::arg("name_or_path"), py::arg("ops_unit") = py::none(),
      "`trainplan model NAME --json`: parameters, FLOPs per token and sample, shape, per-unit breakdown.");
  m.def(
      "models", [] { return to_python(models::catalog_json(models::ModelCatalog::builtin())); },
      "`trainplan model --json`: the model catalog, one dict per model.");
}

}  // namespace trainplan::python
