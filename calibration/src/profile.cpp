#include "trainplan/calibration/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string_view>

#include <sched.h>

#include "trainplan/calibration/fit.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::calibration {

json::Json to_json(const Profile& p) {
  json::Json doc;
  doc["schema_version"] = p.schema_version;
  doc["kind"] = "trainplan-calibration-profile";
  doc["hardware"] = p.hardware;
  doc["backend"] = p.backend;
  doc["device"] = {{"peak_flops_per_s", p.peak_flops_per_s}, {"memory_bytes_per_s", p.memory_bytes_per_s}};
  json::Json compute;
  if (p.kernel_overhead_s >= 0) compute["kernel_overhead_s"] = p.kernel_overhead_s;
  if (p.gemm_efficiency_scale != 1) compute["gemm_efficiency_scale"] = p.gemm_efficiency_scale;
  json::Json eff = json::Json::object();
  for (const auto& [kind, e] : p.efficiency) eff[sim::calibration_op_kind_name(kind)] = e;
  compute["efficiency"] = eff;
  json::Json effb = json::Json::object();
  for (const auto& [kind, e] : p.efficiency_backward) effb[sim::calibration_op_kind_name(kind)] = e;
  compute["efficiency_backward"] = effb;
  doc["compute"] = compute;
  doc["communication"] = {{"algorithm", p.comm_algorithm},
                          {"link", p.comm_link},
                          {"latency_s", p.comm_latency_s},
                          {"busbw_bytes_per_s", p.comm_busbw_bytes_per_s}};
  json::Json fit = json::Json::array();
  for (const auto& g : p.fit) {
    json::Json j;
    j["group"] = g.group;
    j["parameters"] = g.parameters;
    j["train_points"] = g.train_points;
    j["heldout_points"] = g.heldout_points;
    j["train_median_error"] = g.train_median_error;
    j["heldout_median_error"] = g.heldout_median_error;
    j["heldout_worst_error"] = g.heldout_worst_error;
    if (!g.note.empty()) j["note"] = g.note;
    fit.push_back(j);
  }
  doc["fit"] = fit;
  json::Json inputs = json::Json::array();
  for (const auto& in : p.inputs) inputs.push_back({{"path", in.path}, {"kind", in.kind}, {"xxh64", in.xxh64}});
  doc["provenance"] = {{"date", p.date},
                       {"hardware", p.hardware},
                       {"software", p.software.is_null() ? json::Json::object() : p.software},
                       {"inputs", inputs}};
  return doc;
}

Profile profile_from_json(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  Profile p;
  p.schema_version = static_cast<int>(r.field("schema_version").as_positive_int());
  if (p.schema_version != kProfileSchemaVersion)
    throw r.field("schema_version")
        .error(fmt::format("calibration profile schema version {} is not supported (this build reads {})",
                           p.schema_version, kProfileSchemaVersion))
        .hint("calibrate again with this trainplan: trainplan calibrate INPUT... -o profile.json");
  if (r.field("kind").as_string() != "trainplan-calibration-profile")
    throw r.field("kind").error("not a trainplan calibration profile").hint("write one with trainplan calibrate");
  p.hardware = r.field("hardware").as_string();
  p.backend = r.field_or("backend", "");
  const auto dev = r.field("device");
  p.peak_flops_per_s = dev.field("peak_flops_per_s").as_positive();
  p.memory_bytes_per_s = dev.field("memory_bytes_per_s").as_positive();
  dev.finish();
  const auto comp = r.field("compute");
  p.kernel_overhead_s = comp.has("kernel_overhead_s") ? comp.field("kernel_overhead_s").as_nonnegative() : -1;
  p.gemm_efficiency_scale = comp.has("gemm_efficiency_scale") ? comp.field("gemm_efficiency_scale").as_number_in(1e-3, 5) : 1;
  auto read_efficiencies = [](const json::Reader& field, std::map<int, double>& out) {
    for (const auto& [kname, v] : field.entries()) {
      const auto kind = sim::parse_calibration_op_kind(kname);
      if (!kind) throw v.error("unknown op kind \"" + kname + "\"").hint("calibrate again with this trainplan");
      const double e = v.as_positive();
      if (e > 1) throw v.error(fmt::format("efficiency {} is above 1", e)).hint("efficiencies are fractions of the peak");
      out[*kind] = e;
    }
  };
  read_efficiencies(comp.field("efficiency"), p.efficiency);
  if (comp.has("efficiency_backward")) read_efficiencies(comp.field("efficiency_backward"), p.efficiency_backward);
  comp.finish();
  const auto comm = r.field("communication");
  p.comm_algorithm = comm.field_or("algorithm", "ring");
  p.comm_link = comm.field_or("link", "");
  p.comm_latency_s = comm.number_or("latency_s", 0);
  p.comm_busbw_bytes_per_s = comm.number_or("busbw_bytes_per_s", 0);
  comm.finish();
  for (const auto& g : r.field("fit").items()) {
    FitGroup f;
    f.group = g.field("group").as_string();
    f.parameters = static_cast<int>(g.int_or("parameters", 0));
    f.train_points = static_cast<int>(g.int_or("train_points", 0));
    f.heldout_points = static_cast<int>(g.int_or("heldout_points", 0));
    f.train_median_error = g.number_or("train_median_error", 0);
    f.heldout_median_error = g.number_or("heldout_median_error", 0);
    f.heldout_worst_error = g.number_or("heldout_worst_error", 0);
    f.note = g.field_or("note", "");
    g.finish();
    p.fit.push_back(f);
  }
  const auto prov = r.field("provenance");
  p.date = prov.field("date").as_string();
  prov.ignore("hardware");
  p.software = prov.has("software") ? prov.field("software").value() : json::Json::object();
  for (const auto& in : prov.field("inputs").items()) {
    p.inputs.push_back({in.field("path").as_string(), in.field("kind").as_string(), in.field("xxh64").as_string()});
    in.finish();
  }
  prov.finish();
  r.finish();
  return p;
}

namespace detail {
// calibration/profiles/*.json, embedded at build time (cmake/EmbedFiles.cmake).
std::vector<std::pair<std::string_view, std::string_view>> embedded_profile_files();
}  // namespace detail

namespace {

constexpr std::string_view kBuiltinPrefix = "builtin:";

// A profile file's JSON: a file on disk, or "builtin:<path in the source tree>".
json::Json profile_document(const std::string& path) {
  if (path.rfind(kBuiltinPrefix, 0) != 0) return json::parse_file(path);
  const std::string_view name = std::string_view(path).substr(kBuiltinPrefix.size());
  for (const auto& [file, text] : detail::embedded_profile_files())
    if (file == name) return json::parse_text(text, path);
  throw Error(fmt::format("{} is not a built-in calibration profile", path))
      .hint("the built-in profiles are calibration/profiles/*.json of this trainplan's source (trainplan history and "
            "the profile lines of plan / execute name them)");
}

}  // namespace

Profile read_profile_file(const std::string& path) { return profile_from_json(profile_document(path), path); }

bool is_profile_file(const std::string& path) {
  const json::Json doc = profile_document(path);
  return doc.is_object() && doc.value("kind", "") == "trainplan-calibration-profile";
}

std::vector<std::string> builtin_profiles() {
  std::vector<std::string> out;
  for (const auto& [file, text] : detail::embedded_profile_files()) out.push_back(std::string(kBuiltinPrefix) + std::string(file));
  std::sort(out.begin(), out.end());
  return out;
}

std::string find_builtin_profile(const std::string& hardware) {
  for (const auto& path : builtin_profiles())
    if (read_profile_file(path).hardware == hardware) return path;
  return "";
}

namespace {

// Which parameter a compute op feeds: (op kind, backward pass) index the efficiency columns.
using Column = std::pair<int, bool>;
struct ComputeFeatures {
  std::map<Column, double> roofline_s;  // (op kind, backward) -> seconds at efficiency 1
  double kernels = 0;
};

ComputeFeatures features(const plan::Task& task, const std::vector<plan::OpCost>& costs, double peak, double bw) {
  ComputeFeatures f;
  auto add_op = [&](const plan::OpCost& c) {
    const bool bwd = task.phase == plan::Phase::backward;
    const double flops = bwd ? c.flops_bwd : c.flops_fwd;
    const double mem = bwd ? c.mem_bwd_bytes : c.mem_fwd_bytes;
    const double serial = bwd ? c.serial_mem_bwd_bytes : c.serial_mem_fwd_bytes;
    f.roofline_s[{c.op_kind, bwd}] += std::max(flops / peak, mem / bw) + serial / bw;
    f.kernels += bwd ? c.kernels_bwd : c.kernels_fwd;
  };
  if (!costs.empty() && !task.ops.empty()) {
    for (int id : task.ops) add_op(costs[static_cast<size_t>(id)]);
  } else if (!costs.empty() && task.op >= 0) {
    add_op(costs[static_cast<size_t>(task.op)]);
  } else {
    const int kind = task.phase == plan::Phase::optimizer && task.op_kind < 0 ? sim::kOpKindOptimizer : task.op_kind;
    f.roofline_s[{kind, task.phase == plan::Phase::backward}] += std::max(task.flops / peak, task.mem_bytes / bw);
    f.kernels += task.ops.empty() ? 1.0 : static_cast<double>(task.ops.size());
  }
  return f;
}

bool held_back(const std::string& run, int rank, int task, int every) {
  const size_t h = std::hash<std::string>{}(fmt::format("{}#{}#{}", run, rank, task));
  return static_cast<int>(h % static_cast<size_t>(every)) == 0;
}

}  // namespace

namespace {

// Communication: the roofline's fit on every all_reduce point; held-back error on the
// alternate points of a fit to the others.
void fit_communication(const BenchResult& bench, const FitOptions& options, Profile& p) {
  std::vector<std::vector<double>> Xa, Xb;
  std::vector<double> ta, tb;
  int i = 0;
  for (const auto& pt : bench.points) {
    if (pt.kind != "all_reduce" || pt.ranks < 2) continue;
    auto& X = (i % 2) ? Xb : Xa;
    auto& t = (i % 2) ? tb : ta;
    X.push_back({1.0, pt.bytes * 2.0 * (pt.ranks - 1) / pt.ranks});
    t.push_back(pt.median_s);
    ++i;
  }
  if (ta.size() >= 2 && !tb.empty()) {
    const auto f = fit_log_linear(Xa, ta, {1e-5, 1e-10}, options.huber_delta);
    auto pred = [&](const std::vector<std::vector<double>>& X) {
      std::vector<double> out;
      for (const auto& row : X) out.push_back(f.params[0] * row[0] + f.params[1] * row[1]);
      return out;
    };
    const auto tr = relative_errors(pred(Xa), ta), ho = relative_errors(pred(Xb), tb);
    p.fit.push_back({"communication/" + p.comm_algorithm + "/" + p.comm_link, 2, tr.points, ho.points, tr.median_abs,
                     ho.median_abs, ho.worst_abs, ""});
  }
}

void refit_step_overhead(const std::vector<MeasuredRun>& runs, const FitOptions& options, Profile& p) {
  // Step level: the gaps between tasks (the runtime's dispatch, allocations, and on a shared
  // machine the time its other load takes) are not in any task. The kernel overhead is refit
  // to the runs' step times (Huber on log step time, golden-section search on log overhead,
  // never below the task-level value), so the simulator's per-kernel gap carries them. Runs are
  // split like the tasks: every heldout_every-th run is only scored.
  std::vector<const MeasuredRun*> train, held;
  for (size_t i = 0; i < runs.size(); ++i) (i % static_cast<size_t>(options.heldout_every) == 1 ? held : train).push_back(&runs[i]);
  if (train.empty()) train = held;
  auto step_errors = [&](const std::vector<const MeasuredRun*>& set, double o) {
    Profile q = p;
    q.kernel_overhead_s = o;
    std::vector<double> pred, meas;
    for (const MeasuredRun* r : set) {
      pred.push_back(predict_on_profile_hardware(r->program, r->plan, q).step_time_s);
      meas.push_back(r->timeline.step_time_s);
    }
    return std::make_pair(pred, meas);
  };
  auto cost = [&](double log_o) {
    const auto [pred, meas] = step_errors(train, std::exp(log_o));
    double c = 0;
    for (size_t i = 0; i < pred.size(); ++i) {
      const double r = std::abs(std::log(pred[i] / meas[i]));
      c += r <= options.huber_delta ? 0.5 * r * r : options.huber_delta * (r - 0.5 * options.huber_delta);
    }
    return c;
  };
  const double task_o = std::max(p.kernel_overhead_s, 1e-9);
  double lo = std::log(task_o), hi = std::log(task_o) + std::log(1e4);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo), f1 = cost(x1), f2 = cost(x2);
  for (int it = 0; it < 40; ++it) {
    if (f1 < f2) hi = x2, x2 = x1, f2 = f1, x1 = hi - g * (hi - lo), f1 = cost(x1);
    else lo = x1, x1 = x2, f1 = f2, x2 = lo + g * (hi - lo), f2 = cost(x2);
  }
  const double step_o = cost(std::log(task_o)) <= std::min(f1, f2) ? task_o : std::exp(0.5 * (lo + hi));
  p.kernel_overhead_s = step_o;
  const auto [ptr, mtr] = step_errors(train, step_o);
  const auto tr = relative_errors(ptr, mtr);
  FitGroup sg{"step/kernel_overhead_s (step times of the measured runs)", 1, tr.points, 0, tr.median_abs, 0, 0,
              fmt::format("task-level fit {:.3g} s, step-level {:.3g} s", task_o, step_o)};
  if (!held.empty() && held != train) {
    const auto [pho, mho] = step_errors(held, step_o);
    const auto ho = relative_errors(pho, mho);
    sg.heldout_points = ho.points, sg.heldout_median_error = ho.median_abs, sg.heldout_worst_error = ho.worst_abs;
  }
  p.fit.push_back(sg);
}

}  // namespace

Profile fit_profile(const BenchResult& bench, const std::string& bench_name, const std::vector<MeasuredRun>& runs,
                    const FitOptions& options) {
  if (options.heldout_every < 2) throw Error("heldout_every must be >= 2");
  const Roofline roof = roofline(bench, bench_name);
  Profile p;
  p.hardware = bench.hardware;
  p.backend = bench.backend;
  p.peak_flops_per_s = roof.peak_flops_per_s;
  p.memory_bytes_per_s = roof.memory_bytes_per_s;
  p.comm_latency_s = roof.comm_latency_s;
  p.comm_busbw_bytes_per_s = roof.comm_busbw_bytes_per_s;
  p.comm_link = bench.backend == "cpu" ? bench.communicator : "intra-node";
  p.software = bench.software;
  p.date = utc_now();

  fit_communication(bench, options, p);

  // Compute: every measured compute task of every run.
  struct Point {
    ComputeFeatures f;
    double t;
    bool heldout;
  };
  std::vector<Point> pts;
  for (const auto& run : runs) {
    const std::string device = run.timeline.meta.is_object() && run.timeline.meta.contains("hardware")
                                   ? run.timeline.meta["hardware"].get<std::string>()
                                   : std::string();
    if (!device.empty() && device != bench.hardware)
      throw Error(fmt::format("the run was measured on {}, the benchmark on {}", device, bench.hardware))
          .at(run.path, "/meta/hardware")
          .hint("calibrate measurements of one machine type together");
    for (const auto& e : run.timeline.events) {
      if (e.kind != plan::TaskKind::compute || !(e.end_s > e.start_s)) continue;
      const auto& task = run.program.ranks[static_cast<size_t>(e.rank)].tasks[static_cast<size_t>(e.task)];
      Point pt{features(task, run.program.op_costs, p.peak_flops_per_s, p.memory_bytes_per_s), e.end_s - e.start_s,
               held_back(run.path, e.rank, e.task, options.heldout_every)};
      if (pt.f.roofline_s.empty()) continue;
      pts.push_back(std::move(pt));
    }
  }
  if (!pts.empty()) {
    std::set<Column> kinds;
    for (const auto& pt : pts)
      for (const auto& [k, v] : pt.f.roofline_s)
        if (v > 0) kinds.insert(k);
    std::vector<Column> cols(kinds.begin(), kinds.end());
    auto row = [&](const Point& pt) {
      std::vector<double> x;
      for (const Column& k : cols) x.push_back(pt.f.roofline_s.count(k) ? pt.f.roofline_s.at(k) : 0.0);
      x.push_back(pt.f.kernels);
      return x;
    };
    std::vector<std::vector<double>> X;
    std::vector<double> t;
    for (const auto& pt : pts)
      if (!pt.heldout) X.push_back(row(pt)), t.push_back(pt.t);
    std::vector<double> init(cols.size(), 2.0);
    init.push_back(2e-6);
    const auto f = fit_log_linear(X, t, init, options.huber_delta);
    auto predict = [&](const Point& pt) {
      const auto x = row(pt);
      double s = 0;
      for (size_t j = 0; j < x.size(); ++j) s += f.params[j] * x[j];
      return s;
    };
    // Per group: the points whose time is mostly that op kind's.
    auto group_errors = [&](const std::function<bool(const Point&)>& in, FitGroup g) {
      std::vector<double> ptr, mtr, pho, mho;
      for (const auto& pt : pts) {
        if (!in(pt)) continue;
        (pt.heldout ? pho : ptr).push_back(predict(pt));
        (pt.heldout ? mho : mtr).push_back(pt.t);
      }
      const auto tr = relative_errors(ptr, mtr), ho = relative_errors(pho, mho);
      g.train_points = tr.points, g.heldout_points = ho.points;
      g.train_median_error = tr.median_abs, g.heldout_median_error = ho.median_abs, g.heldout_worst_error = ho.worst_abs;
      p.fit.push_back(g);
    };
    for (size_t j = 0; j < cols.size(); ++j) {
      const double a = f.params[j];  // 1 / efficiency
      double e = 1.0 / a;
      std::string note;
      if (e > 1) note = fmt::format("fitted {:.3g}, clamped to 1", e), e = 1;
      const Column col = cols[j];
      (col.second ? p.efficiency_backward : p.efficiency)[col.first] = e;
      group_errors(
          [&](const Point& pt) {
            double best = 0;
            Column arg{0, false};
            for (const auto& [k, v] : pt.f.roofline_s)
              if (v > best) best = v, arg = k;
            return arg == col;
          },
          {"compute/" + sim::calibration_op_kind_name(col.first) + (col.second ? " backward" : ""), 1, 0, 0, 0, 0, 0, note});
    }
    p.kernel_overhead_s = f.params.back();
    group_errors([](const Point&) { return true; },
                 {"compute/all tasks (kernel_overhead_s and every efficiency)", static_cast<int>(cols.size()) + 1, 0, 0, 0,
                  0, 0, f.converged ? "" : "did not converge"});

    refit_step_overhead(runs, options, p);
  }
  return p;
}

hw::GpuSpec device_spec(const Profile& p) {
  hw::GpuSpec g;
  g.name = p.hardware;
  g.arch = p.backend;
  g.memory_bytes = 1e15;
  g.memory_bandwidth_bytes_per_s = p.memory_bytes_per_s;
  for (Precision pr : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16, Precision::fp8})
    g.peak_flops[pr] = p.peak_flops_per_s;
  // One rank runs its kernels on one core (the CPU backend is single-threaded per rank): one
  // "SM", and no GPU tile quantization (predict_on_profile_hardware turns shape effects off).
  g.sm_count = 1;
  g.source = "trainplan bench";
  return g;
}

sim::SimOptions apply_profile(const Profile& p, sim::SimOptions o) {
  auto table = std::make_shared<sim::CalibrationTable>();
  // The hardware check is check_profile_applies()'s (it knows about the override flag).
  table->source = "calibration profile " + p.date;
  for (const auto& [kind, e] : p.efficiency) {
    sim::CalibrationEntry c;
    c.op_kind = kind;
    c.compute_efficiency = e;
    table->add(c);
    sim::CalibrationEntry m;
    m.op_kind = kind;
    m.memory_efficiency = e;
    table->add(m);
  }
  for (const auto& [kind, e] : p.efficiency_backward) {
    sim::CalibrationEntry c;
    c.op_kind = kind;
    c.phase = sim::kPhaseBackward;
    c.compute_efficiency = e;
    table->add(c);
    c.compute_efficiency.reset();
    c.memory_efficiency = e;
    table->add(c);
  }
  if (!table->empty()) o.calibration = table;
  if (p.kernel_overhead_s >= 0) o.compute.kernel_overhead_s = p.kernel_overhead_s;
  o.compute.gemm_efficiency_scale = p.gemm_efficiency_scale;
  return o;
}

sim::StepResult predict_on_profile_hardware(const plan::StepProgram& program, const plan::Plan& plan, const Profile& p) {
  const hw::GpuSpec gpu = device_spec(p);
  const double bw = p.comm_busbw_bytes_per_s > 0 ? p.comm_busbw_bytes_per_s : p.memory_bytes_per_s;
  const sim::TableTopology topo = sim::make_switch_topology(std::max(1, program.world_size), bw, 0.0);
  sim::SimOptions o = apply_profile(p, sim::options_for(plan));
  // The profile's own collective latency on its own communicator (on a catalog cluster the
  // NCCL model times collectives; apply_profile leaves it alone).
  if (p.comm_latency_s > 0) o.comm_launch_s = p.comm_latency_s;
  o.precision = Precision::fp32;
  o.compute.gemm_shape_effects = false;
  return sim::simulate_step(program, topo, gpu, o);
}

void check_profile_applies(const Profile& p, const std::string& hardware, bool allow_other, const std::string& file) {
  if (p.hardware == hardware || allow_other) return;
  throw Error(fmt::format("the calibration profile was fitted on {}, the plan runs on {}", p.hardware, hardware))
      .at(file, "/hardware")
      .hint("calibrate on this hardware (trainplan bench, then trainplan calibrate), or pass "
            "--calibration-any-hardware to apply it anyway");
}

bool profile_directory_is_explicit() {
  const char* d = std::getenv("TRAINPLAN_CALIBRATION_DIR");
  return d && *d;
}

std::string profile_directory() {
  if (const char* d = std::getenv("TRAINPLAN_CALIBRATION_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return std::string(x) + "/trainplan/calibration";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/trainplan/calibration";
}

std::string default_profile_path(const std::string& hardware) {
  std::string name;
  for (char c : hardware) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return profile_directory() + "/" + name + ".json";
}

std::string find_default_profile(const std::string& hardware) {
  const std::string p = default_profile_path(hardware);
  std::error_code ec;
  if (std::filesystem::exists(p, ec)) return p;
  // An explicit directory is the whole search (tests and scripted runs stay hermetic).
  return profile_directory_is_explicit() ? std::string() : find_builtin_profile(hardware);
}

std::string host_cpu_hardware() {
  // The CPU backend runs ranks as threads: how many CPUs this process may use is part of the
  // machine (a profile of a 2-CPU VM does not describe a 64-core host of the same model).
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  const std::string count = cpus > 0 ? fmt::format(" ({} cpu{})", cpus, cpus == 1 ? "" : "s") : std::string();
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(' '));
        return "cpu:" + v + count;
      }
    }
  }
  return "cpu:unknown" + count;
}

}  // namespace trainplan::calibration
