// plan::lower(): a validated plan -> one training step per rank (StepProgram). Every rank is
// lowered on its own from program-wide numbering (groups, comm_ids by formula), so ranks can
// be lowered in parallel, or only some of them, with identical results. plan/README.md
// ("Lowering") documents the program; lower_templates.cpp builds the per-unit templates.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lower.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/thread_pool.hpp"
#include "trainplan/plan/expert_parallel.hpp"
#include "trainplan/plan/memory.hpp"

namespace trainplan::plan {
namespace {

using detail::ItemKind;
using detail::MemGroup;
using detail::TemplateItem;
using detail::UnitTemplate;

// The cp stream exists only in programs with cp > 1 and the sync-bn stream only in programs
// that synchronize batch norm (programs without them keep five streams); sync-bn comes after cp
// when both exist, else takes cp's index.
// One stream per process group's NCCL stream: a group's collectives run one after another in
// issue order (PyTorch's ProcessGroupNCCL issues every collective of a group on the group's one
// NCCL stream per device), so ZeRO-3's gathers share `dp` with the gradient reductions (FSDP
// and DeepSpeed gather and reduce-scatter over the same data-parallel group).
enum Stream { kCompute, kTp, kPpSend, kPpRecv, kDp, kCp, kNumStreams };
const char* const kStreamNames[kNumStreams] = {"compute", "tp", "pp-send", "pp-recv", "dp", "cp"};
const char* const kSyncBnStreamName = "sync-bn";
const char* const kEpStreamName = "ep";  // last, in programs with ep > 1

/// Gradients reduced together (data-parallel bucket), in the order backward finalizes them.
struct Bucket {
  std::vector<int> ops;      // reverse op order
  double grad_bytes = 0;     // gradients of `ops` on this rank, in the reduce precision (plan::grad_reduce_precision)
  double param_bytes = 0;    // their parameters as ZeRO gathers them (FP8 linears at 1 byte with fp8_params)
  std::vector<int> sp_ops;   // replicated ops with parameters: partial gradients under SP
  double sp_bytes = 0;
  bool tied = false;         // the tied-embedding copy of a pipelined model (its own bucket, last)
  bool expert = false;       // routed experts' gradients: reduced over the expert-dp group
};

/// What every rank of one pipeline stage shares.
struct StageInfo {
  std::vector<PipelineStep> order;
  std::vector<Bucket> buckets;
  std::vector<int> closing;          // op id -> bucket whose last op it is (-1: none)
  double static_bytes = 0;
  double params = 0;                 // on one rank, with the tied copy
  std::vector<int64_t> unit_slot;    // unit -> first tp slot of the unit per micro-batch (-1: not here)
  int64_t pp_gather_slot = 0;        // first slot of the pipeline scatter-gather all-gathers
  int64_t slots_per_mb = 0;
  std::vector<int64_t> unit_cp_slot; // unit -> first cp slot of the unit per micro-batch (-1: not here)
  int64_t cp_slots_per_mb = 0;
  std::vector<int64_t> unit_bn_slot; // unit -> first sync-bn slot of the unit per micro-batch (-1: not here)
  int64_t bn_slots_per_mb = 0;
  std::vector<int64_t> unit_ep_slot; // unit -> first ep all-to-all slot of the unit per micro-batch (-1: not here)
  int64_t ep_slots_per_mb = 0;
  double expert_params = 0;          // routed experts' parameters on one rank (in `params`)
};

class Lowering {
 public:
  Lowering(const Plan& plan, const PlanContext& ctx, const LowerOptions& options)
      : plan_(plan), ctx_(ctx), graph_(ctx.graph), opt_(options), prec_(plan.precision_or(ctx.precision)),
        elem_(bytes_per_element(prec_)), grad_elem_(bytes_per_element(grad_reduce_precision(plan, ctx))), m_(plan.num_micro_batches), b_(plan.micro_batch), dp_(plan.dp), tp_(plan.tp),
        pp_(plan.pp), vp_(plan.vp), cp_(plan.cp), dpcp_(plan.dp * plan.cp), ep_(plan.ep), edp_(plan.expert_dp()),
        world_(plan.world_size()),
        sp_(plan.sequence_parallel && plan.tp > 1), zero3_(plan.zero_stage >= 3),
        zero3_sync_(zero3_ && ctx.software.zero3_tensor_sync && plan.dp * plan.cp > 1), sync_bn_(plan.sync_batch_norm && dpcp_ > 1),
        grads_every_mb_(plan.zero_stage >= 2 && m_ > 1 && dpcp_ > 1), red_slots_(grads_every_mb_ ? m_ : 1),
        num_units_(static_cast<int>(graph_.units().size())) {
    fp8_params_ = prec_ == Precision::fp8 && plan.fp8.fp8_params;
    if (zero3_ && dpcp_ > 1) epilogue_bytes_ = ctx.software.grad_epilogue_bytes(prec_, grad_reduce_precision(plan, ctx));
    bn_stream_ = cp_ > 1 ? kNumStreams : kCp;
    ep_stream_ = bn_stream_ + (sync_bn_ ? 1 : 0);
    TP_ASSERT(plan.stages.size() == static_cast<size_t>(pp_ * vp_));
    TP_ASSERT(m_ >= 1 && cp_ >= 1 && dp_ * tp_ * pp_ * cp_ == world_);
    templates_ = detail::build_unit_templates(plan, ctx, options.granularity);
    setup_gathers();
    keys_ = detail::max_memory_keys(graph_, cp_);
    find_tied();
    setup_stages();
    setup_groups();
    setup_comm_ids();
  }

  StepProgram run() const {
    StepProgram p;
    p.world_size = world_;
    p.dp = dp_, p.tp = tp_, p.pp = pp_, p.vp = vp_, p.cp = cp_;
    p.num_micro_batches = m_;
    p.micro_batch = b_;
    p.granularity = opt_.granularity;
    p.attention = plan_.attention;
    p.op_costs.reserve(graph_.ops().size());
    for (const auto& op : graph_.ops()) p.op_costs.push_back(op_cost(op, plan_, prec_));
    p.streams.assign(kStreamNames, kStreamNames + (cp_ > 1 ? kNumStreams : kCp));
    if (sync_bn_) p.streams.push_back(kSyncBnStreamName);
    if (ep_ > 1) p.streams.push_back(kEpStreamName);
    p.groups = groups_;
    p.ranks.resize(static_cast<size_t>(world_));
    p.symmetry_class.resize(static_cast<size_t>(world_));
    std::vector<int> todo;
    std::vector<bool> wanted(static_cast<size_t>(world_), opt_.only_ranks.empty());
    for (int r : opt_.only_ranks) {
      if (r < 0 || r >= world_)
        throw Error("LowerOptions::only_ranks names rank " + std::to_string(r) + " but the plan has " +
                    std::to_string(world_) + " ranks")
            .hint("ranks are 0 .. dp*tp*pp*cp - 1, rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank");
      wanted[static_cast<size_t>(r)] = true;
    }
    for (int s = 0; s < pp_; ++s)
      for (int d = 0; d < dp_; ++d)
        for (int c = 0; c < cp_; ++c)
          for (int t = 0; t < tp_; ++t) {
            const int r = p.rank_of(d, t, s, c);
            RankProgram& rp = p.ranks[static_cast<size_t>(r)];
            rp.rank = r;
            rp.gpu = r;
            rp.dp_rank = d, rp.tp_rank = t, rp.pp_rank = s, rp.cp_rank = c;
            rp.static_bytes = stages_[static_cast<size_t>(s)].static_bytes;
            p.symmetry_class[static_cast<size_t>(r)] = class_rep(d, t, s, c);
            if (wanted[static_cast<size_t>(r)] && (!opt_.representatives_only || class_rep(d, t, s, c) == r)) todo.push_back(r);
          }
    std::sort(todo.begin(), todo.end());
    auto work = [&](size_t i) { lower_rank(p.ranks[static_cast<size_t>(todo[i])]); };
    if (opt_.threads == 1 || todo.size() < 2) {
      for (size_t i = 0; i < todo.size(); ++i) work(i);
    } else {
      ThreadPool pool(static_cast<size_t>(std::max(0, opt_.threads)));
      pool.parallel_for(todo.size(), work);
    }
    return p;
  }

 private:
  friend class RankLowering;

  // ---- setup ----------------------------------------------------------------------------

  // ZeRO-3 gathers per unit: the unit's own parameters plus any weight one of its ops borrows
  // from another unit (a tied LM head reads the word embedding, which unit 0 gathered and
  // freed long before).
  void setup_gathers() {
    gather_ops_.resize(templates_.size());
    gather_bytes_.resize(templates_.size());
    for (size_t u = 0; u < templates_.size(); ++u) {
      gather_ops_[u] = templates_[u].param_ops;
      gather_bytes_[u] = 0;
      for (int id : templates_[u].param_ops) gather_bytes_[u] += op_params_on_rank(graph_.ops()[static_cast<size_t>(id)], tp_) * param_elem(id);
      for (int id : graph_.units()[u].ops) {
        const int tied = graph_.ops()[static_cast<size_t>(id)].tied_weight_op;
        if (tied < 0 || graph_.ops()[static_cast<size_t>(tied)].unit == static_cast<int>(u)) continue;
        if (std::find(gather_ops_[u].begin(), gather_ops_[u].end(), tied) != gather_ops_[u].end()) continue;
        gather_ops_[u].push_back(tied);
        gather_bytes_[u] += op_params_on_rank(graph_.ops()[static_cast<size_t>(tied)], tp_) * param_elem(tied);
      }
    }
    if (!zero3_sync_) return;
    // One gather per parameter tensor (hw::SoftwareStack::zero3_tensor_sync), in op order.
    gather_tensors_.resize(templates_.size());
    tensor_off_.assign(templates_.size() + 1, 0);
    for (size_t u = 0; u < templates_.size(); ++u) {
      for (int id : gather_ops_[u])
        for (double elems : param_tensors_on_rank(graph_.ops()[static_cast<size_t>(id)], tp_))
          gather_tensors_[u].push_back({id, elems * param_elem(id)});
      tensor_off_[u + 1] = tensor_off_[u] + static_cast<int64_t>(gather_tensors_[u].size());
    }
    // ... and each gradient tensor reduce-scattered by its own call (the unit's own parameters).
    grad_tensors_.resize(templates_.size());
    grad_tensor_off_.assign(templates_.size() + 1, 0);
    for (size_t u = 0; u < templates_.size(); ++u) {
      for (int id : templates_[u].param_ops)
        for (double elems : param_tensors_on_rank(graph_.ops()[static_cast<size_t>(id)], tp_)) grad_tensors_[u].push_back({id, elems * grad_elem_});
      grad_tensor_off_[u + 1] = grad_tensor_off_[u] + static_cast<int64_t>(grad_tensors_[u].size());
    }
    rank_view_s_ = static_cast<double>(dpcp_) * ctx_.software.zero3_rank_view_s;
    rank_copy_s_ = static_cast<double>(dpcp_) * ctx_.software.zero3_rank_copy_s;
  }

  // A tied word embedding whose LM head sits on another pipeline stage: both stages hold a
  // copy and all-reduce its gradient (Megatron's embedding group).
  void find_tied() {
    for (const auto& op : graph_.ops())
      if (op.tied_weight_op >= 0 && pp_ > 1) {
        head_op_ = op.id;
        embedding_op_ = op.tied_weight_op;
      }
    if (head_op_ >= 0) {
      const auto& emb = graph_.ops()[static_cast<size_t>(embedding_op_)];
      tied_params_ = op_params_on_rank(emb, tp_);
    }
  }

  const StageAssignment& assignment(int stage, int chunk) const {
    return plan_.stages[static_cast<size_t>(chunk * pp_ + stage)];
  }

  // Parameters of an op on a rank of `stage`, with the tied copy on the last stage.
  double rank_op_params(int op, int stage) const {
    double p = op_params_on_rank(graph_.ops()[static_cast<size_t>(op)], tp_, ep_);
    if (op == head_op_ && stage == pp_ - 1) p += tied_params_;
    return p;
  }

  bool needs_buckets() const { return !zero3_ && (dpcp_ > 1 || sp_ || head_op_ >= 0); }

  void setup_stages() {
    stages_.resize(static_cast<size_t>(pp_));
    for (int s = 0; s < pp_; ++s) {
      StageInfo& st = stages_[static_cast<size_t>(s)];
      st.order = pipeline_order(plan_.schedule, pp_, vp_, m_, s);
      const MemoryBreakdown mem = stage_memory(plan_, ctx_, s);
      st.static_bytes = mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes;
      st.closing.assign(graph_.ops().size(), -1);
      st.unit_slot.assign(static_cast<size_t>(num_units_), -1);
      st.unit_cp_slot.assign(static_cast<size_t>(num_units_), -1);
      st.unit_bn_slot.assign(static_cast<size_t>(num_units_), -1);
      st.unit_ep_slot.assign(static_cast<size_t>(num_units_), -1);
      int64_t slot = 0;
      for (int c = 0; c < vp_; ++c) {
        const auto& a = assignment(s, c);
        for (int u = a.first_unit; u <= a.last_unit; ++u) {
          st.unit_slot[static_cast<size_t>(u)] = slot;
          slot += templates_[static_cast<size_t>(u)].tp_slots;
          st.unit_cp_slot[static_cast<size_t>(u)] = st.cp_slots_per_mb;
          st.cp_slots_per_mb += templates_[static_cast<size_t>(u)].cp_slots;
          st.unit_bn_slot[static_cast<size_t>(u)] = st.bn_slots_per_mb;
          st.bn_slots_per_mb += templates_[static_cast<size_t>(u)].bn_slots;
          st.unit_ep_slot[static_cast<size_t>(u)] = st.ep_slots_per_mb;
          st.ep_slots_per_mb += templates_[static_cast<size_t>(u)].ep_slots;
          for (int op : graph_.units()[static_cast<size_t>(u)].ops) {
            st.params += rank_op_params(op, s);
            if (graph_.ops()[static_cast<size_t>(op)].expert) st.expert_params += rank_op_params(op, s);
          }
        }
      }
      st.pp_gather_slot = slot;
      if (tp_ > 1 && !sp_ && pp_ > 1) slot += 2 * vp_;  // one per chunk and direction
      st.slots_per_mb = slot;
      if (needs_buckets()) make_buckets(s, st);
    }
  }

  // Buckets of bucket_size_bytes in the order backward finalizes the gradients: chunks from
  // the last, units and ops reversed. A bucket closes once it holds at least the bucket size
  // (PyTorch DDP / Megatron). Horovod's tensor fusion instead packs the first tensors that fit
  // in the fusion threshold (docs/tensor-fusion.rst): a buffer closes before the gradient that
  // would overflow it, and a larger gradient is a buffer of its own. The tied copy goes into
  // its own bucket, reduced last.
  void make_buckets(int s, StageInfo& st) {
    const bool fusion = plan_.dp_algorithm == DpAlgorithm::horovod;
    Bucket cur;
    Bucket tied;
    Bucket experts;  // ep > 1: routed experts' gradients fill buckets of their own (another group)
    experts.expert = true;
    auto close_bucket = [&](Bucket& bk) {
      if (bk.ops.empty()) return;
      const bool expert = bk.expert;
      st.closing[static_cast<size_t>(bk.ops.back())] = static_cast<int>(st.buckets.size());
      st.buckets.push_back(std::move(bk));
      bk = Bucket{};
      bk.expert = expert;
    };
    auto close = [&] { close_bucket(cur); };
    auto add = [&](Bucket& bk, int op) {
      const double p = rank_op_params(op, s);
      bk.ops.push_back(op);
      bk.grad_bytes += p * grad_elem_;
      bk.param_bytes += p * param_elem(op);
      if (sp_ && graph_.ops()[static_cast<size_t>(op)].tp_split == models::TpSplit::replicated) {
        bk.sp_ops.push_back(op);
        bk.sp_bytes += p * grad_elem_;
      }
    };
    for (int c = vp_ - 1; c >= 0; --c) {
      const auto& a = assignment(s, c);
      for (int u = a.last_unit; u >= a.first_unit; --u) {
        const auto& ops = graph_.units()[static_cast<size_t>(u)].ops;
        for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
          const int op = *it;
          if (rank_op_params(op, s) <= 0) continue;
          const bool is_tied = (op == head_op_ && s == pp_ - 1) || (op == embedding_op_ && s == 0 && head_op_ >= 0);
          if (is_tied) {
            add(tied, op);
            continue;
          }
          Bucket& bk = ep_ > 1 && graph_.ops()[static_cast<size_t>(op)].expert ? experts : cur;
          if (fusion && !bk.ops.empty() && bk.grad_bytes + rank_op_params(op, s) * grad_elem_ > plan_.bucket_size_bytes) close_bucket(bk);
          add(bk, op);
          if (!fusion && bk.grad_bytes >= plan_.bucket_size_bytes) close_bucket(bk);
        }
      }
    }
    close();
    close_bucket(experts);
    if (!tied.ops.empty()) {
      tied.tied = true;
      st.buckets.push_back(std::move(tied));
    }
  }

  int add_group(CommPurpose purpose, std::vector<int> ranks) {
    Group g;
    g.id = static_cast<int>(groups_.size());
    g.purpose = purpose;
    g.ranks = std::move(ranks);
    groups_.push_back(std::move(g));
    return groups_.back().id;
  }

  int rank_of(int d, int t, int s, int c) const { return ((s * dp_ + d) * cp_ + c) * tp_ + t; }

  // The representative of rank (d, t, s, c)'s symmetry class: the (dp, cp) ranks of a (pp, tp)
  // position do equal work. With expert parallelism a class holds the positions with the same
  // ep rank (flat mod ep, flat = d * cp + c), so that shifting a member onto its representative
  // maps ep groups onto ep groups; when neither of ep and cp divides the other that shift does
  // not exist, and every rank is its own class.
  int class_rep(int d, int t, int s, int c) const {
    if (ep_ == 1) return rank_of(0, t, s, 0);
    if (cp_ % ep_ != 0 && ep_ % cp_ != 0) return rank_of(d, t, s, c);
    const int f = (d * cp_ + c) % ep_;
    return rank_of(f / cp_, t, s, f % cp_);
  }

  // Groups, in this order: tp per (pp, dp, cp); cp per (pp, dp, tp); data parallel per (pp, tp)
  // over every (dp, cp) pair (the ranks that hold the same parameters: Megatron's dp-cp group);
  // tied embedding per (dp, cp, tp); the world.
  void setup_groups() {
    if (tp_ > 1)
      for (int s = 0; s < pp_; ++s)
        for (int d = 0; d < dp_; ++d)
          for (int c = 0; c < cp_; ++c) {
            std::vector<int> ranks;
            for (int t = 0; t < tp_; ++t) ranks.push_back(rank_of(d, t, s, c));
            tp_group_.push_back(add_group(CommPurpose::tp, std::move(ranks)));
          }
    if (cp_ > 1)
      for (int s = 0; s < pp_; ++s)
        for (int d = 0; d < dp_; ++d)
          for (int t = 0; t < tp_; ++t) {
            std::vector<int> ranks;
            for (int c = 0; c < cp_; ++c) ranks.push_back(rank_of(d, t, s, c));
            cp_group_.push_back(add_group(CommPurpose::cp, std::move(ranks)));
          }
    if (dpcp_ > 1)
      for (int s = 0; s < pp_; ++s)
        for (int t = 0; t < tp_; ++t) {
          std::vector<int> ranks;
          for (int d = 0; d < dp_; ++d)
            for (int c = 0; c < cp_; ++c) ranks.push_back(rank_of(d, t, s, c));
          dp_group_.push_back(add_group(CommPurpose::dp, std::move(ranks)));
        }
    // Expert parallelism: ep groups of ep consecutive data-parallel positions per (pp, tp)
    // (Megatron-Core's order, ep inside dp: with tp * ep <= GPUs per node they stay on
    // NVLink), and the expert-dp groups of the positions holding the same experts.
    for (auto& ranks : ep_groups(plan_)) ep_group_.push_back(add_group(CommPurpose::ep, std::move(ranks)));
    for (auto& ranks : expert_dp_groups(plan_)) edp_group_.push_back(add_group(CommPurpose::dp, std::move(ranks)));
    if (head_op_ >= 0)
      for (int d = 0; d < dp_; ++d)
        for (int c = 0; c < cp_; ++c)
          for (int t = 0; t < tp_; ++t)
            tied_group_.push_back(add_group(CommPurpose::dp, {rank_of(d, t, 0, c), rank_of(d, t, pp_ - 1, c)}));
    if (world_ > 1) {
      std::vector<int> all(static_cast<size_t>(world_));
      for (int r = 0; r < world_; ++r) all[static_cast<size_t>(r)] = r;
      world_group_ = add_group(CommPurpose::dp, std::move(all));
    }
  }

  // comm_ids: dense ranges per kind, each indexed by group (or sender) and position, so every
  // member computes the same id without seeing the others.
  void setup_comm_ids() {
    int64_t next = 0;
    auto reserve = [&](int64_t n) {
      const int64_t base = next;
      next += n;
      return base;
    };
    if (tp_ > 1) {
      for (int s = 0; s < pp_; ++s)
        for (int d = 0; d < dp_ * cp_; ++d) tp_off_.push_back(reserve(m_ * stages_[static_cast<size_t>(s)].slots_per_mb));
    }
    if (pp_ > 1) pp_base_ = reserve(static_cast<int64_t>(world_) * vp_ * 2 * m_);
    if (tp_ > 1 && sp_) {
      for (int s = 0; s < pp_; ++s)
        for (int d = 0; d < dp_ * cp_; ++d)
          sp_off_.push_back(reserve(red_slots_ * (zero3_ ? num_units_ : static_cast<int64_t>(stages_[static_cast<size_t>(s)].buckets.size()))));
    }
    if (cp_ > 1) {
      for (int s = 0; s < pp_; ++s)
        for (int d = 0; d < dp_ * tp_; ++d) cp_off_.push_back(reserve(m_ * stages_[static_cast<size_t>(s)].cp_slots_per_mb));
    }
    if (sync_bn_) {
      for (int s = 0; s < pp_; ++s)
        for (int t = 0; t < tp_; ++t) bn_off_.push_back(reserve(m_ * stages_[static_cast<size_t>(s)].bn_slots_per_mb));
    }
    if (dpcp_ > 1) {
      for (int s = 0; s < pp_; ++s)
        for (int t = 0; t < tp_; ++t) {
          const int64_t n = static_cast<int64_t>(stages_[static_cast<size_t>(s)].buckets.size());
          dp_red_off_.push_back(reserve(red_slots_ * (zero3_sync_ ? grad_tensor_off_.back() : zero3_ ? num_units_ : n)));
          dp_ag_off_.push_back(reserve(zero3_sync_ ? m_ * 3 * tensor_off_.back() : zero3_ ? m_ * 3 * num_units_ : n));
        }
    }
    if (ep_ > 1) {
      for (int s = 0; s < pp_; ++s)
        for (int i = 0; i < tp_ * edp_; ++i) ep_off_.push_back(reserve(m_ * stages_[static_cast<size_t>(s)].ep_slots_per_mb));
      if (edp_ > 1)
        for (int s = 0; s < pp_; ++s)
          for (int i = 0; i < tp_ * ep_; ++i) {
            const int64_t n = static_cast<int64_t>(stages_[static_cast<size_t>(s)].buckets.size());
            edp_red_off_.push_back(reserve(red_slots_ * n));
            edp_ag_off_.push_back(reserve(n));
          }
    }
    tied_base_ = reserve(static_cast<int64_t>(tied_group_.size()));
    world_id_ = reserve(1);
  }

  void lower_rank(RankProgram& rp) const;

  const Plan& plan_;
  const PlanContext& ctx_;
  const models::ModelGraph& graph_;
  LowerOptions opt_;
  Precision prec_;
  double elem_;
  double grad_elem_;  // bytes per gradient element in the data-parallel reductions (plan::grad_reduce_precision)
  bool fp8_params_ = false;  // FP8 linears' weights are FP8 tensors (Fp8Options::fp8_params)
  double epilogue_bytes_ = 0;  // ZeRO-3: bytes per parameter of the stack's pass before a reduce-scatter (grad_epilogue)
  // Bytes per parameter of `op` as ZeRO gathers it: with fp8_params the FP8 linears' weights
  // are FP8 tensors and Megatron-LM's --fp8-param-gather all-gathers them in FP8 (1 byte).
  double param_elem(int op) const { return fp8_params_ && runs_in_fp8(graph_.ops()[static_cast<size_t>(op)]) ? 1.0 : elem_; }
  int64_t m_, b_;
  int dp_, tp_, pp_, vp_, cp_, dpcp_, ep_, edp_, world_;
  bool sp_, zero3_;
  bool zero3_sync_;  // ZeRO-3 gathers one tensor at a time after a device sync (the stack's zero3_tensor_sync)
  bool sync_bn_;  // the program synchronizes batch norm (the plan asks and dp x cp > 1)
  // ZeRO-2/3 keep 1/n of the gradients (plan::memory's model states), so each micro-batch's
  // gradients are reduced as its backward produces them, never accumulated whole: PyTorch FSDP
  // reduce-scatters in every backward unless no_sync holds unsharded gradients (Composer never
  // enters no_sync under FSDP: ddp_sync_context in composer/trainer/dist_strategy.py yields for a
  // model that is not DistributedDataParallel), and DeepSpeed refuses no_sync under ZeRO-2/3
  // ("no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage",
  // deepspeed/runtime/engine.py). ZeRO-0/1 accumulate whole gradients and reduce once.
  bool grads_every_mb_;
  int64_t red_slots_;  // gradient reductions per bucket or unit and step: m_ or 1
  int num_units_;
  std::vector<UnitTemplate> templates_;
  std::vector<std::vector<int>> gather_ops_;  // ZeRO-3: ops whose parameters a unit's visit gathers
  std::vector<double> gather_bytes_;          // ZeRO-3: their parameters' bytes as gathered (param_elem)
  struct GatherTensor {
    int op;
    double bytes;
  };
  std::vector<std::vector<GatherTensor>> gather_tensors_;  // zero3_sync_: each unit's tensors, gathered one by one
  std::vector<int64_t> tensor_off_;                        // zero3_sync_: first tensor of each unit (prefix sums)
  std::vector<std::vector<GatherTensor>> grad_tensors_;    // zero3_sync_: each unit's gradients, reduce-scattered one by one
  std::vector<int64_t> grad_tensor_off_;                   // zero3_sync_: first gradient of each unit (prefix sums)
  double rank_view_s_ = 0, rank_copy_s_ = 0;  // zero3_sync_: host time of a collective's per-rank views and copies
  int keys_ = 1;
  int head_op_ = -1, embedding_op_ = -1;
  double tied_params_ = 0;
  std::vector<StageInfo> stages_;
  std::vector<Group> groups_;
  std::vector<int> tp_group_, cp_group_, dp_group_, tied_group_, ep_group_, edp_group_;
  int world_group_ = -1;
  std::vector<int64_t> tp_off_, sp_off_, cp_off_, bn_off_, dp_red_off_, dp_ag_off_, ep_off_, edp_red_off_, edp_ag_off_;
  int bn_stream_ = kCp;  // the sync-bn stream's index (after cp's when the program has both)
  int ep_stream_ = kCp;  // the ep stream's index (last)
  int64_t pp_base_ = 0, tied_base_ = 0, world_id_ = 0;
};

// ---- one rank ---------------------------------------------------------------------------

class RankLowering {
 public:
  RankLowering(const Lowering& L, RankProgram& rp)
      : L_(L), rp_(rp), tasks_(rp.tasks), s_(rp.pp_rank), d_(rp.dp_rank), t_(rp.tp_rank), c_(rp.cp_rank),
        st_(L.stages_[static_cast<size_t>(rp.pp_rank)]), mem_(L.opt_.memory_events),
        final_mb_(static_cast<int>(L.m_ - 1)), last_vs_(L.pp_ * L.vp_ - 1) {
    tp_index_ = (s_ * L.dp_ + d_) * L.cp_ + c_;
    cp_index_ = (s_ * L.dp_ + d_) * L.tp_ + t_;
    dp_index_ = s_ * L.tp_ + t_;
    tied_index_ = (d_ * L.cp_ + c_) * L.tp_ + t_;
    tp_group_ = L.tp_ > 1 ? L.tp_group_[static_cast<size_t>(tp_index_)] : -1;
    cp_group_ = L.cp_ > 1 ? L.cp_group_[static_cast<size_t>(cp_index_)] : -1;
    dp_group_ = L.dpcp_ > 1 ? L.dp_group_[static_cast<size_t>(dp_index_)] : -1;
    if (L.ep_ > 1) {
      const int flat = d_ * L.cp_ + c_;
      ep_index_ = (s_ * L.tp_ + t_) * L.edp_ + flat / L.ep_;
      ep_group_ = L.ep_group_[static_cast<size_t>(ep_index_)];
      if (L.edp_ > 1) {
        edp_index_ = (s_ * L.tp_ + t_) * L.ep_ + flat % L.ep_;
        edp_group_ = L.edp_group_[static_cast<size_t>(edp_index_)];
      }
    }
    next_buffer_ = L.m_ * L.num_units_ * L.keys_;
    mb_tag_.reserve(static_cast<size_t>(L.m_));
    for (int64_t i = 0; i < L.m_; ++i) mb_tag_.push_back(" mb" + std::to_string(i));
  }

  void run() {
    tasks_.reserve(estimated_tasks());
    if (mem_) workspace_buffer_ = alloc(kCompute, BufferKind::workspace, L_.ctx_.gpu->cublas_workspace_bytes, {}, "alloc cublas workspace");  // the GPU's, from the catalog
    if (L_.zero3_) plan_visits();
    for (const PipelineStep& step : st_.order) {
      const int vs = step.chunk * L_.pp_ + s_;
      const StageAssignment& a = L_.assignment(s_, step.chunk);
      if (step.phase == Phase::forward) {
        if (vs > 0) receive(Phase::forward, step, vs, a);
        for (int u = a.first_unit; u <= a.last_unit; ++u) forward_unit(u, step);
        if (vs < last_vs_) send(Phase::forward, step, vs, a);
      } else {
        if (vs < last_vs_) receive(Phase::backward, step, vs, a);
        for (int u = a.last_unit; u >= a.first_unit; --u) backward_unit(u, step);
        if (vs > 0) send(Phase::backward, step, vs, a);
      }
    }
    finish_step();
  }

 private:
  // Slightly more than the rank will emit, so that the task vector grows once.
  size_t estimated_tasks() const {
    size_t per_mb = 0;
    for (int c = 0; c < L_.vp_; ++c) {
      const StageAssignment& a = L_.assignment(s_, c);
      for (int u = a.first_unit; u <= a.last_unit; ++u) {
        const UnitTemplate& T = L_.templates_[static_cast<size_t>(u)];
        for (const auto* list : {&T.forward, &T.recompute, &T.backward})
          for (const TemplateItem& item : *list) per_mb += 1 + (mem_ ? item.allocs.size() + item.frees.size() + 2 : 0);
        per_mb += 8;  // checkpoints, ZeRO-3 gathers, bucket chains
        if (L_.zero3_sync_) per_mb += 2 * L_.gather_tensors_[static_cast<size_t>(u)].size();
      }
      per_mb += 12;   // pipeline transfers and their buffers
    }
    return per_mb * static_cast<size_t>(L_.m_) + 8 * st_.buckets.size() + 16;
  }

  // ---- task constructors ----------------------------------------------------------------

  // A new task at the end of the rank's list, built in place. The reference is valid until
  // the next push (callers fill one task at a time).
  Task& push() {
    Task& t = tasks_.emplace_back();
    t.id = static_cast<int>(tasks_.size()) - 1;
    return t;
  }

  std::vector<int> after_compute() const { return last_compute_ >= 0 ? std::vector<int>{last_compute_} : std::vector<int>{}; }

  int64_t alloc(int stream, BufferKind kind, double bytes, std::vector<int> deps, std::string label, int64_t id = -1) {
    if (id < 0) id = next_buffer_++;
    Task& t = push();
    t.kind = TaskKind::alloc;
    t.stream = stream;
    t.deps = std::move(deps);
    t.label = std::move(label);
    t.buffer = kind;
    t.alloc_bytes = bytes;
    t.buffer_id = id;
    return id;
  }

  void release(int stream, BufferKind kind, double bytes, int64_t id, std::vector<int> deps, std::string label) {
    Task& t = push();
    t.kind = TaskKind::free;
    t.stream = stream;
    t.deps = std::move(deps);
    t.label = std::move(label);
    t.buffer = kind;
    t.alloc_bytes = bytes;
    t.buffer_id = id;
  }

  int collective(int stream, int group, CollectiveKind kind, double bytes, CommPurpose purpose, TensorRole role,
                 int64_t comm_id, std::vector<int> deps, std::string label) {
    Task& t = push();
    t.kind = TaskKind::collective;
    t.stream = stream;
    t.deps = std::move(deps);
    t.label = std::move(label);
    t.collective = kind;
    t.group = group;
    t.bytes = bytes;
    t.purpose = purpose;
    t.role = role;
    t.comm_id = comm_id;
    return t.id;
  }

  std::vector<int> take_pending() {
    std::vector<int> deps = after_compute();
    deps.insert(deps.end(), pending_.begin(), pending_.end());
    pending_.clear();
    return deps;
  }

  int64_t activation_buffer(int mb, int unit, int key) const {
    return (static_cast<int64_t>(mb) * L_.num_units_ + unit) * L_.keys_ + key;
  }

  std::string memory_label(const char* what, int mb, int unit, int key) const {
    return std::string(what) + mb_tag_[static_cast<size_t>(mb)] + " " + L_.graph_.units()[static_cast<size_t>(unit)].name + "/" +
           std::to_string(key);
  }

  // ---- layer units ------------------------------------------------------------------------

  void forward_unit(int u, const PipelineStep& step) {
    const UnitTemplate& T = L_.templates_[static_cast<size_t>(u)];
    begin_visit();
    if (mem_ && T.checkpoint_bytes > 0)
      alloc(kCompute, BufferKind::activations, T.checkpoint_bytes, after_compute(), memory_label("alloc ckpt", step.micro_batch, u, T.checkpoint_key),
            activation_buffer(step.micro_batch, u, T.checkpoint_key));
    for (const TemplateItem& item : T.forward) emit(item, u, step, false);
    end_visit();
  }

  void backward_unit(int u, const PipelineStep& step) {
    const UnitTemplate& T = L_.templates_[static_cast<size_t>(u)];
    const bool final = step.micro_batch == final_mb_;
    begin_visit();
    for (const TemplateItem& item : T.recompute) emit(item, u, step, false);
    if (L_.zero3_ && regathers_for_recompute(u)) {  // released after the recomputed forward, gathered again
      end_visit();
      begin_visit();
    }
    for (const TemplateItem& item : T.backward) emit(item, u, step, final);
    if (mem_ && T.checkpoint_bytes > 0)
      release(kCompute, BufferKind::activations, T.checkpoint_bytes, activation_buffer(step.micro_batch, u, T.checkpoint_key),
              after_compute(), memory_label("free ckpt", step.micro_batch, u, T.checkpoint_key));
    end_visit();
    if (L_.zero3_ && (final ? L_.plan_.overlap_grad_reduce : L_.grads_every_mb_)) reduce_unit(u, step.micro_batch);
  }

  void emit(const TemplateItem& item, int u, const PipelineStep& step, bool final) {
    const int mb = step.micro_batch;
    const std::string_view tag = item.phase == Phase::forward ? "fwd" : item.phase == Phase::backward ? "bwd" : "rec";
    if (item.kind == ItemKind::collective) {
      // Tensor-parallel collectives and cp's K, V gathers / dK, dV reduce-scatters: the next
      // compute waits for them, except the backward's prefetched gather (only the attention's
      // task waits for it).
      const bool cp = item.purpose == CommPurpose::cp;
      const bool bn = item.purpose == CommPurpose::sync_bn;
      const bool ep = item.purpose == CommPurpose::ep;
      const int stream = cp ? kCp : bn ? L_.bn_stream_ : ep ? L_.ep_stream_ : kTp;
      std::vector<int> deps = item.prefetch ? after_compute() : take_pending();
      if (mem_)
        for (const MemGroup& g : item.transient_allocs)
          alloc(stream, BufferKind::activations, g.bytes, deps, memory_label("alloc kv", mb, u, g.key), activation_buffer(mb, u, g.key));
      Task& t = push();
      t.kind = TaskKind::collective;
      t.stream = stream;
      t.deps = std::move(deps);
      t.label = item.name + " " + std::string(tag) + mb_tag_[static_cast<size_t>(mb)];
      t.phase = item.phase;
      t.micro_batch = mb;
      t.unit = u;
      t.virtual_stage = step.chunk;
      t.op = item.op;
      t.collective = item.collective;
      t.group = cp ? cp_group_ : bn ? dp_group_ : ep ? ep_group_ : tp_group_;
      t.bytes = item.bytes;
      t.purpose = item.purpose;
      t.role = item.role;
      t.comm_id = cp   ? L_.cp_off_[static_cast<size_t>(cp_index_)] + mb * st_.cp_slots_per_mb + st_.unit_cp_slot[static_cast<size_t>(u)] + item.slot
                  : bn ? L_.bn_off_[static_cast<size_t>(dp_index_)] + mb * st_.bn_slots_per_mb + st_.unit_bn_slot[static_cast<size_t>(u)] + item.slot
                  : ep ? L_.ep_off_[static_cast<size_t>(ep_index_)] + mb * st_.ep_slots_per_mb + st_.unit_ep_slot[static_cast<size_t>(u)] + item.slot
                       : L_.tp_off_[static_cast<size_t>(tp_index_)] + mb * st_.slots_per_mb + st_.unit_slot[static_cast<size_t>(u)] + item.slot;
      const int id = t.id;
      if (item.prefetch) prefetch_ = id;
      else pending_.push_back(id);
      if (mem_)
        for (const MemGroup& g : item.transient_frees)
          release(stream, BufferKind::activations, g.bytes, activation_buffer(mb, u, g.key), {id}, memory_label("free kv", mb, u, g.key));
      return;
    }
    if (mem_) {
      for (const MemGroup& g : item.allocs)
        alloc(kCompute, BufferKind::activations, g.bytes, after_compute(), memory_label("alloc act", mb, u, g.key),
              activation_buffer(mb, u, g.key));
      for (const MemGroup& g : item.transient_allocs)
        alloc(kCompute, BufferKind::activations, g.bytes, after_compute(), memory_label("alloc kv", mb, u, g.key),
              activation_buffer(mb, u, g.key));
    }
    int64_t ws = -1;
    if (mem_ && item.workspace_bytes > 0)
      ws = alloc(kCompute, BufferKind::workspace, item.workspace_bytes, after_compute(), "alloc loss workspace" + mb_tag_[static_cast<size_t>(mb)]);
    std::vector<int> deps = take_pending();
    if (item.waits_prefetch && prefetch_ >= 0) {
      deps.push_back(prefetch_);
      prefetch_ = -1;
    }
    Task& t = push();
    t.kind = TaskKind::compute;
    t.stream = kCompute;
    t.deps = std::move(deps);
    t.label = std::string(tag) + mb_tag_[static_cast<size_t>(mb)] + " " + item.name;
    t.phase = item.phase;
    t.micro_batch = mb;
    t.unit = u;
    t.virtual_stage = step.chunk;
    if (L_.opt_.granularity == Granularity::layer) {
      t.ops = item.ops;
      if (item.ops.size() == 1) t.op = item.ops.front();
    } else {
      t.op = item.ops.front();
    }
    t.flops = item.flops;
    t.mem_bytes = item.mem_bytes;
    t.op_kind = item.op_kind;
    t.gemm_m = item.gemm_m, t.gemm_n = item.gemm_n, t.gemm_k = item.gemm_k;
    const int id = t.id;
    last_compute_ = id;
    if (mem_) {
      if (ws >= 0) release(kCompute, BufferKind::workspace, item.workspace_bytes, ws, {id}, "free loss workspace" + mb_tag_[static_cast<size_t>(mb)]);
      for (const MemGroup& g : item.frees)
        release(kCompute, BufferKind::activations, g.bytes, activation_buffer(mb, u, g.key), {id}, memory_label("free act", mb, u, g.key));
      for (const MemGroup& g : item.transient_frees)
        release(kCompute, BufferKind::activations, g.bytes, activation_buffer(mb, u, g.key), {id}, memory_label("free kv", mb, u, g.key));
      for (const auto& [buf, bytes] : free_after_compute_)
        release(kCompute, BufferKind::comm, bytes, buf, {id}, "free pp recv buffer" + mb_tag_[static_cast<size_t>(mb)]);
      free_after_compute_.clear();
    }
    // The final micro-batch's buckets as the plan overlaps them; with ZeRO-2 every earlier
    // micro-batch's too (grads_every_mb_), except a tied bucket (reduced once, in finish_step).
    if (item.phase == Phase::backward && !L_.zero3_ && (final ? L_.plan_.overlap_grad_reduce : L_.grads_every_mb_))
      for (int op : item.ops) {
        const int bucket = st_.closing[static_cast<size_t>(op)];
        if (bucket >= 0 && (final || !st_.buckets[static_cast<size_t>(bucket)].tied)) reduce_bucket(bucket, mb);
      }
  }

  // ---- pipeline ---------------------------------------------------------------------------

  // Activation (forward) or its gradient (backward) crossing a chunk boundary. Each tp rank
  // moves 1/tp of it (Megatron's scatter-gather; under SP the tensor is already sharded);
  // without SP the receiving tp group all-gathers the whole tensor.
  void receive(Phase phase, const PipelineStep& step, int vs, const StageAssignment& a) {
    const bool fwd = phase == Phase::forward;
    const int peer_vs = fwd ? vs - 1 : vs + 1;
    const int boundary_unit = fwd ? a.first_unit - 1 : a.last_unit;  // whose output crosses
    const double full = L_.graph_.units()[static_cast<size_t>(boundary_unit)].output_elems * static_cast<double>(L_.b_) * L_.elem_ / L_.cp_;
    const double bytes = full / L_.tp_;
    const int peer = L_.rank_of(d_, t_, peer_vs % L_.pp_, c_);
    const int mb = step.micro_batch;
    std::vector<int> deps = after_compute();
    int64_t buf = -1;
    if (mem_) buf = alloc(kPpRecv, BufferKind::comm, bytes, deps, std::string("alloc pp recv buffer") + mb_tag_[static_cast<size_t>(mb)]);
    Task& t = p2p(TaskKind::recv, kPpRecv, std::move(deps),
                  std::string(fwd ? "recv act" : "recv grad") + mb_tag_[static_cast<size_t>(mb)] + " from vs" + std::to_string(peer_vs),
                  phase, step, fwd ? boundary_unit : boundary_unit + 1, peer, bytes, pp_id(peer, peer_vs / L_.pp_, fwd, mb));
    const int unit = t.unit;
    const TensorRole role = t.role;
    const int recv = t.id;
    if (L_.tp_ > 1 && !L_.sp_) {
      Task& g = push();
      g.kind = TaskKind::collective;
      g.stream = kTp;
      g.deps = {recv};
      g.label = std::string(fwd ? "ag pp act" : "ag pp grad") + mb_tag_[static_cast<size_t>(mb)];
      g.phase = phase;
      g.micro_batch = mb;
      g.unit = unit;
      g.virtual_stage = step.chunk;
      g.collective = CollectiveKind::all_gather;
      g.group = L_.tp_group_[static_cast<size_t>(tp_index_)];
      g.bytes = full;
      g.purpose = CommPurpose::pp;
      g.role = role;
      g.comm_id = L_.tp_off_[static_cast<size_t>(tp_index_)] + mb * st_.slots_per_mb + st_.pp_gather_slot + 2 * step.chunk + (fwd ? 0 : 1);
      pending_.push_back(g.id);
    } else {
      pending_.push_back(recv);
    }
    if (mem_) free_after_compute_.emplace_back(buf, bytes);
  }

  void send(Phase phase, const PipelineStep& step, int vs, const StageAssignment& a) {
    const bool fwd = phase == Phase::forward;
    const int peer_vs = fwd ? vs + 1 : vs - 1;
    const int boundary_unit = fwd ? a.last_unit : a.first_unit - 1;
    const double bytes =
        L_.graph_.units()[static_cast<size_t>(boundary_unit)].output_elems * static_cast<double>(L_.b_) * L_.elem_ / L_.cp_ / L_.tp_;
    const int mb = step.micro_batch;
    std::vector<int> deps = after_compute();
    int64_t buf = -1;
    if (mem_) buf = alloc(kPpSend, BufferKind::comm, bytes, deps, std::string("alloc pp send buffer") + mb_tag_[static_cast<size_t>(mb)]);
    const int id = p2p(TaskKind::send, kPpSend, std::move(deps),
                       std::string(fwd ? "send act" : "send grad") + mb_tag_[static_cast<size_t>(mb)] + " to vs" + std::to_string(peer_vs),
                       phase, step, fwd ? a.last_unit : a.first_unit, L_.rank_of(d_, t_, peer_vs % L_.pp_, c_), bytes,
                       pp_id(rp_.rank, step.chunk, fwd, mb))
                       .id;
    if (mem_) release(kPpSend, BufferKind::comm, bytes, buf, {id}, std::string("free pp send buffer") + mb_tag_[static_cast<size_t>(mb)]);
  }

  // A pipeline send or recv: the activation forward (role output) or its gradient backward
  // (role grad_input) of `unit`, exchanged with `peer`.
  Task& p2p(TaskKind kind, int stream, std::vector<int> deps, std::string label, Phase phase, const PipelineStep& step, int unit,
            int peer, double bytes, int64_t comm_id) {
    Task& t = push();
    t.kind = kind;
    t.stream = stream;
    t.deps = std::move(deps);
    t.label = std::move(label);
    t.phase = phase;
    t.micro_batch = step.micro_batch;
    t.unit = unit;
    t.virtual_stage = step.chunk;
    t.peer = peer;
    t.bytes = bytes;
    t.purpose = CommPurpose::pp;
    t.role = phase == Phase::forward ? TensorRole::output : TensorRole::grad_input;
    t.comm_id = comm_id;
    return t;
  }

  int64_t pp_id(int sender, int chunk, bool fwd, int mb) const {
    return L_.pp_base_ + ((static_cast<int64_t>(sender) * L_.vp_ + chunk) * 2 + (fwd ? 0 : 1)) * L_.m_ + mb;
  }

  // ---- ZeRO-3 parameter gathers -------------------------------------------------------------

  struct Visit {
    int unit;
    Phase phase;  // forward; recompute (regathers_for_recompute); backward (with the recomputation otherwise)
    int mb;
  };

  // Whether unit u's recomputation is a visit of its own: the stack releases a module's
  // parameters after each forward, the recomputed one too (hw::SoftwareStack::zero3_recompute_gathers).
  bool regathers_for_recompute(int u) const {
    return L_.ctx_.software.zero3_recompute_gathers && !L_.templates_[static_cast<size_t>(u)].recompute.empty();
  }

  void plan_visits() {
    for (const PipelineStep& step : st_.order) {
      const StageAssignment& a = L_.assignment(s_, step.chunk);
      if (step.phase == Phase::forward)
        for (int u = a.first_unit; u <= a.last_unit; ++u) visits_.push_back({u, Phase::forward, step.micro_batch});
      else
        for (int u = a.last_unit; u >= a.first_unit; --u) {
          if (regathers_for_recompute(u)) visits_.push_back({u, Phase::recompute, step.micro_batch});
          visits_.push_back({u, Phase::backward, step.micro_batch});
        }
    }
    gather_task_.assign(visits_.size(), -1);
    gather_buffer_.assign(visits_.size(), -1);
  }

  // Gathers the parameters of visit i (a unit's forward; its recomputation and backward, as one
  // visit or two): one all-gather of the unit, or (zero3_sync_) one per tensor, each after the
  // previous.
  void gather(size_t i, std::vector<int> deps) {
    const Visit& v = visits_[i];
    const double bytes = L_.gather_bytes_[static_cast<size_t>(v.unit)];
    if (bytes <= 0 || L_.dpcp_ < 2) return;
    const std::string where = mb_tag_[static_cast<size_t>(v.mb)] + " " + L_.graph_.units()[static_cast<size_t>(v.unit)].name;
    if (mem_) gather_buffer_[i] = alloc(kDp, BufferKind::params, bytes, deps, "alloc params" + where);
    const int64_t pass = static_cast<int64_t>(v.mb) * 3 + (v.phase == Phase::forward ? 0 : v.phase == Phase::recompute ? 1 : 2);
    const std::string label =
        std::string("ag params ") + (v.phase == Phase::forward ? "fwd" : v.phase == Phase::recompute ? "rec" : "bwd") + where;
    auto emit_gather = [&](double b, int64_t comm_id, std::vector<int> d, std::vector<int> ops, std::string what) {
      Task& t = tasks_[static_cast<size_t>(
          collective(kDp, dp_group_, CollectiveKind::all_gather, b, CommPurpose::zero_param, TensorRole::params,
                     L_.dp_ag_off_[static_cast<size_t>(dp_index_)] + comm_id, std::move(d), std::move(what)))];
      t.phase = v.phase;
      t.micro_batch = v.mb;
      t.unit = v.unit;
      t.virtual_stage = 0;
      t.ops = std::move(ops);
      return t.id;
    };
    if (!L_.zero3_sync_) {
      gather_task_[i] = emit_gather(bytes, pass * L_.num_units_ + v.unit, std::move(deps), L_.gather_ops_[static_cast<size_t>(v.unit)], label);
      return;
    }
    const auto& tensors = L_.gather_tensors_[static_cast<size_t>(v.unit)];
    const int64_t first = pass * L_.tensor_off_.back() + L_.tensor_off_[static_cast<size_t>(v.unit)];
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int id = emit_gather(tensors[k].bytes, first + static_cast<int64_t>(k), std::move(deps), {tensors[k].op},
                                 label + " tensor" + std::to_string(k));
      // The views are built before the call; PyTorch copies each rank's chunk out after it.
      tasks_[static_cast<size_t>(id)].issue_s = L_.ctx_.software.zero3_tensor_issue_s + L_.rank_view_s_;
      tasks_[static_cast<size_t>(id)].issue_tail_s = L_.rank_copy_s_;
      deps = {id};
      gather_task_[i] = id;
    }
  }

  // At the start of visit i its parameters were requested one visit earlier; request the
  // next visit's now (prefetch), after the previous visit's compute (so two units are held).
  // zero3_sync_: no prefetch; the visit's gathers start after everything the rank issued
  // before (the device synchronize), gradient reductions included.
  void begin_visit() {
    if (!L_.zero3_) return;
    const size_t i = visit_++;
    if (L_.zero3_sync_) {
      std::vector<int> deps = take_pending();
      deps.insert(deps.end(), tails_.begin() + static_cast<std::ptrdiff_t>(synced_tails_), tails_.end());
      synced_tails_ = tails_.size();
      if (params_freed_ >= 0) deps.push_back(params_freed_);  // one gathered unit at a time
      gather(i, std::move(deps));
      if (gather_task_[i] >= 0) pending_.push_back(gather_task_[i]);
      return;
    }
    if (i == 0) gather(0, after_compute());
    if (i + 1 < visits_.size()) {
      std::vector<int> deps = after_compute();
      if (gather_task_[i] >= 0) deps.push_back(gather_task_[i]);
      gather(i + 1, std::move(deps));
    }
    if (gather_task_[i] >= 0) pending_.push_back(gather_task_[i]);
  }

  void end_visit() {
    if (!L_.zero3_) return;
    const size_t i = visit_ - 1;
    if (mem_ && gather_buffer_[i] >= 0) {
      const Visit& v = visits_[i];
      release(kCompute, BufferKind::params, L_.gather_bytes_[static_cast<size_t>(v.unit)], gather_buffer_[i], after_compute(),
              "free params" + mb_tag_[static_cast<size_t>(v.mb)] + " " + L_.graph_.units()[static_cast<size_t>(v.unit)].name);
      params_freed_ = static_cast<int>(tasks_.size()) - 1;
    }
  }

  // ---- gradient reduction ---------------------------------------------------------------------

  // Partial gradients of replicated parameters under sequence parallelism: all-reduce over tp.
  int sp_grad_reduce(const std::vector<int>& ops, double bytes, int64_t comm_id, std::vector<int> deps, const std::string& what) {
    const int id = collective(kTp, tp_group_, CollectiveKind::all_reduce, bytes, CommPurpose::tp, TensorRole::grads, comm_id, std::move(deps),
                              "ar tp sp-grads " + what);
    tasks_[static_cast<size_t>(id)].ops = ops;
    return id;
  }

  // A data-parallel reduction with its communication buffer.
  // `expert`: a bucket of routed experts' gradients, over the expert-dp group.
  int dp_reduce(CollectiveKind kind, CommPurpose purpose, TensorRole role, const std::vector<int>& ops, double bytes, int64_t comm_id,
                std::vector<int> deps, const std::string& label, bool expert = false) {
    int64_t buf = -1;
    if (mem_) buf = alloc(kDp, BufferKind::comm, bytes, deps, "alloc " + label);
    const int id = collective(kDp, expert ? edp_group_ : dp_group_, kind, bytes, purpose, role, comm_id, std::move(deps), label);
    tasks_[static_cast<size_t>(id)].ops = ops;
    if (mem_) release(kDp, BufferKind::comm, bytes, buf, {id}, "free " + label);
    return id;
  }

  CollectiveKind grad_collective() const {
    if (L_.plan_.zero_stage >= 1 || L_.plan_.dp_algorithm == DpAlgorithm::parameter_server) return CollectiveKind::reduce_scatter;
    return CollectiveKind::all_reduce;
  }
  CommPurpose grad_purpose() const {
    if (L_.plan_.dp_algorithm == DpAlgorithm::parameter_server) return CommPurpose::ps;
    return L_.plan_.zero_stage >= 1 ? CommPurpose::zero_grad : CommPurpose::dp;
  }

  // The comm id slot of micro-batch `mb`'s gradient reduction (one per step unless
  // grads_every_mb_).
  int64_t red_slot(int mb) const { return L_.grads_every_mb_ ? mb : 0; }

  // A gradient reduction issued while backward runs: its tail joins tails_; a plan that does not
  // overlap the reduction makes the next compute wait for it.
  void reduction_issued(int tail, int mb) {
    if (tail < 0) return;
    tails_.push_back(tail);
    if (mb != final_mb_ && !L_.plan_.overlap_grad_reduce) pending_.push_back(tail);
  }

  // Bucket `bi` of micro-batch `mb`: [SP all-reduce over tp] -> [tied-embedding all-reduce] ->
  // [dp reduction].
  void reduce_bucket(int bi, int mb) {
    const Bucket& bk = st_.buckets[static_cast<size_t>(bi)];
    const int64_t n = static_cast<int64_t>(st_.buckets.size());
    const int64_t slot = red_slot(mb) * n + bi;
    std::vector<int> deps = after_compute();
    int tail = -1;
    const std::string what = "bucket" + std::to_string(bi) + (L_.grads_every_mb_ ? mb_tag_[static_cast<size_t>(mb)] : "");
    if (L_.sp_ && bk.sp_bytes > 0) {
      tail = sp_grad_reduce(bk.sp_ops, bk.sp_bytes, L_.sp_off_[static_cast<size_t>(tp_index_)] + slot, deps, what);
      deps = {tail};
    }
    if (bk.tied) {
      tail = collective(kDp, L_.tied_group_[static_cast<size_t>(tied_index_)], CollectiveKind::all_reduce, L_.tied_params_ * L_.grad_elem_,
                        CommPurpose::dp, TensorRole::grads, L_.tied_base_ + tied_index_, deps, "ar tied-embedding grads");
      tasks_[static_cast<size_t>(tail)].ops = {L_.embedding_op_, L_.head_op_};
      deps = {tail};
    }
    if (bk.expert ? L_.edp_ > 1 : L_.dpcp_ > 1) {
      const std::string label = std::string(collective_kind_name(grad_collective())) + " " + std::string(comm_purpose_name(grad_purpose())) + " " + what;
      tail = dp_reduce(grad_collective(), grad_purpose(), TensorRole::grads, bk.ops, bk.grad_bytes,
                       (bk.expert ? L_.edp_red_off_[static_cast<size_t>(edp_index_)] : L_.dp_red_off_[static_cast<size_t>(dp_index_)]) + slot,
                       deps, label, bk.expert);
    }
    reduction_issued(tail, mb);
  }

  // The stack's memory-bound pass over the unit's unsharded gradient before its reduce-scatter
  // (hw::SoftwareStack::grad_epilogue: cast to the reduce precision, pre-division), on the
  // compute stream: the next compute waits for it.
  int grad_epilogue(const UnitTemplate& T, int u, int mb, std::vector<int> deps, const std::string& name) {
    Task& t = push();
    t.kind = TaskKind::compute;
    t.stream = kCompute;
    t.deps = std::move(deps);
    t.label = "grad epilogue " + name;
    t.phase = Phase::backward;
    t.micro_batch = mb;
    t.unit = u;
    t.op_kind = static_cast<int>(models::OpKind::residual);  // elementwise, memory-bound
    t.mem_bytes = T.params * L_.epilogue_bytes_;
    last_compute_ = t.id;
    return t.id;
  }

  // ZeRO-3: the unit's gradients of micro-batch `mb`, reduce-scattered once its backward is done
  // (every micro-batch: grads_every_mb_).
  void reduce_unit(int u, int mb) {
    const UnitTemplate& T = L_.templates_[static_cast<size_t>(u)];
    const std::string name = L_.graph_.units()[static_cast<size_t>(u)].name + (L_.grads_every_mb_ ? mb_tag_[static_cast<size_t>(mb)] : "");
    const int64_t slot = red_slot(mb) * L_.num_units_ + u;
    std::vector<int> deps = after_compute();
    int tail = -1;
    if (L_.sp_) {
      std::vector<int> ops;
      double bytes = 0;
      for (int op : T.param_ops)
        if (L_.graph_.ops()[static_cast<size_t>(op)].tp_split == models::TpSplit::replicated) {
          ops.push_back(op);
          bytes += op_params_on_rank(L_.graph_.ops()[static_cast<size_t>(op)], L_.tp_) * L_.grad_elem_;
        }
      if (bytes > 0) {
        tail = sp_grad_reduce(ops, bytes, L_.sp_off_[static_cast<size_t>(tp_index_)] + slot, deps, name);
        deps = {tail};
      }
    }
    if (L_.dpcp_ > 1 && T.params > 0 && L_.zero3_sync_) {
      // One reduce-scatter per gradient tensor, in op order on the dp stream. Each is issued
      // (views, then copies into the flat input) before its call; the host issues the next one
      // while this one moves, so the first carries its issue and each the next one's alongside.
      const auto& grads = L_.grad_tensors_[static_cast<size_t>(u)];
      const double issue = L_.rank_view_s_ + L_.rank_copy_s_;
      const int64_t first = red_slot(mb) * L_.grad_tensor_off_.back() + L_.grad_tensor_off_[static_cast<size_t>(u)];
      for (size_t k = 0; k < grads.size(); ++k) {
        tail = dp_reduce(CollectiveKind::reduce_scatter, CommPurpose::zero_grad, TensorRole::grads, {grads[k].op}, grads[k].bytes,
                         L_.dp_red_off_[static_cast<size_t>(dp_index_)] + first + static_cast<int64_t>(k), deps,
                         "reduce_scatter zero_grad " + name + " tensor" + std::to_string(k));
        tasks_[static_cast<size_t>(tail)].issue_s = k == 0 ? issue : 0.0;
        tasks_[static_cast<size_t>(tail)].issue_tail_s = k + 1 < grads.size() ? issue : 0.0;
        tasks_[static_cast<size_t>(tail)].micro_batch = mb;
        tasks_[static_cast<size_t>(tail)].unit = u;
        deps = {tail};
      }
    } else if (L_.dpcp_ > 1 && T.params > 0) {
      if (L_.epilogue_bytes_ > 0) deps = {grad_epilogue(T, u, mb, deps, name)};
      tail = dp_reduce(CollectiveKind::reduce_scatter, CommPurpose::zero_grad, TensorRole::grads, T.param_ops, T.params * L_.grad_elem_,
                       L_.dp_red_off_[static_cast<size_t>(dp_index_)] + slot, deps, "reduce_scatter zero_grad " + name);
    }
    if (tail >= 0) {
      tasks_[static_cast<size_t>(tail)].micro_batch = mb;
      tasks_[static_cast<size_t>(tail)].unit = u;
    }
    reduction_issued(tail, mb);
  }

  // After the last backward: deferred reductions, the gradient-norm all-reduce, the optimizer
  // step on the rank's shard, ZeRO-1/2 / parameter-server gathers of the updated parameters.
  void finish_step() {
    const bool overlap = L_.plan_.overlap_grad_reduce;
    if (L_.zero3_) {
      if (!overlap)
        for (int c = L_.vp_ - 1; c >= 0; --c)
          for (int u = L_.assignment(s_, c).last_unit; u >= L_.assignment(s_, c).first_unit; --u) reduce_unit(u, final_mb_);
    } else {
      for (size_t bi = 0; bi < st_.buckets.size(); ++bi)
        if (!overlap || st_.buckets[bi].tied) reduce_bucket(static_cast<int>(bi), final_mb_);
    }
    std::vector<int> deps = after_compute();
    deps.insert(deps.end(), tails_.begin(), tails_.end());
    if (L_.world_ > 1)
      deps = {collective(kDp, L_.world_group_, CollectiveKind::all_reduce, 4.0, CommPurpose::dp, TensorRole::grads, L_.world_id_, std::move(deps),
                         "ar world grad-norm")};
    const bool sharded = L_.plan_.zero_stage >= 1 || L_.plan_.dp_algorithm == DpAlgorithm::parameter_server;
    // ZeRO shards the non-expert parameters over dp * cp, the experts' over expert-dp.
    const double shard = sharded ? (st_.params - st_.expert_params) / L_.dpcp_ + st_.expert_params / L_.edp_ : st_.params;
    Task& opt = push();
    opt.kind = TaskKind::compute;
    opt.stream = kCompute;
    opt.deps = std::move(deps);
    opt.label = "optimizer";
    opt.phase = Phase::optimizer;
    opt.flops = 10.0 * shard;
    opt.mem_bytes = (is_mixed(L_.prec_) ? 30.0 : 28.0) * shard;
    last_compute_ = opt.id;
    if (L_.dpcp_ > 1 && !L_.zero3_ && sharded) {
      const CommPurpose purpose = L_.plan_.dp_algorithm == DpAlgorithm::parameter_server ? CommPurpose::ps : CommPurpose::zero_param;
      for (size_t bi = 0; bi < st_.buckets.size(); ++bi) {
        const Bucket& bk = st_.buckets[bi];
        if (bk.expert && L_.edp_ < 2) continue;
        const int64_t base = bk.expert ? L_.edp_ag_off_[static_cast<size_t>(edp_index_)] : L_.dp_ag_off_[static_cast<size_t>(dp_index_)];
        dp_reduce(CollectiveKind::all_gather, purpose, TensorRole::params, bk.ops, bk.param_bytes, base + static_cast<int64_t>(bi),
                  {last_compute_}, "all_gather " + std::string(comm_purpose_name(purpose)) + " bucket" + std::to_string(bi), bk.expert);
      }
    }
    if (mem_) release(kCompute, BufferKind::workspace, L_.ctx_.gpu->cublas_workspace_bytes, workspace_buffer_, after_compute(), "free cublas workspace");
  }

  const Lowering& L_;
  RankProgram& rp_;
  std::vector<Task>& tasks_;
  int s_, d_, t_, c_;
  const StageInfo& st_;
  bool mem_;
  int final_mb_, last_vs_;
  int tp_group_ = -1, cp_group_ = -1, dp_group_ = -1, dp_index_ = 0, tp_index_ = 0, cp_index_ = 0, tied_index_ = 0;
  int ep_group_ = -1, ep_index_ = 0, edp_group_ = -1, edp_index_ = 0;
  int last_compute_ = -1;
  int prefetch_ = -1;                                       // cp: the backward's K, V gather not yet waited for
  std::vector<int> pending_;                                // comm the next compute waits for
  std::vector<std::pair<int64_t, double>> free_after_compute_;  // pp recv buffers
  std::vector<int> tails_;                                  // last task of each gradient reduction
  int64_t next_buffer_ = 0;
  int64_t workspace_buffer_ = -1;
  std::vector<std::string> mb_tag_;
  std::vector<Visit> visits_;
  std::vector<int> gather_task_;
  std::vector<int64_t> gather_buffer_;
  size_t visit_ = 0;
  size_t synced_tails_ = 0;  // zero3_sync_: tails_ the last visit's gathers already waited for
  int params_freed_ = -1;    // the last release of a gathered unit's parameters
};

void Lowering::lower_rank(RankProgram& rp) const { RankLowering(*this, rp).run(); }

}  // namespace

StepProgram lower(const Plan& plan, const PlanContext& ctx, const LowerOptions& options) {
  return Lowering(plan, ctx, options).run();
}

}  // namespace trainplan::plan
