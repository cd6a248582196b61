// Mixture of experts on one rank: the router, the dispatch of token copies to their experts
// (an all-to-all over the expert-parallel group when ep > 1), the routed-expert linears (each
// local expert's rows with its own weights) and the weighted combine, forward and backward;
// and the expert gradients' reduction over the ranks holding the same experts.
//
// The step program (plan::lower) names no task for this communication yet: the all-to-alls
// run inside the dispatch and combine compute tasks (blocking: every member of an ep group
// runs the same ops in the same order), and the expert gradients are all-reduced before the
// gradient norm; both are listed in the Timeline's meta.implicit_communication.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::rt {

using models::OpKind;

namespace {
// Parts of moe_tag: a dispatch exchanges counts, then rows; a combine rows; a backward rows.
enum MoePart { kCounts = 0, kDispatchRows = 1, kCombineRows = 2, kBackwardRows = 3 };
}  // namespace

CommGroup RankState::ep_group() const {
  const int base = static_cast<int>(L_.program->groups.size()) + 1 + L_.pp * L_.dp;
  CommGroup g{base + (pp_rank_ * L_.tp + tp_rank_) * L_.dp + dp_rank_ / L_.ep, {}, "ep"};
  for (int i = 0; i < L_.ep; ++i) g.ranks.push_back(L_.program->rank_of(dp_rank_ / L_.ep * L_.ep + i, tp_rank_, pp_rank_));
  return g;
}

CommGroup RankState::expert_dp_group() const {
  const int base = static_cast<int>(L_.program->groups.size()) + 1 + L_.pp * L_.dp + L_.pp * L_.tp * L_.dp;
  CommGroup g{base + (pp_rank_ * L_.tp + tp_rank_) * L_.ep + ep_rank_, {}, "expert_dp"};
  for (int d = ep_rank_; d < L_.dp; d += L_.ep) g.ranks.push_back(L_.program->rank_of(d, tp_rank_, pp_rank_));
  return g;
}

int64_t RankState::moe_tag(int op_id, int mb, bool recompute, int part) const {
  const int64_t id = kMoeCommBase + ((static_cast<int64_t>(op_id) * L_.num_micro_batches + mb) * 2 + (recompute ? 1 : 0)) * 4 + part;
  TP_ASSERT(id < kExpertGradCommId);
  return tag(id);
}

void RankState::note_implicit(const std::string& what) {
  if (std::find(result_.implicit.begin(), result_.implicit.end(), what) == result_.implicit.end())
    result_.implicit.push_back(what);
}

MoeRoute& RankState::route_of(int mb, int op_id) {
  const int d = L_.op(op_id).kind == OpKind::moe_dispatch ? op_id : L_.moe_dispatch_of[static_cast<size_t>(op_id)];
  TP_ASSERT(d >= 0);
  Act& a = act(mb, d);
  if (!a.route)
    throw Error(fmt::format("rank {}: op \"{}\" (micro-batch {}) runs before \"{}\" routed its tokens", rank_,
                            L_.op(op_id).name, mb, L_.op(d).name))
        .hint("check the order of forward and recompute tasks in the program");
  return *a.route;
}

void RankState::moe_dispatch_forward(int mb, int id, bool recompute) {
  const models::Op& o = L_.op(id);
  Backend& be = *backend_;
  Stream& s = *stream_;
  Act& A = act(mb, id);
  const Tensor& x = input_of(mb, id, o.inputs[0]);
  const Act& R = act(mb, o.inputs[1]);
  if (!R.moe_experts.defined())
    throw Error(fmt::format("rank {}: \"{}\" (micro-batch {}) runs before its router", rank_, o.name, mb));
  const int64_t N = x.rows(), k = R.moe_experts.cols(), E = o.num_experts;
  const std::vector<int32_t> chosen = be.download_ids(s, R.moe_experts);
  // Dispatch order: grouped by expert, stable in (token, choice) order.
  auto route = std::make_shared<MoeRoute>();
  std::vector<int32_t> copy_token, combine_rows(static_cast<size_t>(N * k));
  std::vector<int64_t> per_expert(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < k; ++i)
        if (chosen[static_cast<size_t>(j * k + i)] == e) {
          combine_rows[static_cast<size_t>(j * k + i)] = static_cast<int32_t>(copy_token.size());
          copy_token.push_back(static_cast<int32_t>(j));
          ++per_expert[static_cast<size_t>(e)];
        }
  const auto R_rows = static_cast<int64_t>(copy_token.size());
  route->copy_token = be.empty(DType::i32, {R_rows});
  be.upload_ids(s, route->copy_token, copy_token);
  route->combine_rows = be.empty(DType::i32, {N, k});
  be.upload_ids(s, route->combine_rows, combine_rows);
  Tensor copies = be.empty(options_.dtype, {R_rows, x.cols()});
  be.embedding_forward(s, copies, route->copy_token, x, 0, false);  // copy c = x[copy_token[c]]
  if (L_.ep == 1) {
    route->expert_rows = per_expert;
    A.out = copies;
    A.route = route;
    return;
  }
  // ep > 1: each member learns how many copies of each of its experts every member sends.
  note_implicit("MoE dispatch / combine: all-to-all over the expert-parallel group inside the compute tasks");
  const int ep = L_.ep;
  const int64_t local = L_.local_experts(E);
  const CommGroup g = ep_group();
  std::vector<int32_t> counts(per_expert.begin(), per_expert.end());
  Tensor counts_out = be.empty(DType::i32, {E}), counts_in = be.empty(DType::i32, {E});
  be.upload_ids(s, counts_in, counts);
  const std::vector<int64_t> per_member(static_cast<size_t>(ep), local);
  comm_->all_to_all_v(g, moe_tag(id, mb, recompute, kCounts), counts_out, per_member, counts_in, per_member);
  const std::vector<int32_t> got = be.download_ids(s, counts_out);  // member i's counts of my experts
  route->send_rows.assign(static_cast<size_t>(ep), 0);
  route->recv_rows.assign(static_cast<size_t>(ep), 0);
  route->expert_rows.assign(static_cast<size_t>(local), 0);
  for (int m = 0; m < ep; ++m)
    for (int64_t e = 0; e < local; ++e) {
      route->send_rows[static_cast<size_t>(m)] += per_expert[static_cast<size_t>(m * local + e)];
      route->recv_rows[static_cast<size_t>(m)] += got[static_cast<size_t>(m * local + e)];
      route->expert_rows[static_cast<size_t>(e)] += got[static_cast<size_t>(m * local + e)];
    }
  // Received rows come member by member, each member's grouped by my experts; the expert
  // ops read them expert by expert.
  std::vector<int32_t> regroup, ungroup;
  std::vector<int64_t> member_start(static_cast<size_t>(ep), 0);
  for (int m = 1; m < ep; ++m)
    member_start[static_cast<size_t>(m)] = member_start[static_cast<size_t>(m - 1)] + route->recv_rows[static_cast<size_t>(m - 1)];
  for (int64_t e = 0; e < local; ++e)
    for (int m = 0; m < ep; ++m) {
      int64_t at = member_start[static_cast<size_t>(m)];
      for (int64_t f = 0; f < e; ++f) at += got[static_cast<size_t>(m * local + f)];
      for (int64_t c = 0; c < got[static_cast<size_t>(m * local + e)]; ++c) regroup.push_back(static_cast<int32_t>(at + c));
    }
  ungroup.assign(regroup.size(), 0);
  for (size_t q = 0; q < regroup.size(); ++q) ungroup[static_cast<size_t>(regroup[q])] = static_cast<int32_t>(q);
  route->regroup = be.empty(DType::i32, {static_cast<int64_t>(regroup.size())});
  be.upload_ids(s, route->regroup, regroup);
  route->ungroup = be.empty(DType::i32, {static_cast<int64_t>(ungroup.size())});
  be.upload_ids(s, route->ungroup, ungroup);
  A.out = moe_exchange(*route, copies, true, moe_tag(id, mb, recompute, kDispatchRows));
  A.route = route;
}

Tensor RankState::moe_forward(int mb, int id, bool recompute) {
  const models::Op& o = L_.op(id);
  Backend& be = *backend_;
  Stream& s = *stream_;
  Act& A = act(mb, id);
  const DType dt = options_.dtype;
  switch (o.kind) {
    case OpKind::router: {  // logits = x W^T, then softmax and top-k: out = the kept weights
      const Tensor& x = input_of(mb, id, o.inputs[0]);
      const Tensor W = weight(id, false);
      Tensor logits = be.empty(dt, {x.rows(), W.dim(0)});
      be.linear_forward(s, logits, x, W, Tensor());
      Tensor out = be.empty(dt, {x.rows(), o.top_k});
      A.moe_experts = be.empty(DType::i32, {x.rows(), o.top_k});
      A.moe_probs = be.empty(dt, {x.rows(), W.dim(0)});
      be.router_forward(s, out, A.moe_experts, A.moe_probs, logits);
      return out;
    }
    case OpKind::moe_dispatch: moe_dispatch_forward(mb, id, recompute); return A.out;
    case OpKind::moe_combine: {
      const Tensor& y = input_of(mb, id, o.inputs[0]);
      const Tensor& w = input_of(mb, id, o.inputs[1]);
      const MoeRoute& r = route_of(mb, id);
      A.moe_copies = L_.ep > 1 ? moe_exchange(r, y, false, moe_tag(id, mb, recompute, kCombineRows)) : y;
      Tensor out = be.empty(dt, {w.rows(), y.cols()});
      be.moe_combine_forward(s, out, A.moe_copies, w, r.combine_rows);
      return out;
    }
    default: TP_ASSERT_MSG(false, "not a MoE op"); return Tensor();
  }
}

void RankState::moe_backward(int mb, int id) {
  const models::Op& o = L_.op(id);
  Backend& be = *backend_;
  Stream& s = *stream_;
  Act& A = act(mb, id);
  const DType dt = options_.dtype;
  auto saved = [&](int producer) -> const Tensor& {
    const Act& a = act(mb, producer);
    if (!a.out.defined())
      throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) needs the output of \"{}\", which was "
                              "dropped and not recomputed",
                              rank_, o.name, mb, L_.op(producer).name));
    return a.out;
  };
  switch (o.kind) {
    case OpKind::router: {
      const Tensor& x = saved(o.inputs[0]);
      Tensor dlogits = be.empty(dt, A.moe_probs.shape());
      be.router_backward(s, dlogits, A.dout, A.out, A.moe_experts, A.moe_probs);
      Tensor dx = be.empty(dt, x.shape());
      be.linear_backward(s, dx, grad_for(id, false), Tensor(), dlogits, x, weight(id, false));
      add_grad(act(mb, o.inputs[0]).dout, dx);
      return;
    }
    case OpKind::moe_dispatch: {  // the copies' gradients summed into their tokens
      const MoeRoute& r = route_of(mb, id);
      Tensor d = L_.ep > 1 ? moe_exchange(r, A.dout, false, moe_tag(id, mb, false, kBackwardRows)) : A.dout;
      Tensor dx = be.zeros(s, dt, saved(o.inputs[0]).shape());
      be.embedding_backward(s, dx, d, r.copy_token, 0);
      add_grad(act(mb, o.inputs[0]).dout, dx);
      return;
    }
    case OpKind::moe_combine: {
      const MoeRoute& r = route_of(mb, id);
      const Tensor& w = saved(o.inputs[1]);
      Tensor dcopies = be.empty(dt, A.moe_copies.shape()), dw = be.empty(dt, w.shape());
      be.moe_combine_backward(s, dcopies, dw, A.dout, A.moe_copies, w, r.combine_rows);
      add_grad(act(mb, o.inputs[1]).dout, dw);
      Tensor dy = L_.ep > 1 ? moe_exchange(r, dcopies, true, moe_tag(id, mb, false, kBackwardRows)) : dcopies;
      add_grad(act(mb, o.inputs[0]).dout, dy);
      return;
    }
    default: TP_ASSERT_MSG(false, "not a MoE op");
  }
}

Tensor RankState::moe_exchange(const MoeRoute& r, const Tensor& rows, bool to_experts, int64_t tg) {
  Backend& be = *backend_;
  Stream& s = *stream_;
  const int64_t C = rows.cols();
  auto total = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  std::vector<int64_t> send = to_experts ? r.send_rows : r.recv_rows, recv = to_experts ? r.recv_rows : r.send_rows;
  Tensor in = rows;
  if (!to_experts) {  // local expert order -> the order the members sent them in
    in = be.empty(options_.dtype, {rows.rows(), C});
    be.embedding_forward(s, in, r.ungroup, rows, 0, false);
  }
  Tensor out = be.empty(options_.dtype, {total(recv), C});
  for (int64_t& c : send) c *= C;
  for (int64_t& c : recv) c *= C;
  comm_->all_to_all_v(ep_group(), tg, out, recv, in, send);
  if (!to_experts) return out;
  Tensor grouped = be.empty(options_.dtype, {out.rows(), C});
  be.embedding_forward(s, grouped, r.regroup, out, 0, false);
  return grouped;
}

void RankState::expert_linear_forward(int mb, int id, const Tensor& out, const Tensor& x) {
  const MoeRoute& r = route_of(mb, id);
  const models::Op& o = L_.op(id);
  const Tensor W = weight(id, false), b = weight(id, true);
  int64_t at = 0;
  for (size_t e = 0; e < r.expert_rows.size(); ++e) {
    const int64_t n = r.expert_rows[e], row0 = static_cast<int64_t>(e) * o.n;
    if (n > 0)
      backend_->linear_forward(*stream_, out.slice_rows(at, at + n), x.slice_rows(at, at + n),
                               W.slice_rows(row0, row0 + o.n), b.defined() ? b.flat(row0, row0 + o.n) : Tensor());
    at += n;
  }
  TP_ASSERT(at == x.rows());
}

void RankState::expert_linear_backward(int mb, int id, const Tensor& dx, const Tensor& dout, const Tensor& x) {
  const MoeRoute& r = route_of(mb, id);
  const models::Op& o = L_.op(id);
  const Tensor W = weight(id, false), gw = grad_for(id, false), gb = grad_for(id, true);
  int64_t at = 0;
  for (size_t e = 0; e < r.expert_rows.size(); ++e) {
    const int64_t n = r.expert_rows[e], row0 = static_cast<int64_t>(e) * o.n;
    if (n > 0)
      backend_->linear_backward(*stream_, dx.defined() ? dx.slice_rows(at, at + n) : Tensor(),
                                gw.slice_rows(row0, row0 + o.n), gb.defined() ? gb.flat(row0, row0 + o.n) : Tensor(),
                                dout.slice_rows(at, at + n), x.slice_rows(at, at + n), W.slice_rows(row0, row0 + o.n));
    at += n;
  }
  TP_ASSERT(at == x.rows());
}

void RankState::reduce_expert_grads() {
  if (L_.ep == 1 || expert_grads_reduced_) return;
  expert_grads_reduced_ = true;
  std::vector<Param*> experts;
  for (Param& p : params_)
    if (L_.expert_sharded(p.def)) experts.push_back(&p);
  if (experts.empty()) return;
  note_implicit("MoE: all-reduce of the routed experts' gradients over the expert-data-parallel group");
  int64_t K = 0;
  for (Param* p : experts) K += p->numel;
  Tensor buf = backend_->zeros(*stream_, options_.dtype, {K});
  int64_t off = 0;
  for (Param* p : experts) {
    if (p->reduced.defined())
      throw Error(fmt::format("rank {}: the program reduced the gradient of {}, which the runtime reduces over its "
                              "expert-data-parallel group",
                              rank_, L_.params[static_cast<size_t>(p->def)].name));
    if (p->grad.defined()) backend_->copy(*stream_, buf.flat(off, off + p->numel), p->grad.view({p->numel}));
    off += p->numel;
  }
  const CommGroup g = expert_dp_group();
  if (g.size() > 1) comm_->all_reduce(g, tag(kExpertGradCommId), buf, ReduceOp::sum);
  off = 0;
  for (Param* p : experts) {
    p->reduced = buf.flat(off, off + p->numel);
    p->reduced_is_shard = false;
    if (p->grad.defined()) backend_->fill(*stream_, p->grad, 0.0);
    p->grad_dirty = false;
    off += p->numel;
  }
}

}  // namespace trainplan::executor::rt
