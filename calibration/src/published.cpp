// Published measured runs as calibration input (published.hpp).
#include "trainplan/calibration/published.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trainplan/calibration/fit.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::calibration {
namespace {

// Scale range searched: 0.2 .. 1.5 of the default large-GEMM efficiency (a product above 1 is
// capped by the compute model, so a larger scale changes nothing).
constexpr double kMinScale = 0.2, kMaxScale = 1.5;
// Second simulation of the surrogate: the scale at which the slope is taken.
constexpr double kProbeScale = 0.8;

bool held_back(const std::string& id, int every) {
  return XXH64(id.data(), id.size(), 0) % static_cast<uint64_t>(every) == 0;
}

double huber(double r, double delta) {
  const double a = std::abs(r);
  return a <= delta ? 0.5 * r * r : delta * (a - 0.5 * delta);
}

// Every point of `doc` validated with the large-GEMM scale `scale` on `gpu`.
std::vector<ValidationPoint> validate_at(const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                                         const ValidationOptions& base, const std::string& gpu, double scale) {
  ValidationOptions o = base;
  o.analytical_step_s = nullptr;
  o.calibrate = [&base, &gpu, scale](const hw::GpuSpec& g, sim::SimOptions& so) {
    bool any = base.calibrate ? base.calibrate(g, so) : false;
    if (g.name != gpu) return any;
    so.compute.gemm_efficiency_scale = scale;
    return true;
  };
  return validate_published_json(doc, name, catalog, o).points;
}

bool is_training_point(const ValidationPoint& pt) {
  return pt.mapped && (pt.kind == "training_throughput" || pt.kind == "finetuning_throughput") && pt.metric == "step_time_s" && pt.measured > 0 &&
         pt.predicted > 0;
}

// The mapped training points on `gpu` by id.
std::map<std::string, ValidationPoint> on_gpu(std::vector<ValidationPoint> points, const std::string& gpu) {
  std::map<std::string, ValidationPoint> out;
  for (auto& pt : points)
    if (is_training_point(pt) && pt.gpu == gpu) out.emplace(pt.id, std::move(pt));
  return out;
}

std::map<std::string, ValidationPoint> simulate_at(const json::Json& doc, const std::string& name,
                                                    const hw::Catalog& catalog, const ValidationOptions& base,
                                                    const std::string& gpu, double scale) {
  return on_gpu(validate_at(doc, name, catalog, base, gpu, scale), gpu);
}

// Golden-section search of x = 1 / scale minimizing the Huber loss of the linear surrogates.
struct Line {
  double a = 0, b = 0, measured = 0;
};
double best_x(const std::vector<Line>& lines, double delta) {
  auto loss = [&](double x) {
    double l = 0;
    for (const auto& ln : lines) l += huber(std::log(std::max(ln.a + ln.b * x, 1e-12) / ln.measured), delta);
    return l;
  };
  double lo = 1 / kMaxScale, hi = 1 / kMinScale;
  const double g = (std::sqrt(5.0) - 1) / 2;
  double c = hi - g * (hi - lo), d = lo + g * (hi - lo);
  double fc = loss(c), fd = loss(d);
  for (int i = 0; i < 80 && hi - lo > 1e-7; ++i) {
    if (fc < fd) {
      hi = d, d = c, fd = fc;
      c = hi - g * (hi - lo), fc = loss(c);
    } else {
      lo = c, c = d, fc = fd;
      d = lo + g * (hi - lo), fd = loss(d);
    }
  }
  return (lo + hi) / 2;
}

// Surrogate lines through two simulations (x1, t1) and (x2, t2) per training point.
std::vector<Line> surrogate(const std::vector<std::string>& ids, const std::map<std::string, ValidationPoint>& at1,
                            double x1, const std::map<std::string, ValidationPoint>& at2, double x2) {
  std::vector<Line> out;
  for (const auto& id : ids) {
    auto i1 = at1.find(id), i2 = at2.find(id);
    if (i1 == at1.end() || i2 == at2.end()) continue;
    Line l;
    l.b = (i2->second.predicted - i1->second.predicted) / (x2 - x1);
    l.a = i1->second.predicted - l.b * x1;
    l.measured = i1->second.measured;
    out.push_back(l);
  }
  return out;
}

}  // namespace

bool is_published_results(const json::Json& doc) {
  return doc.is_object() && doc.contains("data_points") && doc["data_points"].is_array();
}

PublishedFit fit_published(Profile& p, const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                           const FitOptions& options, const ValidationOptions& base) {
  if (options.heldout_every < 2) throw Error("heldout_every must be >= 2");
  PublishedFit out;
  out.gpu = p.hardware;
  std::vector<ValidationPoint> all = validate_at(doc, name, catalog, base, p.hardware, 1.0);
  ++out.simulations;
  std::map<std::string, int> per_gpu;  // for the message when too few are on this GPU
  for (const auto& pt : all)
    if (is_training_point(pt)) ++per_gpu[pt.gpu];
  const auto before = on_gpu(std::move(all), p.hardware);
  for (const auto& [g, n] : per_gpu)
    if (g != p.hardware) out.other_points += n;
  if (before.size() < 2) {
    std::string have;
    for (const auto& [g, n] : per_gpu) have += fmt::format("{}{} ({})", have.empty() ? "" : ", ", g, n);
    throw Error(fmt::format("{} published training point(s) map onto {}; fitting its GEMM efficiency needs at least 2",
                            before.size(), p.hardware))
        .at(name, "/data_points")
        .hint(have.empty() ? "add training_throughput points with their plan and step time or throughput"
                           : "calibrate a GPU that has points: " + have);
  }
  // Only the points on this GPU are simulated again.
  json::Json sub = doc;
  json::Json kept = json::Json::array();
  for (const auto& pt : doc["data_points"])
    if (pt.is_object() && pt.contains("id") && pt["id"].is_string() && before.count(pt["id"].get<std::string>()))
      kept.push_back(pt);
  sub["data_points"] = kept;

  std::vector<std::string> train;
  for (const auto& [id, pt] : before)
    if (!held_back(id, options.heldout_every)) train.push_back(id);
  if (train.empty()) train.push_back(before.begin()->first);

  // Two rounds: surrogate through (1, scale 1) and the probe, then through the estimate and
  // the nearer of the earlier two.
  std::vector<std::pair<double, std::map<std::string, ValidationPoint>>> sims;
  sims.push_back({1.0, before});
  sims.push_back({1 / kProbeScale, simulate_at(sub, name, catalog, base, p.hardware, kProbeScale)});
  ++out.simulations;
  double x = 1;
  for (int round = 0; round < 2; ++round) {
    const auto& s1 = sims[sims.size() - 2];
    const auto& s2 = sims.back();
    x = best_x(surrogate(train, s1.second, s1.first, s2.second, s2.first), options.huber_delta);
    if (std::abs(x - s2.first) < 1e-4 * x) break;
    // Keep the earlier simulation nearer to x as the other end of the next line.
    if (std::abs(s1.first - x) < std::abs(s2.first - x)) std::swap(sims[sims.size() - 2], sims.back());
    sims.push_back({x, simulate_at(sub, name, catalog, base, p.hardware, 1 / x)});
    ++out.simulations;
  }
  // The final scale's own simulation (x is the last simulated one, or equal to it within 1e-4).
  const auto& after = sims.back().second;
  p.gemm_efficiency_scale = 1 / sims.back().first;

  std::vector<double> tp, tm, hp, hm, bp;
  for (const auto& [id, pt] : before) {
    PublishedPointFit f;
    f.id = id;
    f.setup = pt.setup;
    f.measured_s = pt.measured;
    f.before_s = pt.predicted;
    auto it = after.find(id);
    f.after_s = it != after.end() ? it->second.predicted : 0;
    f.heldout = std::find(train.begin(), train.end(), id) == train.end();
    if (f.after_s > 0) {
      (f.heldout ? hp : tp).push_back(f.after_s);
      (f.heldout ? hm : tm).push_back(f.measured_s);
    }
    out.points.push_back(f);
  }
  const ErrorSummary tr = relative_errors(tp, tm), he = relative_errors(hp, hm);
  FitGroup g{fmt::format("step/gemm_efficiency_scale (published step times on {})", p.hardware), 1, tr.points,
             he.points, tr.median_abs, he.median_abs, he.worst_abs, ""};
  if (p.gemm_efficiency_scale >= kMaxScale * 0.999 || p.gemm_efficiency_scale <= kMinScale * 1.001)
    g.note = fmt::format("at the search bound [{}, {}]", kMinScale, kMaxScale);
  p.fit.push_back(g);
  return out;
}

}  // namespace trainplan::calibration
