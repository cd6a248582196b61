// `trainplan bench [--backend cpu|cuda] [--plan plan.json] -o measurements.json`: microbenchmarks
// of what the simulator models, on this machine through an executor backend: matrix products
// (the plan's linear GEMM shapes at its tp, plus a fixed grid), attention (sequence x heads x
// head dim), memory-bound passes (elementwise add) and all-reduce over the in-process
// communicator (ranks as threads) from 1 KiB up to --max-bytes, with algbw / busbw by the
// nccl-tests formulas. Each point: `--warmup` untimed runs, then timed repetitions until
// --min-time has passed (at least 5, at most 200); median, MAD, min, max and the count of
// repetitions above median + 5 MAD (calibration/measurements.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <cstdio>
#include <set>
#include <thread>
#include <tuple>

#include "commands.hpp"
#include "common.hpp"
#include "job.hpp"
#include "options.hpp"
#include "trainplan/calibration/measurements.hpp"
#include "trainplan/calibration/profile.hpp"
#include "trainplan/core/progress.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/in_process.hpp"
#include "trainplan/executor/registry.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::cli {
namespace {

struct BenchArgs {
  std::string backend = "cpu";
  std::string plan_file;
  std::string out;
  int warmup = 2;
  double min_time_s = 0.05;
  std::string max_bytes = "16MiB";
  int ranks = 2;
  bool ranks_given = false;
};

using Shape3 = std::tuple<int64_t, int64_t, int64_t>;

// Times `fn` on `be` with events on its default stream.
std::vector<double> time_reps(executor::Backend& be, const BenchArgs& a, const std::function<void()>& fn) {
  auto& s = be.default_stream();
  for (int i = 0; i < a.warmup; ++i) fn();
  be.synchronize(s);
  auto start = be.create_event(), end = be.create_event();
  std::vector<double> times;
  double total = 0;
  while ((times.size() < 5 || total < a.min_time_s) && times.size() < 200) {
    be.record(*start, s);
    fn();
    be.record(*end, s);
    be.synchronize(*end);
    const double t = be.elapsed_s(*start, *end);
    times.push_back(t);
    total += t;
  }
  return times;
}

// Times all-reduces of `elems` floats on `rank` of group `g` (every member calls it with the
// same `tag` sequence): each repetition between barriers; member 0 decides when enough time
// has passed and broadcasts the decision. Returns member 0's times (the others: empty).
std::vector<double> time_all_reduce(const BenchArgs& a, executor::Communicator& c, const executor::CommGroup& g, int rank,
                                    int64_t elems, int64_t& tag) {
  using executor::DType;
  auto rb = executor::make_backend("cpu");
  auto t = rb->zeros(rb->default_stream(), DType::f32, {elems});
  auto flag = rb->zeros(rb->default_stream(), DType::f32, {1});
  for (int i = 0; i < a.warmup; ++i) c.all_reduce(g, tag++, t, executor::ReduceOp::sum);
  std::vector<double> times;
  double total_s = 0;
  for (int i = 0; i < 200; ++i) {
    c.barrier(g, tag++);
    const double t0 = executor::Backend::now_s();
    c.all_reduce(g, tag++, t, executor::ReduceOp::sum);
    const double dt = executor::Backend::now_s() - t0;
    if (rank == 0) times.push_back(dt), total_s += dt;
    rb->fill(rb->default_stream(), flag, rank == 0 && times.size() >= 5 && total_s >= a.min_time_s ? 1.0 : 0.0);
    c.broadcast(g, tag++, flag, 0);
    std::vector<std::byte> host(4);
    rb->download(rb->default_stream(), host, flag);
    float v;
    std::memcpy(&v, host.data(), 4);
    if (v > 0) break;
  }
  return times;
}

executor::CommGroup world_of(int ranks) {
  executor::CommGroup g;
  g.id = 0, g.name = "world";
  for (int r = 0; r < ranks; ++r) g.ranks.push_back(r);
  return g;
}

calibration::BenchPoint all_reduce_point(double elems, int ranks, const std::vector<double>& times) {
  calibration::BenchPoint pt;
  pt.kind = "all_reduce", pt.bytes = elems * 4.0, pt.ranks = ranks;
  if (!times.empty()) calibration::summarize_times(times, pt);  // empty on processes other than 0's
  return pt;
}

// One all-reduce size across the processes of a job, this process's one rank on its thread.
calibration::BenchPoint measure_all_reduce_tcp(const BenchArgs& a, double bytes, const Job& job) {
  const int64_t elems = static_cast<int64_t>(bytes / 4);
  static int64_t tag = 1;  // the same sequence in every process
  const int ranks = job.launch.world_size;
  const auto times = time_all_reduce(a, job.world->communicator(job.ranks.front()), world_of(ranks), job.ranks.front(), elems, tag);
  return all_reduce_point(static_cast<double>(elems), ranks, times);
}

// One all-reduce size over the in-process communicator, ranks as threads.
calibration::BenchPoint measure_all_reduce(const BenchArgs& a, double bytes, int comm_ranks) {
  const int64_t elems = static_cast<int64_t>(bytes / 4);
  executor::InProcessWorld world(comm_ranks);
  const executor::CommGroup g = world_of(comm_ranks);
  std::vector<double> times;
  std::vector<std::thread> threads;
  for (int r = 0; r < comm_ranks; ++r)
    threads.emplace_back([&, r] {
      int64_t tag = 1;
      auto mine = time_all_reduce(a, world.communicator(r), g, r, elems, tag);
      if (r == 0) times = std::move(mine);
    });
  for (auto& t : threads) t.join();
  return all_reduce_point(static_cast<double>(elems), comm_ranks, times);
}

// The all-reduce over the device backend's collective library (NCCL on cuda), one thread per
// device, when the machine has two devices or more: the module times it (registry.hpp). Returns
// the ranks measured, 0 when there is nothing to measure (one device), with a note.
int add_device_collectives(const BenchArgs& a, double max_bytes, calibration::BenchResult& out) {
  const int devices = executor::backend_device_count(a.backend);
  if (devices < 2) {
    std::fprintf(stderr, "note: %d %s device(s) here: no collective to measure (an all-reduce needs two); "
                         "calibrate takes nccl-tests all_reduce_perf logs of a larger machine\n",
                 devices, a.backend.c_str());
    return 0;
  }
  const int ranks = std::min(devices, a.ranks_given ? a.ranks : 8);
  const json::Json table = executor::backend_collective_benchmark(a.backend, ranks, static_cast<int64_t>(max_bytes));
  out.communicator = "nccl";
  out.statistics += "; the nccl all-reduce points: rank 0's mean over the module's timed operations (10 per size, "
                    "fewer above 64 MiB, after 3 untimed)";
  for (const auto& e : table.at("entries")) {
    if (e.value("collective", "") != "all_reduce") continue;
    calibration::BenchPoint pt;
    pt.kind = "all_reduce", pt.ranks = ranks;
    pt.bytes = e.at("size_bytes").get<double>();
    // The module reports one time per size (rank 0's mean over its timed operations).
    pt.median_s = pt.min_s = pt.max_s = e.at("duration_s").get<double>();
    pt.repetitions = 1;
    out.points.push_back(pt);
  }
  return ranks;
}

// What a bench output says about the run: machine, backend, date, software, statistics.
calibration::BenchResult bench_header(const BenchArgs& a, executor::Backend& be) {
  calibration::BenchResult out;
  out.machine = [] {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return std::string(host);
  }();
  out.backend = a.backend;
  out.device = be.description();
  out.hardware = a.backend == "cpu" ? calibration::host_cpu_hardware() : be.description();
  out.date = calibration::utc_now();
  out.software = {{"trainplan", TRAINPLAN_VERSION},
                  {"compiler", __VERSION__},
                  {"executor_backend", be.description()},
                  {"dtype", "f32"},
                  {"threads_per_rank", 1},
                  {"hardware_threads", static_cast<int>(std::thread::hardware_concurrency())}};
  out.warmup = a.warmup;
  out.statistics = fmt::format(
      "{} untimed warm-up runs, then timed repetitions until {} s have passed (at least 5, at most 200); the point's "
      "time is the median; outliers = repetitions above median + 5 MAD (counted, the median already ignores them)",
      a.warmup, a.min_time_s);
  return out;
}

void run(const BenchArgs& a) {
  if (a.out.empty()) throw Error("missing -o FILE").hint("trainplan bench -o measurements.json");
  if (a.ranks < 2) throw Error(fmt::format("--ranks must be at least 2, got {}", a.ranks));
  const double max_bytes = units::parse(a.max_bytes, units::Dimension::bytes);
  if (!(max_bytes >= 1024 && max_bytes <= 1024.0 * 1024 * 1024))
    throw Error(fmt::format("--max-bytes: {} is outside 1KiB..1GiB", a.max_bytes)).hint("e.g. --max-bytes 64MiB");
  bool known = false;
  for (const auto& info : executor::backend_infos()) {
    if (info.name != a.backend) continue;
    known = true;
    if (!info.available)
      throw Error(fmt::format("backend {} cannot run here: {}", a.backend, info.why_unavailable))
          .hint(a.backend == "cuda" ? "run trainplan bench --backend cuda on a machine with an NVIDIA GPU "
                                      "(scripts/device-check.sh does); on this one use --backend cpu"
                                    : "use one of the available backends (trainplan execute --help lists them)");
  }
  if (!known) (void)executor::make_backend(a.backend);  // throws: unknown backend, with the names
  std::unique_ptr<executor::Backend> be = executor::make_backend(a.backend);

  std::set<Shape3> gemms;
  for (int64_t m : {64, 256, 1024})
    for (int64_t n : {32, 128, 512})
      for (int64_t k : {32, 128, 512}) gemms.insert({m, n, k});
  int comm_ranks = a.ranks;
  if (!a.plan_file.empty()) {
    plan::Plan p = plan::read_plan_file(a.plan_file);
    plan::PlanContext ctx = plan::resolve(p, user_catalog(), a.plan_file);
    plan::validate(p, ctx, a.plan_file);
    const plan::StepProgram prog = plan::lower(p, ctx);
    // Bounded work: a shape whose operands exceed kMaxBenchElems elements each (256 MiB in f32)
    // is left out and counted; the all-reduce uses at most kMaxBenchRanks threads.
    constexpr double kMaxBenchElems = 64.0 * 1024 * 1024;
    constexpr int kMaxBenchRanks = 64;
    size_t skipped = 0;
    for (const auto& c : prog.op_costs) {
      if (!(c.gemm_m > 0 && c.gemm_n > 0 && c.gemm_k > 0) || c.op_kind == static_cast<int>(models::OpKind::attention)) continue;
      const double m = static_cast<double>(c.gemm_m), n = static_cast<double>(c.gemm_n), k = static_cast<double>(c.gemm_k);
      if (std::max({m * k, n * k, m * n}) > kMaxBenchElems) ++skipped;
      else gemms.insert({c.gemm_m, c.gemm_n, c.gemm_k});
    }
    if (skipped > 0)
      std::fprintf(stderr, "note: %zu GEMM shapes of the plan have an operand above %.0f Mi elements (256 MiB) and are not measured\n",
                   skipped, kMaxBenchElems / (1024.0 * 1024.0));
    comm_ranks = std::min(kMaxBenchRanks, std::max(comm_ranks, std::max({p.dp, p.tp, p.pp})));
  }
  struct Attn {
    int64_t seq, heads, head_dim;
  };
  std::vector<Attn> attns;
  for (int64_t s : {16, 64, 256})
    for (int64_t h : {2, 8})
      for (int64_t d : {8, 32, 64}) attns.push_back({s, h, d});
  std::vector<int64_t> mem_elems;
  for (int64_t n = 1 << 12; n <= (1 << 22); n *= 4) mem_elems.push_back(n);
  std::vector<double> comm_sizes;
  if (a.backend == "cpu")
    for (double b = 1024; b <= max_bytes; b *= 4) comm_sizes.push_back(b);

  const size_t total = gemms.size() + attns.size() + mem_elems.size() + comm_sizes.size();
  Progress bar("bench", total, 0.0);
  size_t done = 0;
  calibration::BenchResult out = bench_header(a, *be);
  // Under a launcher (mpirun, srun, torchrun-style variables, `trainplan launch`): one rank per
  // process, the all-reduce over the job's TCP world first (every process), then the compute
  // points on process 0 only, which writes the file.
  const int processes = executor::detect_launch().world_size;
  const Job job = processes > 1 ? join_job(processes, 60) : Job{};
  if (job.world) {
    out.communicator = "tcp";
    comm_ranks = processes;
    for (double bytes : comm_sizes) {
      out.points.push_back(measure_all_reduce_tcp(a, bytes, job));
      bar.update(++done);
    }
    comm_sizes.clear();
    job.world->close();
    executor::mpi_finalize();  // the bootstrap may have initialized MPI (mpirun without an address)
    if (!job.primary()) return;
  }
  auto& s = be->default_stream();
  using executor::DType;
  for (const auto& [m, n, k] : gemms) {
    auto x = be->zeros(s, DType::f32, {m, k}), w = be->zeros(s, DType::f32, {n, k}), y = be->zeros(s, DType::f32, {m, n});
    be->fill(s, x, 0.5), be->fill(s, w, 0.25);
    calibration::BenchPoint pt;
    pt.kind = "matmul", pt.m = m, pt.n = n, pt.k = k, pt.flops = 2.0 * m * n * k;
    calibration::summarize_times(time_reps(*be, a, [&] { be->linear_forward(s, y, x, w, executor::Tensor{}); }), pt);
    out.points.push_back(pt);
    bar.update(++done);
  }
  for (const auto& at : attns) {
    executor::AttentionShape sh;
    sh.batch = 1, sh.seq = at.seq, sh.heads = at.heads, sh.kv_heads = at.heads, sh.head_dim = at.head_dim;
    auto qkv = be->zeros(s, DType::f32, {at.seq, 3 * at.heads * at.head_dim});
    auto o = be->zeros(s, DType::f32, {at.seq, at.heads * at.head_dim});
    auto lse = be->zeros(s, DType::f32, {1, at.heads, at.seq});
    be->fill(s, qkv, 0.1);
    calibration::BenchPoint pt;
    pt.kind = "attention", pt.m = at.heads, pt.n = at.seq, pt.k = at.head_dim;
    pt.flops = 4.0 * at.heads * at.seq * at.seq * at.head_dim / 2;  // causal: half of QK^T and PV
    calibration::summarize_times(time_reps(*be, a, [&] { be->attention_forward(s, o, lse, qkv, sh); }), pt);
    out.points.push_back(pt);
    bar.update(++done);
  }
  for (int64_t n : mem_elems) {
    auto x = be->zeros(s, DType::f32, {n}), y = be->zeros(s, DType::f32, {n}), z = be->zeros(s, DType::f32, {n});
    calibration::BenchPoint pt;
    pt.kind = "memory", pt.bytes = 3.0 * 4.0 * static_cast<double>(n);
    calibration::summarize_times(time_reps(*be, a, [&] { be->add(s, z, x, y); }), pt);
    out.points.push_back(pt);
    bar.update(++done);
  }
  for (double bytes : comm_sizes) {
    out.points.push_back(measure_all_reduce(a, bytes, comm_ranks));
    bar.update(++done);
  }
  bar.finish();
  if (a.backend != "cpu" && !job.world) comm_ranks = add_device_collectives(a, max_bytes, out);
  json::write_file(a.out, calibration::to_json(out));
  const auto roof = calibration::roofline(out, a.out);
  std::printf("%s on %s (%s): %zu points\n", a.backend.c_str(), out.hardware.c_str(), out.machine.c_str(), out.points.size());
  std::printf("  best matmul %s, memory-bound %s", units::format_flops_rate(roof.peak_flops_per_s).c_str(),
              units::format_bandwidth(roof.memory_bytes_per_s).c_str());
  if (roof.comm_busbw_bytes_per_s > 0)
    std::printf(", all-reduce over %d ranks: latency %s, bus bandwidth %s", comm_ranks,
                units::format_duration(roof.comm_latency_s).c_str(), units::format_bandwidth(roof.comm_busbw_bytes_per_s).c_str());
  std::printf("\nmeasurements: %s\n", a.out.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Microbenchmark this machine (matmul, attention, memory, all-reduce) for calibrate");
  add_choice(cmd, "--backend", a->backend, executor::backend_names(), "Executor backend to measure");
  cmd->add_option("--plan", a->plan_file, "Also measure this plan's GEMM shapes (at its tp) and its largest group size");
  cmd->add_option("-o,--output", a->out, "Write the measurements JSON here")->required();
  add_int(cmd, "--warmup", a->warmup, 0, 1000, "Untimed runs before each point");
  add_real(cmd, "--min-time", a->min_time_s, 1e-4, 60, "Seconds of timed repetitions per point (at least 5 repetitions)");
  cmd->add_option("--max-bytes", a->max_bytes, "Largest all-reduce message (from 1KiB, x4 steps; at most 1GiB)")->capture_default_str();
  add_int(cmd, "--ranks", a->ranks, 2, 64,
          "Ranks of the all-reduce (threads of the in-process communicator; under mpirun or trainplan launch: one "
          "per process, over TCP; --backend cuda: GPUs of this machine over NCCL, default all of them up to 8)");
  cmd->callback([a, cmd] {
    a->ranks_given = cmd->count("--ranks") > 0;
    run(*a);
  });
}

}  // namespace trainplan::cli
