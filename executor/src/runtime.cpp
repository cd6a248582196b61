// Runtime (runtime.hpp): one thread per local rank per step over the world's communicators
// (in-process: every rank; a TcpWorld: this process's ranks), the step's summary exchanged
// between all ranks, the measured Timeline, parameters and gradients gathered from their
// owners, and checkpoints (one file per rank + a manifest committed by rank 0's process).
#include "trainplan/executor/runtime.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "staging_communicator.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/executor/in_process.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::executor {

namespace fs = std::filesystem;

namespace {


// Runs fn(rank) on one thread per rank of `ranks`; returns each rank's error ("" if none),
// indexed by global rank.
template <class Fn>
std::vector<std::string> on_ranks(int world, const std::vector<int>& ranks, Fn fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        if (errors[static_cast<size_t>(r)].empty()) errors[static_cast<size_t>(r)] = "unknown error";
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

std::string first_error(const std::vector<std::string>& errors) {
  for (const std::string& e : errors)
    if (!e.empty()) return e;
  return "";
}

// The pipeline neighbours of a rank (both directions; with interleaving the last stage sends to
// the first), whose message communicators the device library creates up front.
std::vector<int> pipeline_peers(const plan::StepProgram& prog, int rank) {
  std::vector<int> peers;
  if (prog.pp < 2) return peers;
  const plan::RankProgram& rp = prog.ranks[static_cast<size_t>(rank)];
  for (int d : {1, prog.pp - 1}) {
    const int peer = prog.rank_of(rp.dp_rank, rp.tp_rank, (rp.pp_rank + d) % prog.pp, rp.cp_rank);
    if (peer != rank && std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
  }
  return peers;
}

}  // namespace

std::string_view device_collectives_name(DeviceCollectives c) {
  switch (c) {
    case DeviceCollectives::automatic: return "auto";
    case DeviceCollectives::staging: return "staging";
    case DeviceCollectives::device: return "device";
  }
  return "auto";
}

CollectivesChoice choose_collectives(DeviceCollectives want, std::string_view backend, bool has_library, int devices,
                                     int first_device, int local_ranks) {
  CollectivesChoice out;
  if (backend == "cpu") {
    if (want == DeviceCollectives::device)
      throw Error("device collectives need a device backend; the cpu backend's ranks talk through the in-process or "
                  "TCP communicator")
          .hint("use --backend cuda, or --collectives auto");
    out.reason = "host tensors over the world's communicator";
    return out;
  }
  if (want == DeviceCollectives::staging) {
    out.reason = "staged through host memory (asked for)";
    return out;
  }
  std::string why_not;
  if (!has_library)
    why_not = fmt::format("the {} backend has no device collective library here (built without NCCL)", backend);
  else if (first_device < 0 || first_device + local_ranks > devices)
    why_not = fmt::format("{} rank{} from device {} need {} devices, this machine has {}; NCCL runs one rank per device",
                          local_ranks, local_ranks == 1 ? "" : "s", first_device, first_device + local_ranks, devices);
  if (why_not.empty()) {
    out.device = true;
    out.reason = local_ranks == 1 ? fmt::format("device collectives (NCCL) on device tensors: rank on device {}", first_device)
                                  : fmt::format("device collectives (NCCL) on device tensors: {} ranks on devices {}..{}",
                                                local_ranks, first_device, first_device + local_ranks - 1);
    return out;
  }
  if (want == DeviceCollectives::device)
    throw Error("device collectives are impossible: " + why_not)
        .hint("run as many ranks per process as devices (fewer ranks, or more processes under a launcher), or use "
              "--collectives staging, which lets ranks share a device");
  out.reason = "staged through host memory: " + why_not;
  return out;
}

std::vector<double> declared_peak_memory(const plan::StepProgram& program) {
  std::vector<double> out;
  for (const plan::RankProgram& rp : program.ranks) {
    double live = 0, peak = 0;
    for (const plan::Task& t : rp.tasks) {
      if (t.kind == plan::TaskKind::alloc) live += t.alloc_bytes;
      if (t.kind == plan::TaskKind::free) live -= t.alloc_bytes;
      peak = std::max(peak, live);
    }
    out.push_back(rp.static_bytes + peak);
  }
  return out;
}

void check_memory_limit(const plan::StepProgram& program, double limit_bytes) {
  const std::vector<double> peaks = declared_peak_memory(program);
  for (const plan::RankProgram& rp : program.ranks) {
    const double peak = peaks[static_cast<size_t>(rp.rank)];
    if (peak > limit_bytes)
      throw Error(fmt::format("the plan does not fit: rank {} (dp {}, tp {}, pp {}) needs {} ({} of weights, gradients and "
                              "optimizer state + {} of step buffers, as its program declares), more than the memory "
                              "limit {}",
                              rp.rank, rp.dp_rank, rp.tp_rank, rp.pp_rank, units::format_bytes(peak),
                              units::format_bytes(rp.static_bytes), units::format_bytes(peak - rp.static_bytes),
                              units::format_bytes(limit_bytes)))
          .hint("raise the limit, or choose a plan with more sharding (ZeRO, tp, pp), recomputation or smaller "
                "micro-batches");
  }
}

std::string checkpoint_folder(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("step-{:08d}", step)).string();
}

std::string latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::string best;
  int64_t best_step = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::is_regular_file(entry.path() / "manifest.json")) continue;
    try {
      const int64_t step = std::stoll(name.substr(5));
      if (step > best_step) {
        best_step = step;
        best = entry.path().string();
      }
    } catch (const std::exception&) {
      continue;  // not one of ours
    }
  }
  return best;
}

struct Runtime::Impl {
  plan::Plan plan;
  models::ModelGraph graph;
  plan::StepProgram program;
  RuntimeOptions options;
  std::shared_ptr<const TrainingData> data;
  rt::ModelLayout layout;
  std::vector<std::unique_ptr<rt::RankState>> ranks;  // by global rank; null where another process holds it
  std::vector<int> local;                             // the ranks this process holds
  std::shared_ptr<CommWorld> world;
  std::unique_ptr<Backend> host;                      // host tensors of the runtime's own exchanges
  CollectivesChoice collectives;                      // device library or staging, and why
  std::shared_ptr<Rendezvous> store;                  // the device library's id exchange
  std::vector<std::unique_ptr<Communicator>> device_comms;  // by global rank; set on the device path
  int64_t control_tag = 0;                            // the runtime's exchanges use tags -1, -2, ...
  std::string failed;  // the error of a failed step: the runtime cannot go on

  Impl(const plan::Plan& p, const models::ModelGraph& g, plan::StepProgram prog, RuntimeOptions o)
      : plan(p), graph(g), program(std::move(prog)), options(std::move(o)) {}

  int world_size() const { return program.world_size; }
  bool all_local() const { return static_cast<int>(local.size()) == world_size(); }
  rt::RankState& first_local() const { return *ranks[static_cast<size_t>(local.front())]; }
  void require_all_local(const std::string& what) const {
    if (!all_local())
      throw Error(fmt::format("runtime: {} gathers from every rank, and this process holds only ranks {}..{} of {}", what,
                              local.front(), local.back(), world_size()))
          .hint("compare the processes' checkpoints instead (load them in one process)");
  }
  template <class Fn>
  std::vector<std::string> on_local_ranks(Fn fn) {
    return on_ranks(world_size(), local, fn);
  }
  CommGroup world_group() const {
    CommGroup g{static_cast<int>(program.groups.size()), {}, "world"};
    for (int r = 0; r < world_size(); ++r) g.ranks.push_back(r);
    return g;
  }
  // Every rank's k values, in rank order, on every process: an all-gather over all ranks
  // (local ranks contribute mine[i], i in local order). A failure here aborts the job.
  std::vector<double> exchange(const std::vector<std::vector<double>>& mine, size_t k) {
    const int64_t tag = --control_tag;
    const CommGroup g = world_group();
    std::vector<Tensor> ins, outs;
    std::vector<std::shared_ptr<CommRequest>> reqs;
    try {
      for (size_t i = 0; i < local.size(); ++i) {
        TP_ASSERT(mine[i].size() == k);
        ins.push_back(host->empty(DType::f64, {static_cast<int64_t>(k)}));
        std::copy(mine[i].begin(), mine[i].end(), ins.back().data_as<double>());
        outs.push_back(host->empty(DType::f64, {static_cast<int64_t>(k) * world_size()}));
        reqs.push_back(world->communicator(local[i]).start_all_gather(g, tag, outs.back(), ins.back()));
      }
      for (auto& r : reqs) r->wait();
    } catch (const std::exception& e) {
      world->communicator(local.front()).abort(e.what());
      throw;
    }
    const double* p = outs.front().data_as<double>();
    return std::vector<double>(p, p + k * static_cast<size_t>(world_size()));
  }
  int def_index(const std::string& name) const {
    for (size_t i = 0; i < layout.params.size(); ++i)
      if (layout.params[i].name == name) return static_cast<int>(i);
    std::vector<std::string> names;
    for (const auto& d : layout.params) names.push_back(d.name);
    throw Error(fmt::format("unknown parameter \"{}\"", name)).hint(suggestion(name, names));
  }
  // Full values assembled from the owners: `pick` gives a canonical Param's owned values.
  template <class Pick>
  std::vector<double> assemble(const std::string& name, Pick pick) const {
    const int def = def_index(name);
    const auto n = static_cast<size_t>(shape_numel(layout.params[static_cast<size_t>(def)].shape));
    std::vector<double> full(n, 0.0);
    std::vector<bool> seen(n, false);
    for (const auto& rank : ranks)
      for (const rt::Param& p : rank->params()) {
        if (p.def != def || !p.canonical) continue;
        const std::vector<double> values = pick(*rank, p);
        if (static_cast<int64_t>(values.size()) != p.own_len())
          throw Error(fmt::format("{}: rank {} keeps {} values of its {} owned elements", name, rank->rank(), values.size(),
                                  p.own_len()))
              .hint("gradients are kept only with RuntimeOptions::keep_gradients");
        const std::vector<int64_t> global = p.slice.global_indices();
        for (int64_t i = 0; i < p.own_len(); ++i) {
          const auto g = static_cast<size_t>(global[static_cast<size_t>(p.own_begin + i)]);
          full[g] = values[static_cast<size_t>(i)];
          seen[g] = true;
        }
      }
    for (size_t i = 0; i < n; ++i)
      TP_ASSERT_MSG(seen[i], "a parameter element has no owner");
    return full;
  }
};

Runtime::Runtime(const plan::Plan& plan, const plan::PlanContext& ctx, plan::StepProgram program, RuntimeOptions options)
    : impl_((check_executable(plan), check_accelerator_executable(ctx), std::make_unique<Impl>(plan, ctx.graph, std::move(program), std::move(options)))) {
  Impl& m = *impl_;
  const plan::StepProgram& prog = m.program;
  auto mismatch = [&](const std::string& what, int64_t program_value, int64_t plan_value) {
    if (program_value != plan_value)
      throw Error(fmt::format("the step program has {} {}, the plan {}", what, program_value, plan_value))
          .hint("lower the plan with plan::lower(plan, ctx) after resolve()");
  };
  mismatch("world size", prog.world_size, plan.world_size());
  mismatch("dp", prog.dp, plan.dp);
  mismatch("tp", prog.tp, plan.tp);
  mismatch("pp", prog.pp, plan.pp);
  mismatch("vp", prog.vp, plan.vp);
  mismatch("micro-batches", prog.num_micro_batches, plan.num_micro_batches);
  mismatch("micro-batch size", prog.micro_batch, plan.micro_batch);
  mismatch("rank programs", static_cast<int64_t>(prog.ranks.size()), plan.world_size());
  for (const plan::RankProgram& rp : prog.ranks)
    if (prog.rank_of(rp.dp_rank, rp.tp_rank, rp.pp_rank) != rp.rank || rp.rank != static_cast<int>(&rp - prog.ranks.data()))
      throw Error(fmt::format("rank program {} has coordinates dp {} tp {} pp {} that do not match its index", rp.rank,
                              rp.dp_rank, rp.tp_rank, rp.pp_rank));
  if (plan.global_batch != plan.micro_batch * plan.num_micro_batches * plan.dp)
    throw Error(fmt::format("the plan's global batch {} is not micro_batch {} x micro-batches {} x dp {}", plan.global_batch,
                            plan.micro_batch, plan.num_micro_batches, plan.dp))
        .at("", "/batch");
  if (const std::string problem = plan::check_program(prog); !problem.empty())
    throw Error("the step program is inconsistent: " + problem).hint("plan::check_program describes the invariants");
  if (!(m.options.timeout_s > 0)) throw Error(fmt::format("runtime: timeout must be positive, got {}", m.options.timeout_s));
  {
    auto probe = make_backend(m.options.backend);
    if (!probe->supports(m.options.dtype) || !is_floating(m.options.dtype))
      throw Error(fmt::format("the {} backend does not compute in {}", m.options.backend, dtype_name(m.options.dtype)))
          .hint("the cpu backend computes in f32 or f64");
  }
  m.data = m.options.data ? m.options.data
                          : std::make_shared<TrainingData>(
                                TrainingData::synthetic(m.graph.spec(), m.graph.spec().seq_len, m.options.data_seed));
  m.layout = rt::ModelLayout::build(m.plan, m.graph, m.program);
  m.world = m.options.world ? m.options.world
                            : std::make_shared<InProcessWorld>(m.world_size(), InProcessOptions{m.options.timeout_s});
  if (m.world->world_size() != m.world_size())
    throw Error(fmt::format("the communicator world has {} ranks, the plan {}", m.world->world_size(), m.world_size()))
        .hint("start as many ranks as the plan has (dp x tp x pp)");
  m.local = m.world->local_ranks();
  if (m.local.empty()) throw Error("runtime: this process holds no rank of the world");
  m.host = make_backend("cpu");
  const int nlocal = static_cast<int>(m.local.size());
  const bool device_backend = m.options.backend != "cpu";
  m.collectives = choose_collectives(m.options.collectives, m.options.backend,
                                     device_backend && backend_has_device_communicator(m.options.backend),
                                     device_backend ? backend_device_count(m.options.backend) : 1, m.options.first_device,
                                     nlocal);
  if (m.collectives.device) {
    if (m.options.store)
      m.store = m.options.store;
    else if (m.all_local())
      m.store = make_in_process_rendezvous();
    else
      throw Error("runtime: device collectives across processes need the job's rendezvous store (RuntimeOptions::store)")
          .hint("pass the store the processes joined through, or use the staging path");
  }
  m.ranks.resize(static_cast<size_t>(m.world_size()));
  m.device_comms.resize(static_cast<size_t>(m.world_size()));
  const std::string err = first_error(m.on_local_ranks([&](int r) {
    // The device path: local rank i on device first_device + i, and its communicator created
    // together with every other rank's (NCCL's init waits for all members).
    const int i = static_cast<int>(std::find(m.local.begin(), m.local.end(), r) - m.local.begin());
    const int device = m.collectives.device ? m.options.first_device + i : -1;
    auto& state = m.ranks[static_cast<size_t>(r)];
    state = std::make_unique<rt::RankState>(m.layout, m.options, *m.data, r, device);
    if (!m.collectives.device) return;
    std::vector<CommGroup> groups;
    for (size_t g = 0; g < m.program.groups.size(); ++g)
      groups.push_back(state->group(static_cast<int>(g)));
    groups.push_back(state->world_group());
    m.device_comms[static_cast<size_t>(r)] =
        make_device_communicator(m.options.backend, *m.store, r, m.world_size(), state->backend(), groups,
                                 pipeline_peers(m.program, r), m.world->communicator(r).timeout_s());
  }));
  if (!err.empty()) {
    (void)m.on_local_ranks([&](int r) { m.device_comms[static_cast<size_t>(r)].reset(); });  // as in ~Runtime
    throw Error(err);
  }
}

Runtime::~Runtime() {
  // NCCL's finalize waits for the communicator's other members: the ranks' device
  // communicators go at once, one thread each, as they were created.
  if (impl_)
    (void)impl_->on_local_ranks([&](int r) { impl_->device_comms[static_cast<size_t>(r)].reset(); });
}

int64_t Runtime::steps_done() const { return impl_->first_local().steps_done(); }
std::vector<int> Runtime::local_ranks() const { return impl_->local; }
const CollectivesChoice& Runtime::collectives() const { return impl_->collectives; }
const plan::StepProgram& Runtime::program() const { return impl_->program; }

StepResult Runtime::step() {
  Impl& m = *impl_;
  if (!m.failed.empty())
    throw Error("the runtime cannot run another step after a failed one: " + m.failed)
        .hint("create a new Runtime (or resume from a checkpoint)");
  const int world = m.world_size();
  const int64_t step = steps_done();
  std::vector<rt::RankStepResult> results(static_cast<size_t>(world));
  const double t0 = Backend::now_s();
  const std::vector<std::string> errors = m.on_local_ranks([&](int r) {
    // Ranks on a device backend (GPU memory) talk through the device library on their tensors,
    // or through host copies of them over the world's communicator (Runtime::collectives()).
    Communicator& base = m.world->communicator(r);
    std::unique_ptr<Communicator> staged;
    if (!m.device_comms[static_cast<size_t>(r)]) staged = make_staging_communicator(base, m.ranks[static_cast<size_t>(r)]->backend());
    Communicator& comm = m.device_comms[static_cast<size_t>(r)] ? *m.device_comms[static_cast<size_t>(r)]
                         : staged                               ? *staged
                                                                : base;
    try {
      results[static_cast<size_t>(r)] = m.ranks[static_cast<size_t>(r)]->run_step(step, comm, t0);
    } catch (const std::exception& e) {
      comm.abort(e.what());
      throw;
    }
  });
  // Every rank's summary, on every process: loss sum and rows, gradient norm, peak memory,
  // end of its last task, and whether its process was asked to stop.
  constexpr size_t kSummary = 6;
  std::vector<double> summary;
  std::string failure = first_error(errors);
  if (failure.empty()) {
    std::vector<std::vector<double>> mine;
    const bool stop = m.options.stop_requested && m.options.stop_requested();
    for (int r : m.local) {
      const rt::RankStepResult& x = results[static_cast<size_t>(r)];
      double end_s = 0;
      for (const auto& e : x.events) end_s = std::max(end_s, e.end_s);
      mine.push_back({x.loss_sum, static_cast<double>(x.loss_rows), x.grad_norm, x.peak_memory_bytes, end_s,
                      stop ? 1.0 : 0.0});
    }
    try {
      summary = m.exchange(mine, kSummary);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (!failure.empty()) {
    // The rank that failed first aborted the others: its message is the cause.
    m.failed = m.world->aborted() ? m.world->abort_message() : failure;
    throw Error(fmt::format("step {} failed: {}", step + 1, m.failed));
  }

  StepResult out;
  out.step = step + 1;
  double loss_sum = 0;
  double loss_rows = 0;
  std::set<std::string> implicit;
  plan::Timeline& tl = out.timeline;
  for (int r = 0; r < world; ++r) {
    const double* x = summary.data() + static_cast<size_t>(r) * kSummary;
    loss_sum += x[0];
    loss_rows += x[1];
    out.peak_memory_bytes.push_back(x[3]);
    tl.step_time_s = std::max(tl.step_time_s, x[4]);
    out.stop_requested = out.stop_requested || x[5] != 0;
  }
  out.grad_norm = summary[2];  // rank 0's (every rank computes the same)
  for (int r : m.local) {
    rt::RankStepResult& x = results[static_cast<size_t>(r)];
    std::sort(x.events.begin(), x.events.end(), [](const auto& a, const auto& b) { return a.task < b.task; });
    for (auto& e : x.events) tl.events.push_back(std::move(e));
    implicit.insert(x.implicit.begin(), x.implicit.end());
  }
  if (loss_rows != m.layout.total_label_rows)
    throw Error(fmt::format("step {}: the program computed the loss on {} token rows, the global batch has {}", out.step,
                            loss_rows, m.layout.total_label_rows))
        .hint("every micro-batch of every data-parallel rank must run the loss once in forward");
  out.loss = loss_sum / m.layout.total_label_rows;
  if (!std::isfinite(out.grad_norm)) {
    // Every rank saw the same all-reduced norm, so every rank left its state untouched. The
    // tensor is named where one of this process's ranks holds it.
    const bool all_local = static_cast<int>(m.local.size()) == world;
    out.nonfinite_where = all_local ? "no rank's own gradients hold a non-finite value"
                                    : "none of this process's ranks holds a non-finite gradient of its own";
    for (int r : m.local)
      if (!results[static_cast<size_t>(r)].nonfinite_tensor.empty()) {
        out.nonfinite_where =
            fmt::format("first non-finite gradient: rank {}, tensor {}", r, results[static_cast<size_t>(r)].nonfinite_tensor);
        break;
      }
    if (!m.options.skip_nonfinite_steps)
      throw Error(fmt::format("step {}: the gradient norm is {} (loss {}; {}); the update was not applied", out.step,
                              out.grad_norm, out.loss, out.nonfinite_where))
          .hint("lower the learning rate, or skip such steps as dynamic loss scaling does (--skip-nonfinite-steps)");
    out.skipped = true;
  } else if (!std::isfinite(out.loss)) {
    throw Error(fmt::format("step {}: the loss is {} with a finite gradient norm {}; the update was applied", out.step,
                            out.loss, out.grad_norm))
        .hint("check the training data and the learning rate");
  }
  out.step_time_s = tl.step_time_s;
  out.declared_peak_memory_bytes = declared_peak_memory(m.program);
  tl.source = fmt::format("measured {}", m.options.backend);
  tl.streams = m.program.streams;
  tl.peak_memory_bytes = out.peak_memory_bytes;
  tl.meta["backend"] = m.options.backend;
  tl.meta["device"] = m.first_local().backend().description();
  tl.meta["dtype"] = std::string(dtype_name(m.options.dtype));
  tl.meta["world_size"] = world;
  tl.meta["step"] = out.step;
  tl.meta["loss"] = out.loss;
  tl.meta["declared_peak_memory_bytes"] = out.declared_peak_memory_bytes;
  tl.meta["implicit_communication"] = std::vector<std::string>(implicit.begin(), implicit.end());
  return out;
}

void Runtime::collect_timeline(StepResult& result) {
  Impl& m = *impl_;
  if (m.all_local()) return;
  // Each local rank's events as JSON text; sizes go to everyone, the texts to rank 0.
  std::vector<std::string> texts;
  std::vector<std::vector<double>> sizes;
  for (int r : m.local) {
    plan::Timeline mine;
    for (const plan::TimelineEvent& e : result.timeline.events)
      if (e.rank == r) mine.events.push_back(e);
    texts.push_back(plan::to_json(mine)["events"].dump());
    sizes.push_back({static_cast<double>(texts.back().size())});
  }
  const std::vector<double> all_sizes = m.exchange(sizes, 1);
  const int64_t tag = --m.control_tag;
  auto words = [](double bytes) { return (static_cast<int64_t>(bytes) + 3) / 4; };
  std::vector<Tensor> buffers(static_cast<size_t>(m.world_size()));
  std::vector<std::shared_ptr<CommRequest>> reqs;
  const bool holds_rank0 = m.local.front() == 0;
  try {
    for (size_t i = 0; i < m.local.size(); ++i) {
      const int r = m.local[i];
      if (r == 0) continue;
      Tensor t = m.host->zeros(m.host->default_stream(), DType::i32, {words(all_sizes[static_cast<size_t>(r)])});
      std::memcpy(t.data(), texts[i].data(), texts[i].size());
      buffers[static_cast<size_t>(r)] = t;
      reqs.push_back(m.world->communicator(r).start_send(0, tag, t));
    }
    if (holds_rank0)
      for (int r = 1; r < m.world_size(); ++r) {
        Tensor t = m.host->empty(DType::i32, {words(all_sizes[static_cast<size_t>(r)])});
        reqs.push_back(m.world->communicator(0).start_recv(r, tag, t));
        buffers[static_cast<size_t>(r)] = t;
      }
    for (auto& q : reqs) q->wait();
  } catch (const std::exception& e) {
    m.world->communicator(m.local.front()).abort(e.what());
    throw;
  }
  if (!holds_rank0) return;
  plan::Timeline merged = result.timeline;
  merged.events.clear();
  for (const plan::TimelineEvent& e : result.timeline.events)
    if (e.rank == 0) merged.events.push_back(e);
  for (int r = 1; r < m.world_size(); ++r) {
    const Tensor& t = buffers[static_cast<size_t>(r)];
    const std::string text(static_cast<const char*>(t.data()), static_cast<size_t>(all_sizes[static_cast<size_t>(r)]));
    json::Json doc = plan::to_json(result.timeline);
    doc["events"] = json::Json::parse(text);
    plan::Timeline part = plan::timeline_from_json(doc, fmt::format("rank {}'s timeline", r));
    for (plan::TimelineEvent& e : part.events) merged.events.push_back(std::move(e));
  }
  std::stable_sort(merged.events.begin(), merged.events.end(),
                   [](const auto& a, const auto& b) { return a.rank != b.rank ? a.rank < b.rank : a.task < b.task; });
  result.timeline = std::move(merged);
}

std::vector<std::string> Runtime::parameter_names() const {
  std::vector<std::string> names;
  for (const auto& d : impl_->layout.params) names.push_back(d.name);
  return names;
}

Shape Runtime::parameter_shape(const std::string& name) const {
  return impl_->layout.params[static_cast<size_t>(impl_->def_index(name))].shape;
}

std::vector<double> Runtime::parameter(const std::string& name) const {
  impl_->require_all_local("parameter()");
  const bool sharded = impl_->layout.params_sharded;
  return impl_->assemble(name, [sharded](rt::RankState& r, const rt::Param& p) {
    if (sharded) {
      std::vector<double> v = r.download(p.shard);
      v.resize(static_cast<size_t>(p.own_len()));
      return v;
    }
    return r.download(p.value.view({p.numel}).flat(p.own_begin, p.own_end));
  });
}

std::vector<double> Runtime::gradient(const std::string& name) const {
  if (!impl_->options.keep_gradients)
    throw Error("runtime: gradients are not kept").hint("set RuntimeOptions::keep_gradients");
  impl_->require_all_local("gradient()");
  return impl_->assemble(name, [](rt::RankState&, const rt::Param& p) { return p.last_grad; });
}

std::string Runtime::check_replicas() const {
  const Impl& m = *impl_;
  m.require_all_local("check_replicas()");
  for (size_t def = 0; def < m.layout.params.size(); ++def) {
    const std::string& name = m.layout.params[def].name;
    const std::vector<double> full = parameter(name);
    for (const auto& rank : m.ranks)
      for (const rt::Param& p : rank->params()) {
        if (p.def != static_cast<int>(def)) continue;
        const std::vector<int64_t> global = p.slice.global_indices();
        const std::vector<double> values = rank->values_at_rest(p);
        const int64_t begin = m.layout.params_sharded ? p.own_begin : 0;
        const int64_t count = m.layout.params_sharded ? p.own_len() : p.numel;
        for (int64_t i = 0; i < count; ++i) {
          const double owner = full[static_cast<size_t>(global[static_cast<size_t>(begin + i)])];
          if (values[static_cast<size_t>(i)] != owner) {
            const plan::RankProgram& rp = m.program.ranks[static_cast<size_t>(rank->rank())];
            return fmt::format("{}{}: rank {} (dp {}, tp {}, pp {}) holds {} at local element {}, its owner {}", name,
                               p.tied_copy ? " (tied copy)" : "", rank->rank(), rp.dp_rank, rp.tp_rank, rp.pp_rank,
                               values[static_cast<size_t>(i)], begin + i, owner);
          }
        }
      }
  }
  return "";
}

// ---- checkpoints ------------------------------------------------------------------------------

namespace {

json::Json layout_json(const plan::Plan& p, DType dtype) {
  json::Json j;
  j["dp"] = p.dp;
  j["tp"] = p.tp;
  j["pp"] = p.pp;
  j["vp"] = p.vp;
  j["zero_stage"] = p.zero_stage;
  j["dp_algorithm"] = std::string(plan::dp_algorithm_name(p.dp_algorithm));
  json::Json stages = json::Json::array();
  for (const auto& s : p.stages) stages.push_back(json::Json::array({s.first_unit, s.last_unit}));
  j["stages"] = stages;
  j["dtype"] = std::string(dtype_name(dtype));
  return j;
}

}  // namespace

void Runtime::save_checkpoint(const std::string& dir) {
  Impl& m = *impl_;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the checkpoint folder: " + ec.message()).at(dir);
  // 1. Every process writes its ranks' shards; 2. all learn every rank's shard (its size and
  // hash, or that it failed); 3. rank 0's process commits the manifest; 4. all learn that it did.
  std::vector<checkpoint::ShardInfo> shards(static_cast<size_t>(m.world_size()));
  const std::vector<std::string> errors =
      m.on_local_ranks([&](int r) { shards[static_cast<size_t>(r)] = m.ranks[static_cast<size_t>(r)]->save(dir); });
  std::vector<std::vector<double>> written;
  for (int r : m.local) {
    const checkpoint::ShardInfo& s = shards[static_cast<size_t>(r)];
    // Doubles hold integers up to 2^53 exactly: the size, and the hash as two 32-bit halves.
    written.push_back({errors[static_cast<size_t>(r)].empty() ? 1.0 : 0.0, static_cast<double>(s.size_bytes),
                       static_cast<double>(s.xxh64 >> 32), static_cast<double>(s.xxh64 & 0xffffffffULL)});
  }
  const std::vector<double> all_written = m.exchange(written, 4);
  if (const std::string err = first_error(errors); !err.empty()) throw Error(err);
  for (int r = 0; r < m.world_size(); ++r) {
    const double* v = &all_written[4 * static_cast<size_t>(r)];
    if (v[0] == 0)
      throw Error(fmt::format("rank {} could not write its checkpoint shard (its process says why); the checkpoint is "
                              "not committed",
                              r))
          .at(dir);
    shards[static_cast<size_t>(r)] = {r, checkpoint::shard_file_name(r), static_cast<uint64_t>(v[1]),
                                      (static_cast<uint64_t>(v[2]) << 32) | static_cast<uint64_t>(v[3])};
  }
  std::string commit_error;
  if (m.local.front() == 0) {
    try {
      json::Json doc;
      doc["step"] = steps_done();
      doc["model"] = m.graph.spec().name;
      doc["model_parameters"] = m.graph.total_params();
      doc["seq_len"] = m.graph.spec().seq_len;
      doc["layout"] = layout_json(m.plan, m.options.dtype);
      doc["init_seed"] = m.options.seed;
      json::Json coords = json::Json::array();
      for (const auto& rp : m.program.ranks) {
        json::Json f;
        f["rank"] = rp.rank;
        f["dp_rank"] = rp.dp_rank;
        f["tp_rank"] = rp.tp_rank;
        f["pp_rank"] = rp.pp_rank;
        coords.push_back(std::move(f));
      }
      doc["ranks"] = std::move(coords);
      // The manifest goes last (atomically), so a folder with a manifest holds a whole checkpoint.
      checkpoint::commit_manifest(dir, std::move(doc), shards, m.world_size());
    } catch (const std::exception& e) {
      commit_error = e.what();
    }
  }
  std::vector<std::vector<double>> committed;
  for (int r : m.local) committed.push_back({r == 0 && commit_error.empty() ? 1.0 : 0.0});
  const std::vector<double> all_committed = m.exchange(committed, 1);
  if (!commit_error.empty()) throw Error(commit_error);
  if (all_committed[0] == 0)
    throw Error("the process of rank 0 could not commit the checkpoint manifest (its output says why)").at(dir);
}

void Runtime::load_checkpoint(const std::string& dir) {
  Impl& m = *impl_;
  const checkpoint::Manifest manifest = checkpoint::read_manifest(dir);
  json::Reader r(manifest.doc, manifest.path);
  if (manifest.world_size != m.world_size()) {
    const json::Json& l = manifest.doc.contains("layout") ? manifest.doc["layout"] : json::Json::object();
    throw r.field("world_size")
        .error(fmt::format("the checkpoint was written by a world of {} ranks (dp {} x tp {} x pp {}), this plan has {} "
                           "ranks (dp {} x tp {} x pp {}): resuming on another world size is not supported",
                           manifest.world_size, l.value("dp", 0), l.value("tp", 0), l.value("pp", 0), m.world_size(),
                           m.plan.dp, m.plan.tp, m.plan.pp))
        .hint("resume with the plan that wrote the checkpoint (the number of processes may differ; the ranks may not)");
  }
  const std::string model = r.field("model").as_string();
  if (model != m.graph.spec().name)
    throw r.field("model").error(fmt::format("the checkpoint is of model \"{}\", the plan trains \"{}\"", model,
                                             m.graph.spec().name))
        .hint("resume with the plan that wrote the checkpoint, or start without --resume");
  if (r.field("model_parameters").as_number() != m.graph.total_params())
    throw r.field("model_parameters")
        .error(fmt::format("the checkpoint's model has {} parameters, the plan's {}", r.field("model_parameters").as_number(),
                           m.graph.total_params()))
        .hint("resume with the plan that wrote the checkpoint, or start without --resume");
  if (r.field("seq_len").as_int() != m.graph.spec().seq_len)
    throw r.field("seq_len").error(fmt::format("the checkpoint was trained with seq_len {}, the plan uses {}",
                                               r.field("seq_len").as_int(), m.graph.spec().seq_len))
        .hint("resume with the sequence length the checkpoint was trained with, or start without --resume");
  const json::Json want = layout_json(m.plan, m.options.dtype);
  const json::Reader got = r.field("layout");
  if (!got.is_object())
    throw got.error("must be an object").hint("the manifest is damaged: resume from another checkpoint, or start without --resume");
  for (const auto& [key, value] : want.items())
    if (got.value().contains(key) ? got.value()[key] != value : true)
      throw got.error(fmt::format("the checkpoint was written with {} {}, the plan has {}", key,
                                  got.value().contains(key) ? got.value()[key].dump() : "nothing", value.dump()))
          .hint("a checkpoint resumes the same plan layout (dp, tp, pp, vp, ZeRO stage, stages, dtype)");
  got.entries();
  for (const char* key : {"format", "version", "world_size", "step", "init_seed", "ranks", "shards"}) r.field(key);
  r.finish();
  const std::string err = first_error(m.on_local_ranks([&](int rank) {
    const checkpoint::ShardInfo& info = manifest.shards[static_cast<size_t>(rank)];
    const checkpoint::Shard shard = checkpoint::read_shard(dir, info, manifest.world_size);
    m.ranks[static_cast<size_t>(rank)]->load(shard, (fs::path(dir) / info.file).string());
  }));
  if (!err.empty()) throw Error(err);
  for (int local : m.local) {
    const auto& rank = m.ranks[static_cast<size_t>(local)];
    if (rank->steps_done() != manifest.step)
      throw Error(fmt::format("rank {}'s shard holds step {}, the manifest step {}", rank->rank(), rank->steps_done(),
                              manifest.step))
          .at(manifest.path);
  }
}

}  // namespace trainplan::executor
