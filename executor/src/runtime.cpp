// Runtime (runtime.hpp): one thread per rank per step over the in-process communicator, the
// measured Timeline, parameters and gradients gathered from their owners, and checkpoints (one
// file per rank + a manifest).
#include "trainplan/executor/runtime.hpp"

#include <algorithm>
#include <cmath>
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


// Runs fn(rank) on one thread per rank; returns the first error (by rank) or "".
template <class Fn>
std::vector<std::string> on_all_ranks(int world, Fn fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
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

}  // namespace

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
  std::vector<std::unique_ptr<rt::RankState>> ranks;
  std::unique_ptr<InProcessWorld> world;
  std::string failed;  // the error of a failed step: the runtime cannot go on

  Impl(const plan::Plan& p, const models::ModelGraph& g, plan::StepProgram prog, RuntimeOptions o)
      : plan(p), graph(g), program(std::move(prog)), options(std::move(o)) {}

  int world_size() const { return program.world_size; }
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
    : impl_((check_executable(plan), std::make_unique<Impl>(plan, ctx.graph, std::move(program), std::move(options)))) {
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
  m.ranks.resize(static_cast<size_t>(m.world_size()));
  const std::string err = first_error(on_all_ranks(m.world_size(), [&](int r) {
    m.ranks[static_cast<size_t>(r)] = std::make_unique<rt::RankState>(m.layout, m.options, *m.data, r);
  }));
  if (!err.empty()) throw Error(err);
  m.world = std::make_unique<InProcessWorld>(m.world_size(), InProcessOptions{m.options.timeout_s});
}

Runtime::~Runtime() = default;

int64_t Runtime::steps_done() const { return impl_->ranks.front()->steps_done(); }
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
  const std::vector<std::string> errors = on_all_ranks(world, [&](int r) {
    // Ranks on a device backend (GPU memory) talk through host copies of their tensors.
    const std::unique_ptr<Communicator> staged =
        make_staging_communicator(m.world->communicator(r), m.ranks[static_cast<size_t>(r)]->backend());
    Communicator& comm = staged ? *staged : m.world->communicator(r);
    try {
      results[static_cast<size_t>(r)] = m.ranks[static_cast<size_t>(r)]->run_step(step, comm, t0);
    } catch (const std::exception& e) {
      comm.abort(e.what());
      throw;
    }
  });
  if (!first_error(errors).empty()) {
    // The rank that failed first aborted the others: its message is the cause.
    m.failed = m.world->aborted() ? m.world->abort_message() : first_error(errors);
    throw Error(fmt::format("step {} failed: {}", step + 1, m.failed));
  }

  StepResult out;
  out.step = step + 1;
  double loss_sum = 0;
  int64_t loss_rows = 0;
  std::set<std::string> implicit;
  plan::Timeline& tl = out.timeline;
  for (rt::RankStepResult& r : results) {
    loss_sum += r.loss_sum;
    loss_rows += r.loss_rows;
    out.peak_memory_bytes.push_back(r.peak_memory_bytes);
    std::sort(r.events.begin(), r.events.end(), [](const auto& a, const auto& b) { return a.task < b.task; });
    for (auto& e : r.events) {
      tl.step_time_s = std::max(tl.step_time_s, e.end_s);
      tl.events.push_back(std::move(e));
    }
    implicit.insert(r.implicit.begin(), r.implicit.end());
  }
  if (static_cast<double>(loss_rows) != m.layout.total_label_rows)
    throw Error(fmt::format("step {}: the program computed the loss on {} token rows, the global batch has {}", out.step,
                            loss_rows, m.layout.total_label_rows))
        .hint("every micro-batch of every data-parallel rank must run the loss once in forward");
  out.loss = loss_sum / m.layout.total_label_rows;
  out.grad_norm = results.front().grad_norm;
  if (results.front().nonfinite) {
    // Every rank saw the same all-reduced norm, so every rank left its state untouched.
    out.nonfinite_where = "no rank's own gradients hold a non-finite value";
    for (const rt::RankStepResult& r : results)
      if (!r.nonfinite_tensor.empty()) {
        out.nonfinite_where = fmt::format("first non-finite gradient: rank {}, tensor {}",
                                          static_cast<int>(&r - results.data()), r.nonfinite_tensor);
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
  auto be = m.ranks.front().get();
  tl.source = fmt::format("measured {}", m.options.backend);
  tl.streams = m.program.streams;
  tl.peak_memory_bytes = out.peak_memory_bytes;
  tl.meta["backend"] = m.options.backend;
  tl.meta["device"] = be->backend().description();
  tl.meta["dtype"] = std::string(dtype_name(m.options.dtype));
  tl.meta["world_size"] = world;
  tl.meta["step"] = out.step;
  tl.meta["loss"] = out.loss;
  tl.meta["declared_peak_memory_bytes"] = out.declared_peak_memory_bytes;
  tl.meta["implicit_communication"] = std::vector<std::string>(implicit.begin(), implicit.end());
  return out;
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
  return impl_->assemble(name, [](rt::RankState&, const rt::Param& p) { return p.last_grad; });
}

std::string Runtime::check_replicas() const {
  const Impl& m = *impl_;
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

void Runtime::save_checkpoint(const std::string& dir) const {
  const Impl& m = *impl_;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the checkpoint folder: " + ec.message()).at(dir);
  std::vector<checkpoint::ShardInfo> shards(static_cast<size_t>(m.world_size()));
  const std::string err = first_error(on_all_ranks(m.world_size(), [&](int r) {
    shards[static_cast<size_t>(r)] = m.ranks[static_cast<size_t>(r)]->save(dir);
  }));
  if (!err.empty()) throw Error(err);
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
  checkpoint::commit_manifest(dir, std::move(doc), std::move(shards), m.world_size());
}

void Runtime::load_checkpoint(const std::string& dir) {
  Impl& m = *impl_;
  const checkpoint::Manifest manifest = checkpoint::read_manifest(dir);
  json::Reader r(manifest.doc, manifest.path);
  if (manifest.world_size != m.world_size())
    throw r.field("world_size")
        .error(fmt::format("the checkpoint was written by {} ranks, the plan has {}", manifest.world_size, m.world_size()))
        .hint("a checkpoint resumes the same plan layout (dp, tp, pp, vp, ZeRO stage, stages, dtype)");
  const std::string model = r.field("model").as_string();
  if (model != m.graph.spec().name)
    throw r.field("model").error(fmt::format("the checkpoint is of model \"{}\", the plan trains \"{}\"", model,
                                             m.graph.spec().name));
  if (r.field("model_parameters").as_number() != m.graph.total_params())
    throw r.field("model_parameters")
        .error(fmt::format("the checkpoint's model has {} parameters, the plan's {}", r.field("model_parameters").as_number(),
                           m.graph.total_params()));
  if (r.field("seq_len").as_int() != m.graph.spec().seq_len)
    throw r.field("seq_len").error(fmt::format("the checkpoint was trained with seq_len {}, the plan uses {}",
                                               r.field("seq_len").as_int(), m.graph.spec().seq_len));
  const json::Json want = layout_json(m.plan, m.options.dtype);
  const json::Reader got = r.field("layout");
  if (!got.is_object()) throw got.error("must be an object");
  for (const auto& [key, value] : want.items())
    if (got.value().contains(key) ? got.value()[key] != value : true)
      throw got.error(fmt::format("the checkpoint was written with {} {}, the plan has {}", key,
                                  got.value().contains(key) ? got.value()[key].dump() : "nothing", value.dump()))
          .hint("a checkpoint resumes the same plan layout (dp, tp, pp, vp, ZeRO stage, stages, dtype)");
  got.entries();
  for (const char* key : {"format", "version", "world_size", "step", "init_seed", "ranks", "shards"}) r.field(key);
  r.finish();
  const std::string err = first_error(on_all_ranks(m.world_size(), [&](int rank) {
    const checkpoint::ShardInfo& info = manifest.shards[static_cast<size_t>(rank)];
    const checkpoint::Shard shard = checkpoint::read_shard(dir, info, manifest.world_size);
    m.ranks[static_cast<size_t>(rank)]->load(shard, (fs::path(dir) / info.file).string());
  }));
  if (!err.empty()) throw Error(err);
  for (const auto& rank : m.ranks)
    if (rank->steps_done() != manifest.step)
      throw Error(fmt::format("rank {}'s shard holds step {}, the manifest step {}", rank->rank(), rank->steps_done(),
                              manifest.step))
          .at(manifest.path);
}

}  // namespace trainplan::executor
