// Per-op costs on one rank and the per-unit task templates of plan::lower(). A template is
// the list of compute segments and tensor-parallel collectives of one unit for one
// micro-batch, per phase, with the saved-activation buffers each compute task allocates or
// releases. Templates depend on the unit only, so lower.cpp instantiates them cheaply for
// every rank and micro-batch.
#include <algorithm>
#include <map>
#include <utility>

#include "lower.hpp"
#include "trainplan/plan/tp_comm.hpp"

namespace trainplan::plan::detail {
namespace {

using models::OpKind;
using models::TpSplit;



// One op-level step of a phase before merging.
struct RawItem {
  bool compute = true;
  Phase phase = Phase::forward;
  int op = -1;
  TpCollective coll;              // tp collectives
  CommPurpose purpose = CommPurpose::tp;
  bool prefetch = false;          // cp: the backward's K, V gather (see TemplateItem)
  bool alone = false;             // compute: its own task at layer granularity (cp's attention)
};

// Channels of a batch-norm op whose statistics are synchronized (0: none).
int64_t synced_channels(const Plan& plan, const models::Op& op) {
  if (!plan.sync_batch_norm || plan.dp_cp() < 2 || op.kind != OpKind::batchnorm || op.weight_shape.empty()) return 0;
  return op.weight_shape.front();
}

TensorRole role_of(const TpCollective& c, const models::Op& op) {
  if (c.phase == Phase::forward) {
    if (c.before_op) return TensorRole::input;
    return op.kind == OpKind::loss ? TensorRole::loss_stats : TensorRole::output;
  }
  return c.before_op ? TensorRole::grad_output : TensorRole::grad_input;
}

std::string_view collective_tag(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "ar";
    case CollectiveKind::reduce_scatter: return "rs";
    case CollectiveKind::all_gather: return "ag";
    default: return "coll";
  }
}

class TemplateBuilder {
 public:
  TemplateBuilder(const Plan& plan, const PlanContext& ctx, Granularity granularity)
      : plan_(plan), graph_(ctx.graph), granularity_(granularity),
        prec_(plan.precision_or(ctx.precision)), workspace_(loss_workspace_bytes(plan, ctx)) {
    costs_.reserve(graph_.ops().size());
    for (const auto& op : graph_.ops())
      costs_.push_back(op_cost(op, plan, prec_));
  }

  UnitTemplate build(int unit) {
    const auto& u = graph_.units()[static_cast<size_t>(unit)];
    const bool full = unit_recompute(plan_.recompute, u) == Recompute::full;
    const bool selective = plan_.recompute == Recompute::selective;
    std::vector<TpCollective> colls;
    if (plan_.tp > 1) colls = tp_collectives(graph_, unit, plan_.sequence_parallel, plan_.cp);
    // Context parallelism: the attention's K, V are all-gathered over the cp group before it
    // runs, and dK, dV reduce-scattered after its backward (cp_kv_bytes > 0 only then).
    auto gathers_kv = [&](int id) { return costs_[static_cast<size_t>(id)].cp_kv_bytes > 0; };
    // A collective of `purpose` (cp, sync_bn) belonging to op `id`.
    auto comm_item = [&](Phase phase, int id, CollectiveKind kind, CommPurpose purpose, bool prefetch = false) {
      RawItem r;
      r.compute = false;
      r.phase = phase;
      r.op = id;
      r.coll.kind = kind;
      r.purpose = purpose;
      r.prefetch = prefetch;
      return r;
    };
    // Expert parallelism: the all-to-all after each moe_dispatch and before each moe_combine
    // (forward and a full recomputation's forward), and their mirrors in backward: before the
    // dispatch's backward, after the combine's. Blocking, like Megatron-Core's default (no
    // --overlap-moe-expert-parallel-comm): the next compute waits for each.
    auto moves_tokens = [&](int id) { return costs_[static_cast<size_t>(id)].ep_a2a_bytes > 0; };
    auto kind_of = [&](int id) { return graph_.ops()[static_cast<size_t>(id)].kind; };
    auto ep_item = [&](Phase phase, int id) { return comm_item(phase, id, CollectiveKind::all_to_all, CommPurpose::ep); };
    auto cp_item = [&](Phase phase, int id, CollectiveKind kind, bool prefetch) {
      return comm_item(phase, id, kind, CommPurpose::cp, prefetch);
    };
    auto compute_item = [&](Phase phase, int id) {
      RawItem r;
      r.phase = phase;
      r.op = id;
      r.alone = gathers_kv(id);
      return r;
    };
    // Synchronized batch norm: the forward's all-gather of the statistics, the backward's
    // all-reduce of the gradient sums, over the data-parallel group, each right after the op.
    auto bn_item = [&](Phase phase, int id, CollectiveKind kind) { return comm_item(phase, id, kind, CommPurpose::sync_bn); };
    auto syncs = [&](int id) { return synced_channels(plan_, graph_.ops()[static_cast<size_t>(id)]) > 0; };
    auto tp_item = [&](Phase phase, int id, const TpCollective& c) {
      RawItem r;
      r.compute = false;
      r.phase = phase;
      r.op = id;
      r.coll = c;
      return r;
    };

    // Op-level sequences of each phase.
    auto forward_raw = [&](Phase phase) {
      std::vector<RawItem> out;
      for (int id : u.ops) {
        for (const auto& c : colls)
          if (c.phase == Phase::forward && c.op == id && c.before_op) out.push_back(tp_item(phase, id, c));
        if (gathers_kv(id)) out.push_back(cp_item(phase, id, CollectiveKind::all_gather, false));
        if (moves_tokens(id) && kind_of(id) == OpKind::moe_combine) out.push_back(ep_item(phase, id));
        out.push_back(compute_item(phase, id));
        if (moves_tokens(id) && kind_of(id) == OpKind::moe_dispatch) out.push_back(ep_item(phase, id));
        if (syncs(id)) out.push_back(bn_item(phase, id, CollectiveKind::all_gather));
        for (const auto& c : colls)
          if (c.phase == Phase::forward && c.op == id && !c.before_op) out.push_back(tp_item(phase, id, c));
      }
      return out;
    };
    std::vector<RawItem> fwd = forward_raw(Phase::forward);
    std::vector<RawItem> rec = full ? forward_raw(Phase::recompute) : std::vector<RawItem>{};
    std::vector<RawItem> bwd;
    // cp: the backward gathers K, V again (they are not kept from the forward), as soon as the
    // unit's backward starts: it overlaps the backward of the ops after the attention.
    for (int id : u.ops)
      if (gathers_kv(id)) bwd.push_back(cp_item(Phase::backward, id, CollectiveKind::all_gather, true));
    for (auto it = u.ops.rbegin(); it != u.ops.rend(); ++it) {
      const int id = *it;
      if (selective && costs_[static_cast<size_t>(id)].recomputed_by_selective) bwd.push_back(compute_item(Phase::recompute, id));
      // Backward collectives of an op, in the reverse order tp_collectives() lists them.
      for (const auto& c : colls)
        if (c.phase == Phase::backward && c.op == id && c.before_op) bwd.push_back(tp_item(Phase::backward, id, c));
      if (moves_tokens(id) && kind_of(id) == OpKind::moe_dispatch) bwd.push_back(ep_item(Phase::backward, id));
      bwd.push_back(compute_item(Phase::backward, id));
      if (moves_tokens(id) && kind_of(id) == OpKind::moe_combine) bwd.push_back(ep_item(Phase::backward, id));
      if (syncs(id)) bwd.push_back(bn_item(Phase::backward, id, CollectiveKind::all_reduce));
      for (const auto& c : colls)
        if (c.phase == Phase::backward && c.op == id && !c.before_op) bwd.push_back(tp_item(Phase::backward, id, c));
      if (gathers_kv(id)) bwd.push_back(cp_item(Phase::backward, id, CollectiveKind::reduce_scatter, false));
    }

    UnitTemplate t;
    Slots slots;
    // Slots: forward collectives, then backward, then the recomputed forward ones.
    t.forward = merge(fwd, u, slots);
    t.backward = merge(bwd, u, slots);
    t.recompute = merge(rec, u, slots);
    t.tp_slots = slots.tp;
    t.cp_slots = slots.cp;
    t.bn_slots = slots.bn;
    t.ep_slots = slots.ep;
    for (int id : u.ops) {
      const double p = costs_[static_cast<size_t>(id)].params;
      if (p > 0) t.param_ops.push_back(id);
      t.params += p;
    }
    assign_memory(t, u, full, selective, unit);
    if (plan_.cp > 1) assign_cp_memory(t, u);
    return t;
  }

 private:
  // Collectives of one micro-batch of the unit so far, per purpose.
  struct Slots {
    int tp = 0, cp = 0, bn = 0, ep = 0;
  };

  // Merges consecutive compute steps of one phase (layer granularity) and numbers slots.
  std::vector<TemplateItem> merge(const std::vector<RawItem>& raw, const models::Unit& u, Slots& slots) {
    std::vector<TemplateItem> out;
    int segments = 0;
    bool open = false;
    for (const RawItem& r : raw) {
      if (!r.compute) {
        open = false;
        const auto& op = graph_.ops()[static_cast<size_t>(r.op)];
        TemplateItem c;
        c.kind = ItemKind::collective;
        c.phase = r.phase;
        c.purpose = r.purpose;
        c.collective = r.coll.kind;
        c.op = r.op;
        if (r.purpose == CommPurpose::sync_bn) {
          const int64_t channels = synced_channels(plan_, op);
          c.role = TensorRole::norm_stats;
          c.bytes = r.coll.kind == CollectiveKind::all_gather ? sync_bn_gather_bytes(channels, plan_.dp_cp())
                                                               : sync_bn_reduce_bytes(channels);
          c.slot = slots.bn++;
          c.name = std::string(collective_tag(c.collective)) + " sync-bn " + op.name;
        } else if (r.purpose == CommPurpose::ep) {
          // Forward: the dispatch's output goes out, the combine's input comes back; backward:
          // the combine's input gradient goes out, the dispatch's output gradient comes back.
          const bool dispatch = op.kind == OpKind::moe_dispatch;
          c.role = r.phase == Phase::backward ? (dispatch ? TensorRole::grad_output : TensorRole::grad_input)
                                              : (dispatch ? TensorRole::output : TensorRole::input);
          c.bytes = costs_[static_cast<size_t>(r.op)].ep_a2a_bytes;
          c.slot = slots.ep++;
          c.name = "a2a ep " + op.name;
        } else if (r.purpose == CommPurpose::cp) {
          c.role = r.coll.kind == CollectiveKind::all_gather ? TensorRole::input : TensorRole::grad_input;
          c.bytes = costs_[static_cast<size_t>(r.op)].cp_kv_bytes;
          c.slot = slots.cp++;
          c.prefetch = r.prefetch;
          c.name = std::string(collective_tag(c.collective)) + " cp " + op.name + (r.prefetch ? " prefetch" : "");
        } else {
          c.role = role_of(r.coll, op);
          c.bytes = r.coll.elems_per_sample * static_cast<double>(plan_.micro_batch) * tp_collective_element_bytes(graph_, r.coll, prec_);
          c.slot = slots.tp++;
          c.name = std::string(collective_tag(c.collective)) + " tp " + op.name;
        }
        out.push_back(std::move(c));
        continue;
      }
      const bool merge_here = granularity_ == Granularity::layer && open && !r.alone && out.back().phase == r.phase;
      if (!merge_here) {
        TemplateItem c;
        c.kind = ItemKind::compute;
        c.phase = r.phase;
        out.push_back(std::move(c));
        ++segments;
        open = !r.alone;
      }
      out.back().ops.push_back(r.op);
    }
    // Costs, kinds, names.
    int k = 0;
    for (TemplateItem& c : out) {
      if (c.kind != ItemKind::compute) continue;
      std::map<int, double> flops_by_kind;
      std::vector<int> kind_order;
      int best_matmul = -1;
      double best_matmul_flops = -1;
      for (int id : c.ops) {
        const auto& op = graph_.ops()[static_cast<size_t>(id)];
        const OpCost& oc = costs_[static_cast<size_t>(id)];
        const bool backward = c.phase == Phase::backward;
        const double f = backward ? oc.flops_bwd : oc.flops_fwd;
        c.flops += f;
        c.mem_bytes += backward ? oc.mem_bwd_bytes : oc.mem_fwd_bytes;
        const int kind = static_cast<int>(op.kind);
        if (!flops_by_kind.count(kind)) kind_order.push_back(kind);
        flops_by_kind[kind] += f;
        if (oc.gemm_m > 0 && f > best_matmul_flops) {
          best_matmul = id;
          best_matmul_flops = f;
        }
        if (op.kind == OpKind::loss && workspace_ > 0) c.workspace_bytes = workspace_;
      }
      c.op_kind = kind_order.empty() ? -1 : kind_order.front();
      for (int kind : kind_order)
        if (flops_by_kind[kind] > flops_by_kind[c.op_kind]) c.op_kind = kind;
      if (best_matmul >= 0 && graph_.ops()[static_cast<size_t>(best_matmul)].is_matmul() &&
          static_cast<int>(graph_.ops()[static_cast<size_t>(best_matmul)].kind) == c.op_kind) {
        const OpCost& oc = costs_[static_cast<size_t>(best_matmul)];
        c.gemm_m = oc.gemm_m, c.gemm_n = oc.gemm_n, c.gemm_k = oc.gemm_k;
      }
      if (granularity_ == Granularity::op)
        c.name = graph_.ops()[static_cast<size_t>(c.ops.front())].name;
      else
        c.name = segments > 1 ? u.name + "#" + std::to_string(k) : u.name;
      ++k;
    }
    return out;
  }

  // Which compute task allocates and which releases each op's saved activations; ops sharing
  // both share one buffer (its key is the smallest local index among them).
  void assign_memory(UnitTemplate& t, const models::Unit& u, bool full, bool selective, int unit) {
    enum List { kForward, kRecompute, kBackward };
    auto list_of = [&](int l) -> std::vector<TemplateItem>& {
      return l == kForward ? t.forward : l == kRecompute ? t.recompute : t.backward;
    };
    // (list, item) of each op's compute task in a phase.
    using Where = std::pair<int, size_t>;
    auto index = [&](int l, Phase phase) {
      std::map<int, Where> out;
      const auto& list = list_of(l);
      for (size_t i = 0; i < list.size(); ++i)
        if (list[i].kind == ItemKind::compute && list[i].phase == phase)
          for (int id : list[i].ops) out[id] = {l, i};
      return out;
    };
    const std::map<int, Where> fwd_of = index(kForward, Phase::forward);
    const std::map<int, Where> rec_of = index(full ? kRecompute : kBackward, Phase::recompute);
    const std::map<int, Where> bwd_of = index(kBackward, Phase::backward);
    // (allocating task, releasing task) -> buffer
    std::map<std::pair<Where, size_t>, MemGroup> groups;
    for (size_t local = 0; local < u.ops.size(); ++local) {
      const int id = u.ops[local];
      const double bytes = costs_[static_cast<size_t>(id)].saved_bytes;
      if (bytes <= 0) continue;
      const bool dropped = costs_[static_cast<size_t>(id)].recomputed_by_selective;
      const Where a = full || (selective && dropped) ? rec_of.at(id) : fwd_of.at(id);
      const size_t f = bwd_of.at(id).second;
      auto it = groups.find({a, f});
      if (it == groups.end()) it = groups.emplace(std::make_pair(a, f), MemGroup{static_cast<int>(local), 0.0}).first;
      it->second.bytes += bytes;
    }
    // Allocation and release lists in key order, for a deterministic program.
    std::vector<std::pair<std::pair<Where, size_t>, MemGroup>> sorted(groups.begin(), groups.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second.key < y.second.key; });
    for (const auto& [where, g] : sorted) {
      list_of(where.first.first)[where.first.second].allocs.push_back(g);
      t.backward[where.second].frees.push_back(g);
    }
    t.checkpoint_key = static_cast<int>(u.ops.size());
    if (full && unit > 0) {
      const double in = graph_.units()[static_cast<size_t>(unit - 1)].output_elems * bytes_per_element(prec_) *
                        static_cast<double>(plan_.micro_batch) / plan_.cp;
      t.checkpoint_bytes = plan_.sequence_parallel ? in / plan_.tp : in;
    }
  }

  // Context parallelism's transient buffers: the gathered K, V from before each gather until
  // the end of the attention task that reads it (forward, full-recomputation forward, and the
  // backward's prefetched gather until the attention backward); dK, dV from before the
  // attention backward until its reduce-scatter. The first backward-list task that runs the
  // attention (its selective recomputation, else its backward) waits for the prefetch.
  void assign_cp_memory(UnitTemplate& t, const models::Unit& u) {
    const CpKeys keys = cp_keys(u.ops.size());
    auto contains = [](const TemplateItem& item, int op) { return std::find(item.ops.begin(), item.ops.end(), op) != item.ops.end(); };
    auto phase_list = [&](std::vector<TemplateItem>& list, int key) {
      for (size_t i = 0; i < list.size(); ++i) {
        TemplateItem& g = list[i];
        if (g.kind != ItemKind::collective || g.purpose != CommPurpose::cp || g.collective != CollectiveKind::all_gather) continue;
        g.transient_allocs.push_back({key, g.bytes});
        for (size_t j = i + 1; j < list.size(); ++j)
          if (list[j].kind == ItemKind::compute && contains(list[j], g.op)) {
            list[j].transient_frees.push_back({key, g.bytes});
            break;
          }
      }
    };
    phase_list(t.forward, keys.kv_forward);
    phase_list(t.recompute, keys.kv_recompute);
    bool waited = false;
    std::vector<TemplateItem>& b = t.backward;
    for (size_t i = 0; i < b.size(); ++i) {
      TemplateItem& g = b[i];
      if (g.kind == ItemKind::collective && g.purpose == CommPurpose::cp && g.prefetch) {
        g.transient_allocs.push_back({keys.kv_backward, g.bytes});
        continue;
      }
      if (g.kind == ItemKind::compute) {
        for (const TemplateItem& p : b)
          if (p.prefetch && contains(g, p.op)) {
            if (!waited) g.waits_prefetch = true;
            waited = true;
            if (g.phase == Phase::backward) {
              g.transient_allocs.push_back({keys.dkv, p.bytes});
              g.transient_frees.push_back({keys.kv_backward, p.bytes});
            }
          }
        continue;
      }
      if (g.kind == ItemKind::collective && g.purpose == CommPurpose::cp && g.collective == CollectiveKind::reduce_scatter)
        g.transient_frees.push_back({keys.dkv, g.bytes});
    }
  }

  const Plan& plan_;
  const models::ModelGraph& graph_;
  Granularity granularity_;
  Precision prec_;
  double workspace_;
  std::vector<OpCost> costs_;
};

}  // namespace

double loss_workspace_bytes(const Plan& plan, const PlanContext& ctx) {
  if (ctx.model_spec.vocab <= 0) return 0;
  return static_cast<double>(plan.micro_batch) * static_cast<double>(ctx.seq_len) *
         static_cast<double>(ctx.model_spec.vocab) / plan.tp / plan.cp * 4.0;
}

int max_memory_keys(const models::ModelGraph& graph, int cp) {
  size_t most = 0;
  for (const auto& u : graph.units()) most = std::max(most, u.ops.size());
  // + the full-recomputation checkpoint, + cp's transients (cp_keys)
  return static_cast<int>(most) + 1 + (cp > 1 ? 4 : 0);
}

std::vector<UnitTemplate> build_unit_templates(const Plan& plan, const PlanContext& ctx, Granularity granularity) {
  TemplateBuilder b(plan, ctx, granularity);
  std::vector<UnitTemplate> out;
  out.reserve(ctx.graph.units().size());
  for (size_t u = 0; u < ctx.graph.units().size(); ++u) out.push_back(b.build(static_cast<int>(u)));
  return out;
}

}  // namespace trainplan::plan::detail
