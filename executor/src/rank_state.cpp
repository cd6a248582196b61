// One rank's parameters: materialization of its tp slices and ZeRO shards, gradient state,
// the optimizer step with global-norm clipping, and its checkpoint file.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::executor::rt {

RankState::RankState(const ModelLayout& layout, const RuntimeOptions& options, const TrainingData& data, int rank,
                     int device)
    : L_(layout), options_(options), data_(data), rank_(rank) {
  backend_ = make_backend(options.backend, device);
  stream_ = &backend_->default_stream();
  const plan::RankProgram& rp = program();
  dp_rank_ = rp.dp_rank;
  tp_rank_ = rp.tp_rank;
  pp_rank_ = rp.pp_rank;
  ep_rank_ = dp_rank_ % L_.ep;
  local_op_.assign(L_.graph->ops().size(), false);
  for (const models::Op& op : L_.graph->ops()) local_op_[static_cast<size_t>(op.id)] = L_.op_on_stage(op.id, pp_rank_);
  materialize_params();
}

const plan::RankProgram& RankState::program() const { return L_.program->ranks[static_cast<size_t>(rank_)]; }

std::vector<double> RankState::download(const Tensor& t) { return backend_->download_values(*stream_, t); }

void RankState::materialize_params() {
  const size_t nops = L_.graph->ops().size();
  op_param_index_.assign(nops, {-1, -1});
  std::vector<int> index_of_def(L_.params.size(), -1);
  auto create = [&](int def, bool tied_copy) -> int {
    Param q;
    q.def = def;
    q.tied_copy = tied_copy;
    q.slice = L_.slice(def, tp_rank_, ep_rank_);
    q.numel = q.slice.numel();
    if (q.numel == 0) return -1;  // the row-parallel bias on tp ranks other than 0
    const ParamDef& d = L_.params[static_cast<size_t>(def)];
    q.local_shape = d.shape.size() == 1 ? Shape{q.numel} : Shape{q.slice.local_rows(), q.slice.local_cols()};
    q.chunk = (q.numel + L_.dp - 1) / L_.dp;
    if (L_.sharded) {
      q.own_begin = std::min(q.numel, dp_rank_ * q.chunk);
      q.own_end = std::min(q.numel, (dp_rank_ + 1) * q.chunk);
    } else {
      q.own_begin = 0;
      q.own_end = q.numel;
    }
    // dp replicas count on dp rank 0; a rank's experts on the first rank holding them.
    const int first_replica = L_.expert_sharded(def) ? ep_rank_ : 0;
    q.canonical = !tied_copy && (!L_.tp_replicated(def) || tp_rank_ == 0) && (L_.sharded || dp_rank_ == first_replica);
    const std::vector<double> full = L_.initial_values(def, options_.seed);
    std::vector<double> local;
    local.reserve(static_cast<size_t>(q.numel));
    for (int64_t g : q.slice.global_indices()) local.push_back(full[static_cast<size_t>(g)]);
    const int64_t state = L_.sharded ? q.chunk : q.numel;
    if (L_.params_sharded) {
      std::vector<double> shard(static_cast<size_t>(q.chunk), 0.0);
      std::copy(local.begin() + q.own_begin, local.begin() + q.own_end, shard.begin());
      q.shard = backend_->empty(options_.dtype, {q.chunk});
      backend_->upload_values(*stream_, q.shard, shard);
    } else {
      q.value = backend_->empty(options_.dtype, q.local_shape);
      backend_->upload_values(*stream_, q.value, local);
    }
    q.m = backend_->zeros(*stream_, options_.dtype, {state});
    q.v = backend_->zeros(*stream_, options_.dtype, {state});
    params_.push_back(std::move(q));
    return static_cast<int>(params_.size()) - 1;
  };
  for (const models::Op& op : L_.graph->ops()) {
    if (!local_op_[static_cast<size_t>(op.id)]) continue;
    const auto& defs = L_.op_params[static_cast<size_t>(op.id)];
    for (size_t slot = 0; slot < defs.size(); ++slot) {
      int idx = -1;
      if (defs[slot] >= 0) {
        idx = create(defs[slot], false);
        index_of_def[static_cast<size_t>(defs[slot])] = idx;
      } else {
        // The tied LM head: the embedding's table when it lives here, else a copy that the
        // program's tied all-reduce keeps equal (Megatron's embedding group).
        const int def = L_.tied_param(op.id);
        idx = index_of_def[static_cast<size_t>(def)];
        if (idx < 0 && !local_op_[static_cast<size_t>(L_.params[static_cast<size_t>(def)].op)])
          idx = create(def, true);
      }
      op_param_index_[static_cast<size_t>(op.id)][slot] = idx;
    }
  }
}

Param* RankState::find_param(int op_id, bool bias) {
  const int idx = op_param_index_[static_cast<size_t>(op_id)][bias ? 1 : 0];
  return idx < 0 ? nullptr : &params_[static_cast<size_t>(idx)];
}

Param& RankState::param_of(int op_id, bool bias) {
  Param* p = find_param(op_id, bias);
  TP_ASSERT_MSG(p != nullptr, "parameter missing on this rank");
  return *p;
}

Tensor RankState::weight(int op_id, bool bias) {
  Param* p = find_param(op_id, bias);
  if (!p) return Tensor();
  if (!p->value.defined())
    throw Error(fmt::format("rank {}: op \"{}\" needs {}, which the program has not all-gathered (ZeRO-3)", rank_,
                            L_.op(op_id).name, L_.params[static_cast<size_t>(p->def)].name))
        .hint("a ZeRO-3 program gathers a unit's parameters before its forward and its backward");
  return p->value;
}

Tensor RankState::grad_for(int op_id, bool bias) {
  Param* p = find_param(op_id, bias);
  if (!p) return Tensor();
  if (!p->grad.defined()) p->grad = backend_->zeros(*stream_, options_.dtype, p->local_shape);
  p->grad_dirty = true;
  return p->grad;
}

std::vector<Param*> RankState::bucket_params(const plan::Task& t, bool require_local) {
  std::vector<Param*> out;
  auto add = [&](Param* p) {
    if (p && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  std::vector<int> ops = t.ops;
  if (ops.empty() && t.op >= 0) ops.push_back(t.op);
  for (int op : ops) {
    if (op < 0 || op >= static_cast<int>(local_op_.size())) fail(t, fmt::format("names op {}, not in the model", op));
    if (local_op_[static_cast<size_t>(op)]) {
      add(find_param(op, false));
      add(find_param(op, true));
      continue;
    }
    // Not on this rank: its tied copy may be (the tied all-reduce may name the embedding).
    bool found = false;
    for (Param& p : params_)
      if (p.tied_copy && L_.params[static_cast<size_t>(p.def)].op == op) {
        add(&p);
        found = true;
      }
    if (!found && require_local)
      fail(t, fmt::format("names op \"{}\", which is not on this rank's pipeline stage", L_.op(op).name));
  }
  return out;
}

Tensor RankState::effective_grad(Param& p) {
  const std::string& name = L_.params[static_cast<size_t>(p.def)].name;
  if (p.reduced.defined()) {
    if (p.grad_dirty)
      throw Error(fmt::format("rank {}: backward added to the gradient of {} after the program reduced it", rank_, name))
          .hint("a gradient bucket must be reduced after the last backward that writes it");
    return p.reduced_is_shard ? p.reduced.flat(0, p.own_len()) : p.reduced.flat(p.own_begin, p.own_end);
  }
  // A rank's experts have no replica when ep = dp (expert_dp 1): their gradient is complete here.
  const bool lone_expert = L_.expert_sharded(p.def) && L_.dp / L_.ep == 1;
  if (L_.dp > 1 && !lone_expert)
    throw Error(fmt::format("rank {}: the program never reduced the gradient of {} over its data-parallel group", rank_,
                            name))
        .hint("every parameter must be in one data-parallel (or ZeRO) gradient bucket");
  if (!p.grad.defined()) p.grad = backend_->zeros(*stream_, options_.dtype, p.local_shape);
  return p.grad.view({p.numel}).flat(p.own_begin, p.own_end);
}

Tensor RankState::local_grad_norm_sq() {
  // Sequence parallelism leaves partial gradients of tp-replicated parameters (norms, position
  // embedding) on each tp rank; when the program does not sum them over the tp group, the
  // runtime does, here, in parameter order.
  if (L_.sp) {
    std::vector<Param*> partial;
    for (Param& p : params_)
      if (L_.tp_replicated(p.def) && !p.tp_reduced) partial.push_back(&p);
    if (!partial.empty()) {
      result_.implicit.push_back("sequence-parallel: all-reduce of the tp-replicated parameters' gradients over tp");
      CommGroup g = tp_group();
      int64_t k = 0;
      for (Param* p : partial) {
        if (!p->reduced.defined() && !p->grad.defined()) p->grad = backend_->zeros(*stream_, options_.dtype, p->local_shape);
        Tensor target = p->reduced.defined() ? p->reduced : p->grad.view({p->numel});
        comm_->all_reduce(g, tag(kSpGradCommId - k++), target, ReduceOp::sum);
        p->tp_reduced = true;
      }
    }
  }
  Tensor acc = backend_->zeros(*stream_, options_.dtype, {1});
  for (Param& p : params_) {
    Tensor g = effective_grad(p);
    if (p.canonical && g.numel() > 0) backend_->sum_squares(*stream_, acc, g);
    if (options_.keep_gradients) p.last_grad = g.numel() > 0 ? download(g) : std::vector<double>{};
  }
  return acc;
}

void RankState::finish_clip(const Tensor& norm_sq) {
  clip_scale_ = backend_->empty(options_.dtype, {1});
  backend_->clip_scale(*stream_, clip_scale_, norm_sq, options_.max_grad_norm);
  const double sq = download(norm_sq)[0];
  result_.grad_norm = std::isfinite(sq) ? std::sqrt(std::max(0.0, sq)) : sq;  // keeps NaN / inf
  clip_ready_ = true;
  if (std::isfinite(sq)) return;
  result_.nonfinite = true;
  // Name the first owned gradient with a non-finite element (a diagnostic, only on this path).
  for (Param& p : params_) {
    if (!p.canonical) continue;
    const Tensor g = effective_grad(p);
    if (g.numel() == 0) continue;
    for (double v : download(g))
      if (!std::isfinite(v)) {
        result_.nonfinite_tensor = L_.params[static_cast<size_t>(p.def)].name;
        return;
      }
  }
}

void RankState::optimizer(const std::vector<int>& ops) {
  if (!clip_ready_) {
    // The program has no gradient-norm all-reduce: one rank needs none, more get one here.
    Tensor norm_sq = local_grad_norm_sq();
    if (L_.program->world_size > 1) {
      result_.implicit.push_back("all-reduce of the squared gradient norm over all ranks");
      comm_->all_reduce(world_group(), tag(kGradNormCommId), norm_sq, ReduceOp::sum);
    }
    finish_clip(norm_sq);
  }
  std::vector<Param*> targets;
  if (ops.empty()) {
    for (Param& p : params_)
      if (!p.updated) targets.push_back(&p);
  } else {
    plan::Task t;
    t.ops = ops;
    t.label = "optimizer";
    targets = bucket_params(t, true);
  }
  const int64_t step = updates_done_ + 1;
  for (Param* p : targets) {
    if (p->updated) continue;
    p->updated = true;
    if (p->own_len() == 0 || result_.nonfinite) continue;
    AdamWConfig c = options_.adamw;
    if (!L_.params[static_cast<size_t>(p->def)].decay) c.weight_decay = 0;
    Tensor values = L_.params_sharded ? p->shard.flat(0, p->own_len())
                                       : p->value.view({p->numel}).flat(p->own_begin, p->own_end);
    backend_->adamw_step(*stream_, values, effective_grad(*p), p->m.flat(0, p->own_len()), p->v.flat(0, p->own_len()),
                         clip_scale_, c, step, Tensor());
  }
}

std::vector<double> RankState::values_at_rest(const Param& p) {
  return L_.params_sharded ? download(p.shard) : download(p.value);
}

// ---- checkpoint shard of one rank ---------------------------------------------------------------
// Tensor names: "<parameter name>:value" (ZeRO-3 with dp > 1: the shard), ":adam_m", ":adam_v";
// the file format is checkpoint.hpp's.

namespace {
constexpr const char* kTensorKinds[3] = {":value", ":adam_m", ":adam_v"};
}  // namespace

checkpoint::ShardInfo RankState::save(const std::string& dir) {
  checkpoint::ShardWriter w(dir, {.rank = rank_,
                                  .world_size = L_.program->world_size,
                                  .steps_done = steps_done_,
                                  .updates_done = updates_done_});
  for (const Param& p : params_) {
    const std::string& name = L_.params[static_cast<size_t>(p.def)].name;
    const Tensor* tensors[3] = {L_.params_sharded ? &p.shard : &p.value, &p.m, &p.v};
    for (int k = 0; k < 3; ++k) {
      std::vector<std::byte> bytes(tensors[k]->size_bytes());
      backend_->download(*stream_, bytes, *tensors[k]);
      backend_->synchronize(*stream_);
      w.add(name + kTensorKinds[k], tensors[k]->dtype(), tensors[k]->numel(), bytes);
    }
  }
  return w.commit();
}

void RankState::load(const checkpoint::Shard& shard, const std::string& path) {
  std::map<std::string, const checkpoint::TensorRecord*> entries;
  for (const auto& t : shard.tensors)
    if (!entries.emplace(t.name, &t).second)
      throw Error(fmt::format("tensor \"{}\" appears twice", t.name)).at(path).hint("the file is corrupted");
  size_t used = 0;
  for (Param& p : params_) {
    const std::string& name = L_.params[static_cast<size_t>(p.def)].name;
    Tensor* tensors[3] = {L_.params_sharded ? &p.shard : &p.value, &p.m, &p.v};
    for (int k = 0; k < 3; ++k) {
      auto it = entries.find(name + kTensorKinds[k]);
      if (it == entries.end())
        throw Error(fmt::format("the checkpoint has no tensor \"{}{}\" for rank {}", name, kTensorKinds[k], rank_))
            .at(path)
            .hint("the checkpoint was written for another model or plan layout");
      const checkpoint::TensorRecord& e = *it->second;
      if (e.dtype != tensors[k]->dtype() || e.numel != tensors[k]->numel())
        throw Error(fmt::format("tensor \"{}{}\" has {} {} elements in the checkpoint, rank {} holds {}", name,
                                kTensorKinds[k], e.numel, dtype_name(e.dtype), rank_, tensors[k]->describe()))
            .at(path)
            .hint("the checkpoint was written with another tp / ZeRO layout or precision");
      backend_->upload(*stream_, *tensors[k], e.bytes);
      ++used;
    }
  }
  backend_->synchronize(*stream_);
  if (used != entries.size())
    throw Error(fmt::format("the checkpoint holds {} tensors for rank {}, this plan has {}", entries.size(), rank_, used))
        .at(path)
        .hint("the checkpoint was written for another model or plan layout");
  steps_done_ = shard.header.steps_done;
  updates_done_ = shard.header.updates_done;
}

}  // namespace trainplan::executor::rt
