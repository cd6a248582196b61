// Mixture of experts on one rank: the router, the dispatch of token copies to their experts,
// the routed-expert linears (each local expert's rows with its own weights) and the weighted
// combine, forward and backward; and, with ep > 1, the program's all-to-all tasks (purpose
// ep) that move the copies between the ranks of an expert-parallel group: after the dispatch
// (role output) and before the combine (input) in forward, after the combine's backward
// (grad_input) and before the dispatch's (grad_output). An all-to-all task first exchanges
// the per-expert counts (the receivers size their buffers), then the rows; it runs to
// completion when it starts (every member of an ep group reaches it in the same order).
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::rt {

using models::OpKind;

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

void RankState::moe_dispatch_forward(int mb, int id) {
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
  // Dispatch order: grouped by expert, stable in (token, choice) order. With a capacity factor
  // c > 0 each expert keeps at most ceil(c N k / E) of this rank's copies, lowest token index
  // first; a dropped copy adds nothing to its token (combine row -1).
  const double c = L_.plan->moe_capacity_factor;
  const int64_t capacity = c > 0 ? static_cast<int64_t>(std::ceil(c * static_cast<double>(N * k) / static_cast<double>(E)))
                                 : N * k;
  auto route = std::make_shared<MoeRoute>();
  std::vector<int32_t> copy_token, combine_rows(static_cast<size_t>(N * k), -1);
  route->per_expert.assign(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < k; ++i)
        if (chosen[static_cast<size_t>(j * k + i)] == e && route->per_expert[static_cast<size_t>(e)] < capacity) {
          combine_rows[static_cast<size_t>(j * k + i)] = static_cast<int32_t>(copy_token.size());
          copy_token.push_back(static_cast<int32_t>(j));
          ++route->per_expert[static_cast<size_t>(e)];
        }
  const auto copies_n = static_cast<int64_t>(copy_token.size());
  route->copy_token = be.empty(DType::i32, {copies_n});
  be.upload_ids(s, route->copy_token, copy_token);
  route->combine_rows = be.empty(DType::i32, {N, k});
  be.upload_ids(s, route->combine_rows, combine_rows);
  Tensor copies = be.empty(options_.dtype, {copies_n, x.cols()});
  be.embedding_forward(s, copies, route->copy_token, x, 0, false);  // copy c = x[copy_token[c]]
  A.route = route;
  if (L_.ep == 1) {  // every expert is here: the copies are the experts' rows
    route->expert_rows = route->per_expert;
    A.out = copies;
  } else {  // the program's all-to-all (role output) sends them to their experts' ranks
    A.moe_copies = copies;
    A.out = Tensor();
  }
}

void RankState::moe_route_exchange(MoeRoute& route, int64_t tg) {
  Backend& be = *backend_;
  Stream& s = *stream_;
  const int ep = L_.ep;
  const auto E = static_cast<int64_t>(route.per_expert.size());
  const int64_t local = L_.local_experts(E);
  // Each member learns how many copies of each of its experts every member sends.
  std::vector<int32_t> counts(route.per_expert.begin(), route.per_expert.end());
  Tensor counts_out = be.empty(DType::i32, {E}), counts_in = be.empty(DType::i32, {E});
  be.upload_ids(s, counts_in, counts);
  const std::vector<int64_t> per_member(static_cast<size_t>(ep), local);
  comm_->all_to_all_v(ep_group(), tg, counts_out, per_member, counts_in, per_member);
  const std::vector<int32_t> got = be.download_ids(s, counts_out);  // member m's counts of my experts
  auto got_at = [&](int m, int64_t e) { return static_cast<int64_t>(got[static_cast<size_t>(m * local + e)]); };
  route.send_rows.assign(static_cast<size_t>(ep), 0);
  route.recv_rows.assign(static_cast<size_t>(ep), 0);
  route.expert_rows.assign(static_cast<size_t>(local), 0);
  for (int m = 0; m < ep; ++m)
    for (int64_t e = 0; e < local; ++e) {
      route.send_rows[static_cast<size_t>(m)] += route.per_expert[static_cast<size_t>(m * local + e)];
      route.recv_rows[static_cast<size_t>(m)] += got_at(m, e);
      route.expert_rows[static_cast<size_t>(e)] += got_at(m, e);
    }
  // Received rows come member by member, each member's grouped by my experts; the expert ops
  // read them expert by expert (member 0's copies first).
  std::vector<int32_t> regroup, ungroup;
  int64_t member_start = 0;
  std::vector<int64_t> starts;
  for (int m = 0; m < ep; ++m) {
    starts.push_back(member_start);
    member_start += route.recv_rows[static_cast<size_t>(m)];
  }
  for (int64_t e = 0; e < local; ++e)
    for (int m = 0; m < ep; ++m) {
      int64_t at = starts[static_cast<size_t>(m)];
      for (int64_t f = 0; f < e; ++f) at += got_at(m, f);
      for (int64_t c = 0; c < got_at(m, e); ++c) regroup.push_back(static_cast<int32_t>(at + c));
    }
  ungroup.assign(regroup.size(), 0);
  for (size_t q = 0; q < regroup.size(); ++q) ungroup[static_cast<size_t>(regroup[q])] = static_cast<int32_t>(q);
  route.regroup = be.empty(DType::i32, {static_cast<int64_t>(regroup.size())});
  be.upload_ids(s, route.regroup, regroup);
  route.ungroup = be.empty(DType::i32, {static_cast<int64_t>(ungroup.size())});
  be.upload_ids(s, route.ungroup, ungroup);
}

void RankState::start_moe_all_to_all(const plan::Task& t) {
  const int M = static_cast<int>(L_.num_micro_batches);
  if (t.micro_batch < 0 || t.micro_batch >= M) fail(t, fmt::format("has micro-batch {}, outside [0, {})", t.micro_batch, M));
  if (t.collective != plan::CollectiveKind::all_to_all) fail(t, "expert-parallel tokens move by all-to-all");
  if (L_.ep == 1) fail(t, "an expert-parallel all-to-all in a plan with ep = 1");
  if (t.op < 0 || t.op >= static_cast<int>(local_op_.size()) || !local_op_[static_cast<size_t>(t.op)])
    fail(t, "an expert-parallel all-to-all must name a moe_dispatch or moe_combine of this rank");
  const CommGroup g = group(t.group);
  if (g.ranks != ep_group().ranks)
    fail(t, fmt::format("runs on {}, not this rank's expert-parallel group {}", g.describe(), ep_group().describe()));
  const int mb = t.micro_batch, id = t.op;
  const models::Op& o = L_.op(id);
  const double start = Backend::now_s();
  const int64_t rows_tag = tag(t.comm_id), counts_tag = tag(kMoeCountsCommBase + t.comm_id);
  using plan::TensorRole;
  if (o.kind == OpKind::moe_dispatch && t.role == TensorRole::output) {  // copies -> their experts
    Act& A = act(mb, id);
    if (!A.route || !A.moe_copies.defined()) fail(t, "sends the dispatch's copies before the dispatch ran");
    moe_route_exchange(*A.route, counts_tag);
    A.out = moe_exchange(*A.route, A.moe_copies, true, rows_tag);
    A.moe_copies = Tensor();
  } else if (o.kind == OpKind::moe_combine && t.role == TensorRole::input) {  // expert outputs -> their tokens
    Act& A = act(mb, id);
    A.moe_copies = moe_exchange(route_of(mb, id), input_of(mb, id, o.inputs[0]), false, rows_tag);
  } else if (o.kind == OpKind::moe_combine && t.role == TensorRole::grad_input) {  // copies' gradients -> experts
    Act& Y = act(mb, o.inputs[0]);
    if (!Y.moe_dcopies.defined()) fail(t, "sends the combine's input gradient before the combine's backward ran");
    add_grad(Y.dout, moe_exchange(route_of(mb, id), Y.moe_dcopies, true, rows_tag));
    Y.moe_dcopies = Tensor();
  } else if (o.kind == OpKind::moe_dispatch && t.role == TensorRole::grad_output) {  // experts' gradients -> tokens
    Act& A = act(mb, id);
    if (!A.dout.defined()) fail(t, "returns the dispatch's output gradient before the experts' backward produced it");
    A.moe_dcopies = moe_exchange(route_of(mb, id), A.dout, false, rows_tag);
  } else {
    fail(t, fmt::format("an expert-parallel all-to-all of \"{}\" with role {}", o.name, plan::tensor_role_name(t.role)));
  }
  record(t, start, Backend::now_s());
}

Tensor RankState::moe_forward(int mb, int id) {
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
    case OpKind::moe_dispatch: moe_dispatch_forward(mb, id); return A.out;
    case OpKind::moe_combine: {
      const Tensor& y = input_of(mb, id, o.inputs[0]);
      const Tensor& w = input_of(mb, id, o.inputs[1]);
      const MoeRoute& r = route_of(mb, id);
      if (L_.ep == 1)
        A.moe_copies = y;
      else if (!A.moe_copies.defined())
        throw Error(fmt::format("rank {}: \"{}\" (micro-batch {}) runs before the all-to-all that returns its experts' "
                                "outputs",
                                rank_, o.name, mb))
            .hint("with ep > 1 the program all-to-alls the combine's input (purpose ep, role input) first");
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
  auto saved = [&](int producer) -> const Tensor& { return saved_output(mb, id, producer); };
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
      const Tensor d = L_.ep > 1 ? A.moe_dcopies : A.dout;
      if (!d.defined())
        throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) before the all-to-all that returns its "
                                "copies' gradients",
                                rank_, o.name, mb));
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
      if (L_.ep > 1)  // the program's all-to-all (role grad_input) takes them to the experts
        act(mb, o.inputs[0]).moe_dcopies = dcopies;
      else
        add_grad(act(mb, o.inputs[0]).dout, dcopies);
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

}  // namespace trainplan::executor::rt
