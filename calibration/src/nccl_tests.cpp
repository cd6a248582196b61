// nccl-tests logs as calibration input (nccl_tests.hpp).
#include "trainplan/calibration/nccl_tests.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "trainplan/calibration/fit.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"

namespace trainplan::calibration {
namespace {

constexpr const char* kHint = "give the output of all_reduce_perf as nccl-tests prints it (one row per size)";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> tokens_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

double number(const std::string& text, const std::string& where, const std::string& name) {
  try {
    return checked::parse_real(text, 0, 1e18);
  } catch (const Error&) {
    throw Error(fmt::format("{}: \"{}\" is not a number", where, text)).at(name).hint(kHint);
  }
}

}  // namespace

bool is_nccl_tests_log(const std::string& text) {
  return text.find("# nThread") != std::string::npos ||
         (text.find("busbw") != std::string::npos && text.find("algbw") != std::string::npos && text.find('#') == 0);
}

NcclTestsLog parse_nccl_tests_log(const std::string& text, const std::string& name) {
  NcclTestsLog log;
  log.path = name;
  int threads_x_gpus = 0;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.size() > 4096) throw Error(fmt::format("line {} is longer than 4096 characters", line_no)).at(name).hint(kHint);
    if (!line.empty() && line[0] == '#') {
      const auto tok = tokens_of(line.substr(1));
      // "#  Rank  0 Group  0 Pid 1234 on host device  0 [0x07] NVIDIA A100-SXM4-40GB"
      if (tok.size() >= 2 && tok[0] == "Rank") {
        const size_t bracket = line.find(']', line.find(" device "));
        if (line.find(" device ") != std::string::npos && bracket != std::string::npos) {
          log.devices.push_back(trim(line.substr(bracket + 1)));
          continue;
        }
      }
      // "# nThread 1 nGpus 8 minBytes 8 ..."
      if (tok.size() >= 4 && tok[0] == "nThread" && tok[2] == "nGpus") {
        const auto threads = number(tok[1], fmt::format("line {} nThread", line_no), name);
        const auto gpus = number(tok[3], fmt::format("line {} nGpus", line_no), name);
        if (threads <= 1024 && gpus <= 1024) threads_x_gpus = static_cast<int>(threads * gpus);
        continue;
      }
    }
    if (line.find("NCCL version") != std::string::npos && log.nccl_version.empty()) {
      log.nccl_version = trim(line.substr(line.find("NCCL version") + 12));
      continue;
    }
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const auto tok = tokens_of(t);
    const std::string where = fmt::format("line {}", line_no);
    // size count type redop [root] | time algbw busbw #wrong | time algbw busbw #wrong
    if (tok.size() < 12 || tok[0].find_first_not_of("0123456789") != std::string::npos) {
      if (log.points.empty()) continue;  // a line before the table (warnings, banners)
      throw Error(fmt::format("{}: not a result row: \"{}\"", where, t.substr(0, 80))).at(name).hint(kHint);
    }
    if (log.points.size() >= kMaxNcclTestsRows)
      throw Error(fmt::format("more than {} result rows", kMaxNcclTestsRows)).at(name).hint(kHint);
    const size_t n = tok.size();
    BenchPoint p;
    p.kind = "all_reduce";
    p.bytes = number(tok[0], where + " size", name);
    const double time_us = number(tok[n - 8], where + " time", name);
    const double algbw = number(tok[n - 7], where + " algbw", name);
    const double busbw = number(tok[n - 6], where + " busbw", name);
    if (!(p.bytes > 0) || !(time_us > 0)) continue;  // nccl-tests prints 0-byte rows at 0 us
    p.median_s = p.min_s = p.max_s = time_us * 1e-6;
    p.repetitions = 1;
    p.flops = algbw > 0 ? busbw / algbw : 0;  // the bus factor, checked below (not stored)
    log.points.push_back(p);
  }
  log.ranks = log.devices.empty() ? threads_x_gpus : static_cast<int>(log.devices.size());
  if (log.points.empty()) throw Error("no result rows").at(name).hint(kHint);
  if (log.ranks < 2)
    throw Error("the log names no ranks (\"# Rank N ... device\" lines) or fewer than 2").at(name).hint(kHint);
  const double factor = 2.0 * (log.ranks - 1) / log.ranks;
  for (auto& p : log.points) {
    if (p.flops > 0 && p.bytes >= 1 << 20 && std::fabs(p.flops / factor - 1) > 0.05)
      throw Error(fmt::format("busbw / algbw is {:.3f} at {} bytes, an all-reduce over {} ranks has {:.3f}: not an "
                              "all_reduce_perf log",
                              p.flops, p.bytes, log.ranks, factor))
          .at(name)
          .hint("calibrate reads all_reduce_perf logs; other collectives are scored by trainplan validate");
    p.flops = 0;
    p.ranks = log.ranks;
  }
  return log;
}

NcclTestsLog read_nccl_tests_log(const std::string& path) { return parse_nccl_tests_log(json::read_text_file(path), path); }

void fit_nccl_tests(Profile& profile, const std::vector<NcclTestsLog>& logs, const FitOptions& options) {
  if (logs.empty()) return;
  const int ranks = logs.front().ranks;
  std::vector<std::vector<double>> Xa, Xb;
  std::vector<double> ta, tb;
  int i = 0;
  for (const auto& log : logs) {
    if (log.ranks != ranks)
      throw Error(fmt::format("this log has {} ranks, {} has {}", log.ranks, logs.front().path, ranks))
          .at(log.path)
          .hint("calibrate the logs of one rank count together; fit others into other profiles");
    for (const auto& p : log.points) {
      ((i % 2) ? Xb : Xa).push_back({1.0, p.bytes * 2.0 * (ranks - 1) / ranks});
      ((i % 2) ? tb : ta).push_back(p.median_s);
      ++i;
    }
  }
  if (ta.size() < 3 || tb.empty())
    throw Error(fmt::format("{} result rows: the collective fit needs at least 4", ta.size() + tb.size()))
        .at(logs.front().path)
        .hint("run all_reduce_perf over a range of sizes, e.g. -b 8 -e 8G -f 2");
  const auto f = fit_log_linear(Xa, ta, {1e-5, 1e-11}, options.huber_delta);
  auto pred = [&](const std::vector<std::vector<double>>& X) {
    std::vector<double> out;
    for (const auto& row : X) out.push_back(f.params[0] * row[0] + f.params[1] * row[1]);
    return out;
  };
  profile.comm_algorithm = "nccl";
  profile.comm_link = fmt::format("nccl-tests, {} ranks", ranks);
  profile.comm_latency_s = f.params[0];
  profile.comm_busbw_bytes_per_s = 1.0 / f.params[1];
  const auto tr = relative_errors(pred(Xa), ta), ho = relative_errors(pred(Xb), tb);
  profile.fit.push_back({"communication/" + profile.comm_algorithm + "/" + profile.comm_link, 2, tr.points, ho.points,
                         tr.median_abs, ho.median_abs, ho.worst_abs, f.converged ? "" : "did not converge"});
}

Profile catalog_gpu_profile(const hw::GpuSpec& gpu) {
  Profile p;
  p.hardware = gpu.name;
  p.backend = "cuda";
  for (Precision pr : {Precision::bf16, Precision::fp16, Precision::fp32}) {
    auto it = gpu.peak_flops.find(pr);
    if (it != gpu.peak_flops.end() && it->second > 0) {
      p.peak_flops_per_s = it->second;
      break;
    }
  }
  p.memory_bytes_per_s = gpu.memory_bandwidth_bytes_per_s;
  p.software = json::Json::object();
  p.software["device"] = "catalog: " + gpu.source;
  p.date = utc_now();
  return p;
}

}  // namespace trainplan::calibration
