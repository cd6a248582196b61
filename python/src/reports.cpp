// trainplan.report() and trainplan.validate(): the Markdown/HTML report of a search or of one
// plan (reports/), and predictions vs published measurements (calibration/). Both release the
// GIL.
#include <pybind11/pybind11.h>

#include "bindings.hpp"

#if defined(TRAINPLAN_HAVE_LIB_REPORTS) && defined(TRAINPLAN_HAVE_LIB_CALIBRATION)
#include <fmt/format.h>

#include <algorithm>

#include "common.hpp"
#include "json_convert.hpp"
#include "trainplan/calibration/validate.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/reports/report.hpp"
#include "trainplan/simulator/compute_model.hpp"

namespace py = pybind11;

namespace trainplan::python {
namespace {

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

py::object report(const py::object& output, const std::string& format, const py::object& plan_obj, int64_t spot_plans,
                  bool simulate, const py::object& catalog, const py::kwargs& kwargs) {
  // The bounds and choices of `trainplan report`'s own flags (cli/src/cmd_report.cpp).
  flag_choice("--format", format, {"md", "html", "both"});
  flag_in_range("--spot-plans", spot_plans, 0, limits::kMaxRows);
  planner::SearchOptions s;
  s.spot_runs = 1000;  // as `trainplan report`
  apply_kwargs(s, kwargs, search_options_setters(), "report");
  reports::ReportOptions o;
  o.top = s.top;
  o.spot_plans = static_cast<size_t>(spot_plans);
  o.spot_runs = s.spot_runs;
  o.seed = s.seed;
  o.threads = static_cast<size_t>(flag_in_range("--threads", s.threads, 0, limits::kMaxThreads));
  o.simulate = simulate;
  const std::string out = output.is_none() ? "" : path_of(output);
  if (!out.empty()) o.html_name = base_name(out) + ".html";
  const auto cat = catalog_of(catalog);

  reports::Report r;
  if (!plan_obj.is_none()) {
    if (!s.model.empty() || !s.instances.empty())
      throw Error("plan= reports one plan; model= and instances= describe a search").hint("give one or the other");
    LoadedPlan lp = load_plan(plan_obj);
    const double tokens = s.tokens.empty() ? 0 : flag_count_of_things("--tokens", s.tokens, "tokens");
    r = without_gil([&] { return reports::build_plan_report(lp.plan, *cat, o, tokens, lp.name); });
  } else {
    if (s.model.empty() || s.tokens.empty())
      throw Error("report() needs model= and tokens= (a search) or plan= (one plan)")
          .hint("trainplan.report(\"report\", model=\"gpt2-124m\", tokens=\"1e9\", instances=\"p3.8xlarge\", max_gpus=16)");
    planner::SearchRequest req = planner::search_request(s);
    req.exact_top = std::max<size_t>(req.exact_top, s.top);
    std::atomic<bool> cancel{false};
    req.cancel = &cancel;
    const planner::SearchResult res = without_gil([&] { return planner::search(req, *cat); }, &cancel);
    if (res.ranked.empty()) throw planner::nothing_fits_error(res, req);
    r = without_gil([&] { return reports::build_report(req, res, *cat, o); });
  }
  json::Json result;
  json::Json files = json::Json::array();
  without_gil([&] {
    if (format == "md" || format == "both") {
      result["markdown"] = reports::render_markdown(r);
      if (!out.empty()) {
        json::write_text_file(out + ".md", result["markdown"].get<std::string>());
        files.push_back(out + ".md");
      }
    }
    if (format == "html" || format == "both") {
      result["html"] = reports::render_html(r);
      if (!out.empty()) {
        json::write_text_file(out + ".html", result["html"].get<std::string>());
        files.push_back(out + ".html");
      }
    }
    return 0;
  });
  result["files"] = files;
  result["model"] = r.model;
  result["best"] = plan::to_json(r.plans.front().candidate.plan);
  return to_python(result);
}

py::object validate(const py::object& published, const py::object& calibration, const std::string& filter, int64_t threads,
                    const py::object& catalog) {
  calibration::ValidationOptions o;
  o.threads = static_cast<int>(flag_in_range("--threads", threads, 0, limits::kMaxThreads));
  o.filter = filter;
  o.analytical_step_s = [](const plan::Plan& p, const plan::PlanContext& ctx) { return planner::estimate_step(p, ctx).step_time_s; };
  if (!calibration.is_none())
    o.calibration = std::make_shared<sim::CalibrationTable>(sim::CalibrationTable::read_file(path_of(calibration)));
  const auto cat = catalog_of(catalog);
  json::Json j;
  if (is_path(published)) {
    const std::string path = path_of(published);
    j = without_gil([&] { return calibration::to_json(calibration::validate_published(path, *cat, o)); });
  } else {
    const json::Json doc = from_python(published, "<published>");
    j = without_gil([&] { return calibration::to_json(calibration::validate_published_json(doc, "<published>", *cat, o)); });
  }
  return to_python(j);
}

}  // namespace

void bind_reports(py::module_& m) {
  m.def("report", &report, py::arg("output") = py::none(), py::arg("format") = "both", py::arg("plan") = py::none(),
        py::arg("spot_plans") = 10, py::arg("simulate") = true, py::arg("catalog") = py::none(),
        R"(`trainplan report`: the Markdown and self-contained HTML report of a search (keyword
arguments as trainplan.plan(); spot_runs defaults to 1000 as in the CLI) or of one plan
(plan= a dict or path; tokens= overrides its token count). format is "md", "html" or "both";
with output="PATH" writes PATH.md / PATH.html. Returns {"markdown", "html" (as asked),
"files" (written), "model", "best" (the best plan's JSON)}. Releases the GIL.)");
  m.def("validate", &validate, py::arg("published"), py::arg("calibration") = py::none(), py::arg("filter") = "",
        py::arg("threads") = 0, py::arg("catalog") = py::none(),
        "`trainplan validate --json`: predicted vs measured for every published point (a path to a file in the "
        "format of ../shared/validation/published-results.json, or its dict) that maps onto a catalog cluster: "
        "error per point, MAPE per source. calibration= a calibration table JSON. Releases the GIL. "
        "trainplan.calibrate is the same function (the calibration loop of the CLI is `validate` today).");
  m.attr("calibrate") = m.attr("validate");
}

}  // namespace trainplan::python

#else

namespace trainplan::python {
// Built without reports/ or calibration/: no report() or validate().
void bind_reports(pybind11::module_&) {}
}  // namespace trainplan::python

#endif
