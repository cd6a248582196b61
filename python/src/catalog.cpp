// trainplan.Catalog and trainplan.catalog(): the hardware catalog as `trainplan catalog --json`
// writes it, one instance type in detail, and cluster topology summaries.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "common.hpp"
#include "json_convert.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

namespace py = pybind11;

namespace trainplan::python {

void bind_catalog(py::module_& m) {
  py::class_<CatalogHandle>(m, "Catalog",
                            "A hardware catalog: the built-in one (Catalog()), or every *.json under catalog_dir, "
                            "priced for an AWS region, with a price file applied on top (the CLI's --catalog-dir, "
                            "--region and --prices). Pass it as catalog= to the functions that price or resolve plans.")
      .def(py::init([](const py::object& catalog_dir, const py::object& prices, const py::object& region) {
             const std::string dir = catalog_dir.is_none() ? "" : path_of(catalog_dir);
             const std::string price_file = prices.is_none() ? "" : path_of(prices);
             const std::string region_name = region.is_none() ? "" : region.cast<std::string>();
             if (dir.empty() && price_file.empty() && region_name.empty()) return CatalogHandle::builtin();
             return CatalogHandle{std::make_shared<const hw::Catalog>(hw::load_catalog(dir, price_file, region_name))};
           }),
           py::arg("catalog_dir") = py::none(), py::arg("prices") = py::none(), py::arg("region") = py::none())
      .def_property_readonly("region", [](const CatalogHandle& c) { return c.catalog->region().empty() ? std::string(hw::kCatalogRegion) : c.catalog->region(); },
                             "The AWS region the prices are for (us-east-1 unless one was chosen).")
      .def("regions", [](const CatalogHandle& c) { return to_python(hw::region_table_json(c.catalog->region_table())); },
           "The per-region prices and availability table, as `trainplan catalog --regions --json`.")
      .def("instance_names", [](const CatalogHandle& c) { return c.catalog->instance_names(); },
           "Instance type names in catalog order.")
      .def("gpu_names", [](const CatalogHandle& c) { return c.catalog->gpu_names(); }, "GPU type names.")
      .def("instance", [](const CatalogHandle& c, const std::string& name) { return to_python(hw::to_json(c.catalog->instance(name))); },
           py::arg("name"), "One instance type as a dict (SI units, unit in the key).")
      .def("gpu", [](const CatalogHandle& c, const std::string& name) { return to_python(hw::to_json(c.catalog->gpu(name))); },
           py::arg("name"), "One GPU type as a dict.")
      .def("to_json", [](const CatalogHandle& c) { return to_python(hw::catalog_json(*c.catalog)); },
           "The whole catalog, as `trainplan catalog --json`.")
      .def("describe",
           [](const CatalogHandle& c, const std::string& name) {
             return to_python(hw::instance_detail_json(*c.catalog, c.catalog->instance(name)));
           },
           py::arg("name"), "One instance type in detail, as `trainplan catalog NAME --json`.")
      .def("cluster",
           [](const CatalogHandle& c, const std::string& name, int64_t count) {
             // As a plan's instance count (plan files: /cluster/count).
             const int n = static_cast<int>(flag_in_range("count", count, 1, limits::kMaxInstances));
             const hw::Cluster cluster = without_gil([&] { return hw::Cluster::build(c.catalog->instance(name), n, *c.catalog); });
             return to_python(hw::cluster_summary_json(cluster));
           },
           py::arg("instance_type"), py::arg("count") = 1,
           "Topology summary of `count` instances: nodes, GPUs, vertices and links by kind, the intra-node link "
           "matrix and the route to the farthest GPU.")
      .def("__contains__", [](const CatalogHandle& c, const std::string& name) { return c.catalog->has_instance(name); })
      .def("__repr__", [](const CatalogHandle& c) {
        return "<trainplan.Catalog: " + std::to_string(c.catalog->instance_names().size()) + " instance types>";
      });

  m.def(
      "catalog",
      [](const py::object& name, const py::object& catalog) {
        const auto cat = catalog_of(catalog);
        if (name.is_none()) return to_python(hw::catalog_json(*cat));
        return to_python(hw::instance_detail_json(*cat, cat->instance(name.cast<std::string>())));
      },
      py::arg("name") = py::none(), py::arg("catalog") = py::none(),
      "`trainplan catalog --json`: the whole catalog (name None) or one instance type in detail.");
}

}  // namespace trainplan::python
