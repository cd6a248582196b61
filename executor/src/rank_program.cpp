// One rank's step: its program's tasks in issue order on their streams, honouring the
// dependencies. Compute and memory tasks run synchronously on the rank's thread; communication
// tasks start an asynchronous request and finish when it completes (their data is unpacked
// then). A task starts when its dependencies have finished and it is the next task of its
// stream (memory tasks queue on their own); among startable tasks the lowest id goes first.
// When nothing can start, the rank waits for any of its communications; when nothing is in
// flight either, the program is stuck (a dependency cycle) and the step fails naming the
// blocked tasks.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::executor::rt {

using plan::TaskKind;
using plan::TensorRole;

void RankState::fail(const plan::Task& t, const std::string& message) const {
  throw Error(fmt::format("rank {} task {} \"{}\": {}", rank_, t.id, t.label, message))
      .hint("the step program does not match what the executor can run; check plan::lower");
}

int64_t RankState::tag(int64_t comm_id) const {
  TP_ASSERT(comm_id >= 0 && comm_id < kTagStride);
  return step_ * kTagStride + comm_id;
}

CommGroup RankState::group(int index) const {
  const auto& groups = L_.program->groups;
  TP_ASSERT(index >= 0 && index < static_cast<int>(groups.size()));
  const plan::Group& g = groups[static_cast<size_t>(index)];
  return CommGroup{index, g.ranks, std::string(plan::comm_purpose_name(g.purpose))};
}

CommGroup RankState::world_group() const {
  CommGroup g{static_cast<int>(L_.program->groups.size()), {}, "world"};
  for (int r = 0; r < L_.program->world_size; ++r) g.ranks.push_back(r);
  return g;
}

CommGroup RankState::tp_group() const {
  CommGroup g{static_cast<int>(L_.program->groups.size()) + 1 + pp_rank_ * L_.dp + dp_rank_, {}, "tp"};
  for (int r = 0; r < L_.tp; ++r) g.ranks.push_back(L_.program->rank_of(dp_rank_, r, pp_rank_));
  return g;
}

void RankState::record(const plan::Task& t, double start_s, double end_s) {
  plan::TimelineEvent e;
  e.rank = rank_;
  e.task = t.id;
  e.stream = t.stream;
  e.kind = t.kind;
  e.start_s = start_s - t0_s_;
  e.end_s = end_s - t0_s_;
  e.bytes = t.kind == TaskKind::compute                                  ? t.mem_bytes
            : (t.kind == TaskKind::alloc || t.kind == TaskKind::free) ? t.alloc_bytes
                                                                         : t.bytes;
  e.flops = t.flops;
  e.label = t.label;
  e.phase = t.phase;
  e.purpose = t.purpose;
  result_.events.push_back(std::move(e));
}

namespace {

std::vector<int> task_ops(const plan::Task& t) {
  if (t.op >= 0) return {t.op};
  return t.ops;
}

}  // namespace

void RankState::init_step_state(int64_t step) {
  step_ = step;
  result_ = RankStepResult{};
  clip_ready_ = false;
  const auto M = static_cast<size_t>(L_.num_micro_batches);
  const size_t nops = L_.graph->ops().size();
  acts_.assign(M, std::vector<Act>(nops));
  batches_.assign(M, MicroBatchData{});
  for (Param& p : params_) {
    if (L_.zero_stage >= 2) p.grad = Tensor();
    else if (p.grad.defined()) backend_->fill(*stream_, p.grad, 0.0);
    p.reduced = Tensor();
    p.reduced_is_shard = false;
    p.grad_dirty = false;
    p.updated = false;
    p.tp_reduced = false;
    if (L_.params_sharded) {
      p.value = Tensor();
      p.value_generation = -1;
    }
  }
  const auto& tasks = program().tasks;
  // Activation lifetimes: an op's state is read by its own backward and its local consumers'
  // backwards; a received stage input also by the backward send of its gradient.
  for (size_t mb = 0; mb < M; ++mb)
    for (const models::Op& op : L_.graph->ops()) {
      Act& a = acts_[mb][static_cast<size_t>(op.id)];
      int consumers = 0;
      for (int c : L_.graph->consumers(op.id))
        if (local_op_[static_cast<size_t>(c)]) ++consumers;
      a.forward_users_left = consumers;
      a.users_left = consumers + (local_op_[static_cast<size_t>(op.id)] ? 1 : (consumers > 0 ? 1 : 0));
    }
  // Recomputation: an op with a recompute task drops its internals (norm statistics, attention
  // log-sum-exp) after its forward; its output also goes once its forward readers ran if the
  // recompute comes before the backward of every local reader (full recomputation), else the
  // output stays (selective: attention's output is the projection's saved input).
  {
    std::map<std::pair<int, int>, int> first_recompute, first_backward;
    for (const plan::Task& t : tasks) {
      if (t.kind != TaskKind::compute || t.micro_batch < 0 || t.micro_batch >= static_cast<int>(M)) continue;
      if (t.phase != plan::Phase::recompute && t.phase != plan::Phase::backward) continue;
      auto& first = t.phase == plan::Phase::recompute ? first_recompute : first_backward;
      for (int op : task_ops(t)) first.emplace(std::make_pair(t.micro_batch, op), t.id);
    }
    for (const auto& [key, rec] : first_recompute) {
      const auto [mb, op] = key;
      if (op < 0 || op >= static_cast<int>(nops)) continue;
      Act& a = acts_[static_cast<size_t>(mb)][static_cast<size_t>(op)];
      a.recomputed = true;
      a.drop_out = L_.op(op).kind != models::OpKind::loss;
      for (int c : L_.graph->consumers(op)) {
        if (!local_op_[static_cast<size_t>(c)]) continue;
        auto it = first_backward.find({mb, c});
        if (it == first_backward.end() || it->second < rec) a.drop_out = false;
      }
    }
  }

  // ZeRO-3: a use of a parameter reads the copy of the newest gather among its (transitive)
  // dependencies (or, with none, of the newest gather issued before it); that copy is released
  // after the last use that reads it, unless a newer gather has replaced it by then.
  release_after_task_.assign(tasks.size(), {});
  if (L_.params_sharded) {
    const size_t P = params_.size();
    std::vector<std::vector<int>> newest(tasks.size());
    std::vector<int> issued(P, -1);
    std::map<std::pair<size_t, int>, int> last_use;  // (param, gather task) -> last use
    for (const plan::Task& t : tasks) {
      std::vector<int>& g = newest[static_cast<size_t>(t.id)];
      g.assign(P, -1);
      for (int d : t.deps)
        if (d >= 0 && d < t.id)
          for (size_t p = 0; p < P; ++p) g[p] = std::max(g[p], newest[static_cast<size_t>(d)][p]);
      if (t.kind == TaskKind::collective && t.role == TensorRole::params) {
        for (Param* q : bucket_params(t, false)) {
          const auto i = static_cast<size_t>(q - params_.data());
          g[i] = issued[i] = t.id;
        }
      } else if (t.kind == TaskKind::compute && t.phase != plan::Phase::optimizer && t.phase != plan::Phase::none) {
        for (int op : task_ops(t)) {
          if (op < 0 || op >= static_cast<int>(nops) || !local_op_[static_cast<size_t>(op)]) continue;
          for (bool bias : {false, true})
            if (Param* q = find_param(op, bias)) {
              const auto i = static_cast<size_t>(q - params_.data());
              const int gen = g[i] >= 0 ? g[i] : issued[i];
              if (gen >= 0) last_use[{i, gen}] = t.id;
            }
        }
      }
    }
    for (const auto& [key, use] : last_use)
      release_after_task_[static_cast<size_t>(use)].push_back({static_cast<int>(key.first), key.second});
  }
  backend_->reset_peak();
}

RankStepResult RankState::run_step(int64_t step, Communicator& comm, double t0_s) {
  comm_ = &comm;
  t0_s_ = t0_s;
  init_step_state(step);
  // The reference of the compute tasks' event times: the stream is idle here, so the event
  // completes at once, at host time ref_host_s.
  backend_->synchronize(*stream_);
  timed_.clear();
  std::unique_ptr<Event> ref = backend_->create_event();
  backend_->record(*ref, *stream_);
  backend_->synchronize(*ref);
  const double ref_host_s = Backend::now_s();
  const auto& tasks = program().tasks;
  const size_t n = tasks.size();
  std::vector<int> deps_left(n, 0);
  std::vector<std::vector<int>> dependents(n);
  int max_stream = 0;
  for (const plan::Task& t : tasks) {
    TP_ASSERT(t.id == static_cast<int>(&t - tasks.data()));
    for (int d : t.deps) {
      if (d < 0 || d >= static_cast<int>(n) || d == t.id) fail(t, fmt::format("depends on task {}, not a task before it", d));
      ++deps_left[static_cast<size_t>(t.id)];
      dependents[static_cast<size_t>(d)].push_back(t.id);
    }
    if (t.stream < 0) fail(t, "has a negative stream");
    max_stream = std::max(max_stream, t.stream);
  }
  // Memory tasks never hold back the tasks after them on their stream (plan/step_program.hpp):
  // they queue, in issue order, on a queue of their own (nothing depends on them).
  std::vector<std::vector<int>> stream_tasks(static_cast<size_t>(max_stream) + 2);
  const auto queue_of = [&](const plan::Task& t) {
    return t.kind == TaskKind::alloc || t.kind == TaskKind::free ? static_cast<size_t>(max_stream) + 1 : static_cast<size_t>(t.stream);
  };
  for (const plan::Task& t : tasks) stream_tasks[queue_of(t)].push_back(t.id);
  std::vector<size_t> head(stream_tasks.size(), 0);
  size_t done = 0;
  auto finish = [&](int id) {
    ++done;
    for (int d : dependents[static_cast<size_t>(id)]) --deps_left[static_cast<size_t>(d)];
  };
  std::vector<Pending> pending;

  while (done < n) {
    bool progressed = false;
    while (true) {
      int best = -1;
      size_t best_stream = 0;
      for (size_t s = 0; s < stream_tasks.size(); ++s) {
        if (head[s] >= stream_tasks[s].size()) continue;
        const int id = stream_tasks[s][head[s]];
        if (deps_left[static_cast<size_t>(id)] == 0 && (best < 0 || id < best)) {
          best = id;
          best_stream = s;
        }
      }
      if (best < 0) break;
      ++head[best_stream];
      progressed = true;
      const size_t before = pending.size();
      start_task(best, pending);
      if (pending.size() == before) finish(best);
    }
    for (size_t i = 0; i < pending.size();) {
      if (!pending[i].request->test()) {
        ++i;
        continue;
      }
      Pending p = std::move(pending[i]);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      if (p.on_complete) p.on_complete();
      record(tasks[static_cast<size_t>(p.task)], p.start_s, p.request->completed_at_s());
      finish(p.task);
      progressed = true;
    }
    if (done == n || progressed) continue;
    if (pending.empty()) {
      std::vector<std::string> blocked;
      for (size_t s = 0; s < stream_tasks.size(); ++s) {
        if (head[s] >= stream_tasks[s].size()) continue;
        const plan::Task& t = tasks[static_cast<size_t>(stream_tasks[s][head[s]])];
        std::vector<std::string> waits;
        for (int d : t.deps) {
          const plan::Task& dt = tasks[static_cast<size_t>(d)];
          const auto& st = stream_tasks[queue_of(dt)];
          const auto pos = static_cast<size_t>(std::find(st.begin(), st.end(), d) - st.begin());
          if (pos >= head[queue_of(dt)]) waits.push_back(fmt::format("{} \"{}\"", d, dt.label));
        }
        blocked.push_back(fmt::format("task {} \"{}\" waits for {}", t.id, t.label, join(waits, ", ")));
      }
      throw Error(fmt::format("rank {}: the step program is stuck (dependency cycle): {}", rank_, join(blocked, "; ")))
          .hint("a task may only depend on tasks that can start before it; check plan::check_program");
    }
    std::vector<std::shared_ptr<CommRequest>> requests;
    for (const Pending& p : pending) requests.push_back(p.request);
    if (!comm.wait_any(requests, comm.timeout_s())) {
      std::vector<std::string> what;
      for (const Pending& p : pending) what.push_back(p.request->describe());
      // wait() on the first gives the detailed message (which ranks have not arrived).
      pending.front().request->wait();
      throw Error(fmt::format("rank {}: no communication completed within {} s: {}", rank_, comm.timeout_s(),
                              join(what, "; ")));
    }
  }
  // Parameters the program's optimizer tasks did not name are updated at the end.
  bool missing = false;
  for (const Param& p : params_) missing = missing || !p.updated;
  if (missing) optimizer({});
  if (L_.params_sharded)
    for (Param& p : params_) p.value = Tensor();
  acts_.clear();
  batches_.clear();
  // The step's one wait for the device: then every compute task's interval from its events.
  backend_->synchronize(*stream_);
  for (const TimedTask& x : timed_)
    record(program().tasks[static_cast<size_t>(x.task)], ref_host_s + backend_->elapsed_s(*ref, *x.start),
           ref_host_s + backend_->elapsed_s(*ref, *x.end));
  timed_.clear();
  // A non-finite gradient norm leaves parameters and optimizer state as they were. Skipped
  // (RuntimeOptions::skip_nonfinite_steps), the step still consumes its batch; otherwise the
  // step did not happen and Runtime::step() reports it.
  if (!result_.nonfinite || options_.skip_nonfinite_steps) ++steps_done_;
  if (!result_.nonfinite) ++updates_done_;
  result_.peak_memory_bytes = static_cast<double>(backend_->peak_allocated_bytes());
  return std::move(result_);
}

void RankState::start_task(int id, std::vector<Pending>& pending) {
  const plan::Task& t = program().tasks[static_cast<size_t>(id)];
  const int M = static_cast<int>(L_.num_micro_batches);
  switch (t.kind) {
    case TaskKind::alloc:
    case TaskKind::free: {
      const double now = Backend::now_s();
      record(t, now, now);
      return;
    }
    case TaskKind::send:
    case TaskKind::recv: start_p2p(t, pending); return;
    case TaskKind::collective: start_collective(t, pending); return;
    case TaskKind::compute: break;
  }
  // On a device, compute is timed by events on the stream, read once at the end of the step:
  // the host never waits for the device between tasks. The CPU runs it now: its host clock.
  const bool by_events = !backend_->runs_when_queued();
  const double start = Backend::now_s();
  TimedTask timed{id, nullptr, nullptr};
  if (by_events) {
    timed.start = backend_->create_event();
    timed.end = backend_->create_event();
    backend_->record(*timed.start, *stream_);
  }
  const std::vector<int> ops = task_ops(t);
  auto check_op = [&](int op) {
    if (op < 0 || op >= static_cast<int>(local_op_.size()) || !local_op_[static_cast<size_t>(op)])
      fail(t, fmt::format("computes op {}, which is not on this rank's pipeline stage", op));
  };
  auto check_mb = [&] {
    if (t.micro_batch < 0 || t.micro_batch >= M)
      fail(t, fmt::format("has micro-batch {}, outside [0, {})", t.micro_batch, M));
  };
  switch (t.phase) {
    case plan::Phase::forward:
    case plan::Phase::recompute:
      check_mb();
      for (int op : ops) {
        check_op(op);
        forward(t.micro_batch, op, t.phase == plan::Phase::recompute);
      }
      break;
    case plan::Phase::backward:
      check_mb();
      for (int op : ops) {
        check_op(op);
        backward(t.micro_batch, op);
      }
      break;
    case plan::Phase::optimizer: optimizer(ops); break;
    case plan::Phase::none: break;  // bookkeeping the program times but the executor has nothing to do for
  }
  for (const auto& [p, generation] : release_after_task_[static_cast<size_t>(id)]) {
    Param& q = params_[static_cast<size_t>(p)];
    if (q.value_generation == generation) q.value = Tensor();
  }
  if (!by_events) {
    record(t, start, Backend::now_s());
    return;
  }
  backend_->record(*timed.end, *stream_);
  timed_.push_back(std::move(timed));
}

void RankState::start_collective(const plan::Task& t, std::vector<Pending>& pending) {
  if (t.group < 0 || t.group >= static_cast<int>(L_.program->groups.size()))
    fail(t, fmt::format("names group {}, not a group of the program", t.group));
  const CommGroup g = group(t.group);
  if (g.index_of(rank_) < 0) fail(t, fmt::format("runs on {}, which does not contain this rank", g.describe()));
  const int M = static_cast<int>(L_.num_micro_batches);
  const double start = Backend::now_s();
  const int64_t tg = tag(t.comm_id);
  auto push = [&](std::shared_ptr<CommRequest> req, std::function<void()> on_complete) {
    pending.push_back(Pending{t.id, start, std::move(req), std::move(on_complete)});
  };
  auto need_mb_op = [&] {
    if (t.micro_batch < 0 || t.micro_batch >= M) fail(t, fmt::format("has micro-batch {}, outside [0, {})", t.micro_batch, M));
    if (t.op < 0 || t.op >= static_cast<int>(local_op_.size()) || !local_op_[static_cast<size_t>(t.op)])
      fail(t, "a tensor-parallel collective must name an op of this rank");
  };
  auto gathered_shape = [&](const Tensor& in) { return Shape{in.rows() * g.size(), in.cols()}; };
  auto scattered_shape = [&](const Tensor& in) {
    if (in.rows() % g.size() != 0)
      fail(t, fmt::format("reduce-scatters {} rows over {} ranks", in.rows(), g.size()));
    return Shape{in.rows() / g.size(), in.cols()};
  };
  const auto kind = t.collective;
  using plan::CollectiveKind;
  if (t.purpose == plan::CommPurpose::pp) {  // the pipeline scatter-gather's all-gather
    start_pp_gather(t, g, pending);
    return;
  }
  if (t.purpose == plan::CommPurpose::ep) return start_moe_all_to_all(t);  // MoE tokens (rank_moe.cpp)
  if (t.role == TensorRole::grads && t.ops.empty() && t.op < 0 && g.size() == L_.program->world_size) {
    // The gradient-norm all-reduce: the squared norms of the ranks' disjoint gradient pieces.
    if (kind != CollectiveKind::all_reduce) fail(t, "the gradient norm is all-reduced");
    Tensor norm_sq = local_grad_norm_sq();
    push(comm_->start_all_reduce(g, tg, norm_sq, ReduceOp::sum), [this, norm_sq] { finish_clip(norm_sq); });
    return;
  }
  switch (t.role) {
    case TensorRole::output: {  // tp: the partial output of a row linear / vocab embedding
      need_mb_op();
      Act& A = act(t.micro_batch, t.op);
      if (!A.out.defined() || !A.partial)
        fail(t, fmt::format("reduces the output of \"{}\", which is not a pending partial sum", L_.op(t.op).name));
      if (kind == CollectiveKind::all_reduce) {
        push(comm_->start_all_reduce(g, tg, A.out, ReduceOp::sum), [&A] { A.partial = false; });
      } else if (kind == CollectiveKind::reduce_scatter) {
        Tensor out = backend_->empty(options_.dtype, scattered_shape(A.out));
        push(comm_->start_reduce_scatter(g, tg, out.view({out.numel()}), A.out.view({A.out.numel()}), ReduceOp::sum),
             [&A, out] {
               A.out = out;
               A.partial = false;
             });
      } else {
        fail(t, "an op output is all-reduced or reduce-scattered");
      }
      return;
    }
    case TensorRole::input: {  // sequence parallel: gather a column group's input rows
      need_mb_op();
      if (kind != CollectiveKind::all_gather) fail(t, "an op input is all-gathered");
      const models::Op& o = L_.op(t.op);
      if (o.inputs.empty()) fail(t, "gathers the input of an op that reads the batch");
      const int producer = o.inputs[0];
      const Tensor in = input_of(t.micro_batch, t.op, producer);
      Tensor out = backend_->empty(options_.dtype, gathered_shape(in));
      Act& P = act(t.micro_batch, producer);
      push(comm_->start_all_gather(g, tg, out.view({out.numel()}), in.view({in.numel()})), [&P, out] { P.gathered = out; });
      return;
    }
    case TensorRole::grad_output: {  // sequence parallel: gather an op's output gradient rows
      need_mb_op();
      if (kind != CollectiveKind::all_gather) fail(t, "an output gradient is all-gathered");
      Act& A = act(t.micro_batch, t.op);
      if (!A.dout.defined()) fail(t, fmt::format("gathers the output gradient of \"{}\" before it exists", L_.op(t.op).name));
      Tensor out = backend_->empty(options_.dtype, gathered_shape(A.dout));
      push(comm_->start_all_gather(g, tg, out.view({out.numel()}), A.dout.view({A.dout.numel()})),
           [&A, out] { A.dout_gathered = out; });
      return;
    }
    case TensorRole::grad_input: {  // tp: a column group's partial input gradient
      need_mb_op();
      const models::Op& o = L_.op(t.op);
      if (o.inputs.empty()) fail(t, "reduces the input gradient of an op that reads the batch");
      Act& P = act(t.micro_batch, o.inputs[0]);
      if (!P.dpartial.defined())
        fail(t, fmt::format("reduces the input gradient of \"{}\" before its backward produced it", o.name));
      Tensor in = P.dpartial;
      if (kind == CollectiveKind::all_reduce) {
        push(comm_->start_all_reduce(g, tg, in, ReduceOp::sum), [this, &P, in] {
          add_grad(P.dout, in);
          P.dpartial = Tensor();
        });
      } else if (kind == CollectiveKind::reduce_scatter) {
        Tensor out = backend_->empty(options_.dtype, scattered_shape(in));
        push(comm_->start_reduce_scatter(g, tg, out.view({out.numel()}), in.view({in.numel()}), ReduceOp::sum),
             [this, &P, out] {
               add_grad(P.dout, out);
               P.dpartial = Tensor();
             });
      } else {
        fail(t, "an input gradient is all-reduced or reduce-scattered");
      }
      return;
    }
    case TensorRole::loss_stats: {  // vocab-parallel cross-entropy: max, then [sum_exp | target]
      need_mb_op();
      if (kind != CollectiveKind::all_reduce) fail(t, "loss statistics are all-reduced");
      const int id = t.op;
      Act& A = act(t.micro_batch, id);
      if (!A.ce_max.defined()) fail(t, "reduces loss statistics before the loss forward");
      const int mb = t.micro_batch;
      if (A.loss_stats_seen == 0) {
        A.loss_stats_seen = 1;
        push(comm_->start_all_reduce(g, tg, A.ce_max, ReduceOp::max), [this, &A, mb, id] {
          const models::Op& o = L_.op(id);
          const Tensor& logits = input_of(mb, id, o.inputs[0]);
          const int64_t N = logits.rows();
          backend_->ce_local_sum_exp(*stream_, A.ce_stats.flat(0, N), logits, A.ce_max);
          backend_->ce_local_target_logit(*stream_, A.ce_stats.flat(N, 2 * N), logits, batch(mb).labels,
                                          L_.vocab_range(L_.op(o.inputs[0]).n, tp_rank_).first);
          A.loss_stats_seen = 2;
        });
      } else if (A.loss_stats_seen == 2) {
        A.loss_stats_seen = 3;
        push(comm_->start_all_reduce(g, tg, A.ce_stats, ReduceOp::sum), [this, &A, mb, id] {
          const int64_t N = A.ce_max.numel();
          backend_->ce_combine(*stream_, A.losses, A.ce_max, A.ce_stats.flat(0, N), A.ce_stats.flat(N, 2 * N));
          finish_loss(mb, id);
          A.loss_stats_seen = 4;
          if (A.release_after_stats) {
            A.release_after_stats = false;
            after_forward(mb, id);
          }
        });
      } else {
        fail(t, "a third loss-statistics all-reduce, or the second before the first completed");
      }
      return;
    }
    case TensorRole::grads:
    case TensorRole::params: start_bucket(t, g, pending); return;
    case TensorRole::norm_stats: fail(t, "synchronized batch norm is not executed: the runtime has no batch-norm kernel"); return;
    case TensorRole::none:
      if (kind == CollectiveKind::barrier) {
        push(comm_->start_barrier(g, tg), nullptr);
        return;
      }
      fail(t, "a collective with role none: the executor cannot tell which tensor it moves");
  }
}

// A ZeRO-3 / parameter-server bucket: this rank's parameter shards all-gathered over the
// data-parallel group into the full parameters.
void RankState::start_param_gather(const plan::Task& t, const CommGroup& g, const std::vector<Param*>& params, double start,
                                   std::vector<Pending>& pending) {
  const int64_t tg = tag(t.comm_id);
  const DType dt = options_.dtype;
  const int n = g.size();
  using plan::CollectiveKind;
  if (!L_.sharded) fail(t, "a parameter all-gather in a plan without ZeRO or a parameter server");
  if (t.collective != CollectiveKind::all_gather) fail(t, "parameters are all-gathered");
  if (g.index_of(rank_) != dp_rank_) fail(t, "the data-parallel group must list its ranks in dp order");
  int64_t K = 0;
  for (Param* p : params) K += p->chunk;
  Tensor in = backend_->zeros(*stream_, dt, {K});
  int64_t off = 0;
  for (Param* p : params) {
    if (p->own_len() > 0) {
      Tensor src = L_.params_sharded ? p->shard.flat(0, p->own_len()) : p->value.view({p->numel}).flat(p->own_begin, p->own_end);
      backend_->copy(*stream_, in.flat(off, off + p->own_len()), src);
    }
    off += p->chunk;
  }
  Tensor out = backend_->empty(dt, {K * n});
  const int task_id = t.id;
  pending.push_back(Pending{t.id, start, comm_->start_all_gather(g, tg, out, in), [this, params, out, K, n, dt, task_id] {
                              int64_t at = 0;
                              for (Param* p : params) {
                                Tensor dst = L_.params_sharded ? backend_->empty(dt, p->local_shape) : p->value;
                                Tensor flat = dst.view({p->numel});
                                for (int i = 0; i < n; ++i) {
                                  const int64_t b = std::min(p->numel, i * p->chunk), e = std::min(p->numel, (i + 1) * p->chunk);
                                  if (e > b) backend_->copy(*stream_, flat.flat(b, e), out.flat(i * K + at, i * K + at + (e - b)));
                                }
                                if (L_.params_sharded) {
                                  p->value = dst;
                                  p->value_generation = task_id;
                                }
                                at += p->chunk;
                              }
                            }});
}

void RankState::start_bucket(const plan::Task& t, const CommGroup& g, std::vector<Pending>& pending) {
  // Which group: the data-parallel replicas of this rank, its tp group, or another (the tied
  // embedding's first and last stage).
  const auto& ranks = L_.program->ranks;
  bool dp_group = g.size() == L_.dp, tp_group = g.size() == L_.tp;
  for (int r : g.ranks) {
    const plan::RankProgram& o = ranks[static_cast<size_t>(r)];
    dp_group = dp_group && o.pp_rank == pp_rank_ && o.tp_rank == tp_rank_;
    tp_group = tp_group && o.pp_rank == pp_rank_ && o.dp_rank == dp_rank_;
  }
  if (L_.dp == 1 && g.size() == 1) tp_group = false;
  const double start = Backend::now_s();
  const int64_t tg = tag(t.comm_id);
  std::vector<Param*> params = bucket_params(t, dp_group);
  // Routed experts split over ep: their buckets run on the expert-data-parallel group (the
  // ranks holding the same experts), never on the whole data-parallel group.
  const auto expert = [&](const Param* p) { return L_.expert_sharded(p->def); };
  const bool expert_group = L_.ep > 1 && !params.empty() && std::all_of(params.begin(), params.end(), expert) &&
                            g.ranks == expert_dp_group().ranks;
  if (dp_group && std::any_of(params.begin(), params.end(), expert))
    fail(t, "reduces routed experts' gradients over the whole data-parallel group; they go over the expert-dp group");
  if (params.empty() && !dp_group && !tp_group)
    fail(t, "moves no parameter of this rank");
  const DType dt = options_.dtype;
  const int n = g.size();
  using plan::CollectiveKind;

  if (t.role == TensorRole::params) {
    if (!dp_group) fail(t, "parameters are all-gathered over the data-parallel group");
    start_param_gather(t, g, params, start, pending);
    return;
  }

  // Gradients.
  if (dp_group || expert_group) {
    if (dp_group && g.index_of(rank_) != dp_rank_) fail(t, "the data-parallel group must list its ranks in dp order");
    auto clear_local = [&](Param* p) {
      if (L_.zero_stage >= 2)
        p->grad = Tensor();
      else if (p->grad.defined())
        backend_->fill(*stream_, p->grad, 0.0);
      p->grad_dirty = false;
    };
    if (t.collective == CollectiveKind::all_reduce) {
      int64_t K = 0;
      for (Param* p : params) K += p->numel;
      Tensor buf = backend_->zeros(*stream_, dt, {K});
      int64_t off = 0;
      for (Param* p : params) {
        if (p->grad.defined()) backend_->copy(*stream_, buf.flat(off, off + p->numel), p->grad.view({p->numel}));
        off += p->numel;
        clear_local(p);
      }
      pending.push_back(Pending{t.id, start, comm_->start_all_reduce(g, tg, buf, ReduceOp::sum), [this, params, buf] {
                                  int64_t at = 0;
                                  for (Param* p : params) {
                                    Tensor part = buf.flat(at, at + p->numel);
                                    if (p->reduced.defined() && p->reduced_is_shard)
                                      throw Error(fmt::format("rank {}: a gradient all-reduce after a reduce-scatter of the "
                                                              "same parameter",
                                                              rank_));
                                    add_grad(p->reduced, part);
                                    p->reduced_is_shard = false;
                                    at += p->numel;
                                  }
                                }});
      return;
    }
    if (t.collective == CollectiveKind::reduce_scatter) {
      int64_t K = 0;
      for (Param* p : params) K += p->chunk;
      Tensor in = backend_->zeros(*stream_, dt, {K * n});
      int64_t off = 0;
      for (Param* p : params) {
        if (p->grad.defined()) {
          Tensor flat = p->grad.view({p->numel});
          for (int i = 0; i < n; ++i) {
            const int64_t b = std::min(p->numel, i * p->chunk), e = std::min(p->numel, (i + 1) * p->chunk);
            if (e > b) backend_->copy(*stream_, in.flat(i * K + off, i * K + off + (e - b)), flat.flat(b, e));
          }
        }
        off += p->chunk;
        clear_local(p);
      }
      Tensor out = backend_->empty(dt, {K});
      pending.push_back(Pending{t.id, start, comm_->start_reduce_scatter(g, tg, out, in, ReduceOp::sum), [this, params, out] {
                                  int64_t at = 0;
                                  for (Param* p : params) {
                                    if (p->reduced.defined() && !p->reduced_is_shard)
                                      throw Error(fmt::format("rank {}: a gradient reduce-scatter after an all-reduce of the "
                                                              "same parameter",
                                                              rank_));
                                    add_grad(p->reduced, out.flat(at, at + p->chunk));
                                    p->reduced_is_shard = true;
                                    at += p->chunk;
                                  }
                                }});
      return;
    }
    fail(t, "data-parallel gradients are all-reduced or reduce-scattered");
  }
  // The tied embedding's two copies, or tp-replicated gradients: sum in place the gradient not
  // yet reduced over data parallel when there is one (ZeRO-2/3 reduce every micro-batch's, so
  // earlier micro-batches' may be reduced already), else the reduced one.
  if (t.collective != CollectiveKind::all_reduce) fail(t, "gradients outside the data-parallel group are all-reduced");
  std::vector<Tensor> targets;
  int64_t K = 0;
  for (Param* p : params) {
    const bool local = p->grad_dirty || !p->reduced.defined();
    if (local && !p->grad.defined()) p->grad = backend_->zeros(*stream_, dt, p->local_shape);
    Tensor target = local ? p->grad.view({p->numel}) : p->reduced;
    if (tp_group) p->tp_reduced = true;
    K += target.numel();
    targets.push_back(target);
  }
  Tensor buf = backend_->empty(dt, {std::max<int64_t>(K, 1)});
  int64_t off = 0;
  for (const Tensor& target : targets) {
    backend_->copy(*stream_, buf.flat(off, off + target.numel()), target);
    off += target.numel();
  }
  if (K == 0) backend_->fill(*stream_, buf, 0.0);
  pending.push_back(Pending{t.id, start, comm_->start_all_reduce(g, tg, buf, ReduceOp::sum), [this, targets, buf] {
                              int64_t at = 0;
                              for (const Tensor& target : targets) {
                                backend_->copy(*stream_, target, buf.flat(at, at + target.numel()));
                                at += target.numel();
                              }
                            }});
}

int RankState::pp_boundary_op(const plan::Task& t, bool forward) const {
  const int num_units = static_cast<int>(L_.graph->units().size());
  if (t.unit < 0 || t.unit >= num_units) fail(t, fmt::format("names unit {}, not a unit of the model", t.unit));
  // Forward: the output of `unit`; backward: the gradient w.r.t. the input of `unit`, which is
  // the output of the unit before it.
  if (!forward && t.unit == 0) fail(t, "unit 0 has no input gradient");
  return forward ? L_.graph->unit(t.unit).output_op : L_.graph->unit(t.unit - 1).output_op;
}

Shape RankState::pp_shape(int y) const {
  return {L_.output_is_row_slice(y) ? L_.rows_local() : L_.rows_full(), L_.out_cols_local(y, tp_rank_)};
}

namespace {

bool pp_forward(const plan::Task& t) {
  return t.role == TensorRole::output || (t.role == TensorRole::none && t.phase == plan::Phase::forward);
}
bool pp_backward(const plan::Task& t) {
  return t.role == TensorRole::grad_input || (t.role == TensorRole::none && t.phase == plan::Phase::backward);
}

}  // namespace

// Pipeline messages. Without sequence parallelism and with tp > 1 each tp rank sends and
// receives 1/tp of the flattened tensor (Megatron's scatter-gather) and the receiving tp group
// all-gathers it (start_pp_gather); under sequence parallelism the tensor is already a row
// slice and moves whole.
void RankState::start_p2p(const plan::Task& t, std::vector<Pending>& pending) {
  const int M = static_cast<int>(L_.num_micro_batches);
  if (t.micro_batch < 0 || t.micro_batch >= M) fail(t, fmt::format("has micro-batch {}, outside [0, {})", t.micro_batch, M));
  if (t.peer < 0 || t.peer >= L_.program->world_size) fail(t, fmt::format("has peer {}", t.peer));
  const bool forward = pp_forward(t);
  if (!forward && !pp_backward(t)) fail(t, "a pipeline message carries an output (forward) or an input gradient (backward)");
  const int mb = t.micro_batch;
  const double start = Backend::now_s();
  const int64_t tg = tag(t.comm_id);
  const int y = pp_boundary_op(t, forward);
  Act& A = act(mb, y);
  const bool scatter = L_.tp > 1 && !L_.sp;
  const Shape shape = pp_shape(y);
  const int64_t numel = shape_numel(shape);
  if (scatter && numel % L_.tp != 0) fail(t, fmt::format("scatters {} elements over tp {}", numel, L_.tp));
  const int64_t piece = scatter ? numel / L_.tp : numel;
  if (t.kind == TaskKind::send) {
    Tensor data = forward ? input_of(mb, y, y) : A.dout;
    if (!data.defined())
      fail(t, fmt::format("sends the gradient of \"{}\" before the backward produced it", L_.op(y).name));
    if (data.numel() != numel)
      fail(t, fmt::format("sends {} elements of \"{}\", expected {}", data.numel(), L_.op(y).name, numel));
    if (scatter) data = data.view({numel}).flat(tp_rank_ * piece, (tp_rank_ + 1) * piece);
    pending.push_back(Pending{t.id, start, comm_->start_send(t.peer, tg, data), nullptr});
    if (!forward && --A.users_left == 0) A = Act{};  // the stage input's state is no longer needed
    return;
  }
  Tensor buf = backend_->empty(options_.dtype, scatter ? Shape{piece} : shape);
  std::function<void()> done;
  if (scatter)
    done = [&A, buf] { A.pp_chunk = buf; };
  else if (forward)
    done = [&A, buf] {
      A.out = buf;
      A.partial = false;
    };
  else
    done = [this, &A, buf] { add_grad(A.dout, buf); };
  pending.push_back(Pending{t.id, start, comm_->start_recv(t.peer, tg, buf), std::move(done)});
}

void RankState::start_pp_gather(const plan::Task& t, const CommGroup& g, std::vector<Pending>& pending) {
  const int M = static_cast<int>(L_.num_micro_batches);
  if (t.micro_batch < 0 || t.micro_batch >= M) fail(t, fmt::format("has micro-batch {}, outside [0, {})", t.micro_batch, M));
  if (t.collective != plan::CollectiveKind::all_gather) fail(t, "a pipeline message is all-gathered over tp");
  const bool forward = pp_forward(t);
  if (!forward && !pp_backward(t)) fail(t, "a pipeline gather carries an output (forward) or an input gradient (backward)");
  const int y = pp_boundary_op(t, forward);
  Act& A = act(t.micro_batch, y);
  if (!A.pp_chunk.defined()) fail(t, "gathers a pipeline message before its recv completed");
  Tensor out = backend_->empty(options_.dtype, pp_shape(y));
  Tensor in = A.pp_chunk;
  std::function<void()> done;
  if (forward)
    done = [&A, out] {
      A.out = out;
      A.partial = false;
      A.pp_chunk = Tensor();
    };
  else
    done = [this, &A, out] {
      add_grad(A.dout, out);
      A.pp_chunk = Tensor();
    };
  pending.push_back(
      Pending{t.id, Backend::now_s(), comm_->start_all_gather(g, tag(t.comm_id), out.view({out.numel()}), in), std::move(done)});
}

}  // namespace trainplan::executor::rt
