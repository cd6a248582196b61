// Forward and backward of each op kind on one rank, for one micro-batch, with the rank's tensor-
// parallel slices: column / vocab linears produce local output columns, row linears and the
// vocab-parallel embedding produce partial sums that the program's tp collective reduces,
// attention runs the local heads, and under sequence parallelism the replicated ops (norms,
// residuals, position embedding) run on this rank's slice of the token rows.
#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::rt {

using models::OpKind;
using models::TpSplit;

MicroBatchData& RankState::batch(int mb) {
  MicroBatchData& b = batches_[static_cast<size_t>(mb)];
  if (b.ready) return b;
  const int64_t N = L_.rows_full(), rows = L_.rows_per_sample;
  const int64_t first = (dp_rank_ * L_.num_micro_batches + mb) * L_.micro_batch;
  std::vector<int32_t> labels(static_cast<size_t>(N));
  if (data_.decoder()) {
    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int64_t j = 0; j < L_.micro_batch; ++j) {
      const auto off = static_cast<size_t>(j * rows);
      data_.token_sample(step_, first + j, std::span<int32_t>(tokens).subspan(off, static_cast<size_t>(rows)),
                         std::span<int32_t>(labels).subspan(off, static_cast<size_t>(rows)));
    }
    b.tokens = backend_->empty(DType::i32, {N});
    backend_->upload_ids(*stream_, b.tokens, tokens);
    const int64_t Nl = L_.rows_local(), row0 = L_.sp ? tp_rank_ * Nl : 0;
    std::vector<int32_t> pos(static_cast<size_t>(Nl));
    for (int64_t i = 0; i < Nl; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>((row0 + i) % L_.seq_len);
    b.positions_local = backend_->empty(DType::i32, {Nl});
    backend_->upload_ids(*stream_, b.positions_local, pos);
  } else {
    const int64_t width = L_.graph->spec().mlp_widths.front();
    std::vector<double> features(static_cast<size_t>(N * width));
    for (int64_t j = 0; j < L_.micro_batch; ++j)
      data_.feature_sample(step_, first + j,
                           std::span<double>(features).subspan(static_cast<size_t>(j * width), static_cast<size_t>(width)),
                           labels[static_cast<size_t>(j)]);
    b.features = backend_->empty(options_.dtype, {N, width});
    backend_->upload_values(*stream_, b.features, features);
  }
  b.labels = backend_->empty(DType::i32, {N});
  backend_->upload_ids(*stream_, b.labels, labels);
  b.ready = true;
  return b;
}

const Tensor& RankState::input_of(int mb, int consumer, int producer) {
  const Act& a = act(mb, producer);
  if (!a.out.defined())
    throw Error(fmt::format("rank {}: op \"{}\" (micro-batch {}) reads the output of \"{}\", which this rank has not "
                            "computed or received",
                            rank_, L_.op(consumer).name, mb, L_.op(producer).name))
        .hint("check the order of forward, recompute and pipeline recv tasks in the program");
  if (a.partial)
    throw Error(fmt::format("rank {}: op \"{}\" (micro-batch {}) reads the output of \"{}\" before its tensor-parallel "
                            "reduction",
                            rank_, L_.op(consumer).name, mb, L_.op(producer).name))
        .hint("a row-parallel linear or vocab-parallel embedding needs its tp all-reduce / reduce-scatter first");
  return a.out;
}

const Tensor& RankState::saved_output(int mb, int consumer, int producer) {
  const Act& a = act(mb, producer);
  if (!a.out.defined())
    throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) needs the output of \"{}\", which was "
                            "dropped and not recomputed",
                            rank_, L_.op(consumer).name, mb, L_.op(producer).name))
        .hint("a recompute task must re-create dropped activations before the backward that reads them");
  return a.out;
}

void RankState::add_grad(Tensor& target, const Tensor& g) {
  if (!target.defined()) {
    target = backend_->empty(g.dtype(), g.shape());
    backend_->copy(*stream_, target, g);
  } else {
    backend_->accumulate(*stream_, target, g);
  }
}

namespace {

AttentionShape attention_shape(const ModelLayout& L, const models::Op& o) {
  return AttentionShape{L.micro_batch, L.seq_len, o.heads / L.tp, o.kv_heads / L.tp, o.head_dim, o.causal};
}

}  // namespace

void RankState::forward(int mb, int id, bool recompute) {
  const models::Op& o = L_.op(id);
  Backend& be = *backend_;
  Stream& s = *stream_;
  Act& A = act(mb, id);
  const DType dt = options_.dtype;
  Tensor out;
  A.partial = false;
  switch (o.kind) {
    case OpKind::embedding: {
      const Tensor W = weight(id, false);
      MicroBatchData& b = batch(mb);
      if (o.batch_input == models::BatchInput::tokens) {
        out = be.empty(dt, {L_.rows_full(), W.dim(1)});
        const bool split = o.tp_split == TpSplit::vocab && L_.tp > 1;
        const int64_t v0 = split ? L_.vocab_range(o.weight_shape[0], tp_rank_).first : 0;
        be.embedding_forward(s, out, b.tokens, W, v0, false);
        A.partial = split;
      } else {
        out = be.empty(dt, {L_.rows_local(), W.dim(1)});
        be.embedding_forward(s, out, b.positions_local, W, 0, false);
      }
      break;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const Tensor& x = input_of(mb, id, o.inputs[0]);
      out = be.empty(dt, x.shape());
      A.rstd = be.empty(dt, {x.rows()});
      if (o.kind == OpKind::layernorm) {
        A.mean = be.empty(dt, {x.rows()});
        be.layernorm_forward(s, out, A.mean, A.rstd, x, weight(id, false), weight(id, true), o.norm_eps);
      } else {
        be.rmsnorm_forward(s, out, A.rstd, x, weight(id, false), o.norm_eps);
      }
      break;
    }
    case OpKind::linear: {
      Tensor x;
      if (o.inputs.empty()) {
        x = batch(mb).features;
      } else if (L_.column_like(id) && L_.sp) {
        x = act(mb, o.inputs[0]).gathered;
        if (!x.defined())
          throw Error(fmt::format("rank {}: op \"{}\" (micro-batch {}) runs before the sequence-parallel all-gather of "
                                  "its input",
                                  rank_, o.name, mb))
              .hint("under sequence parallelism a column-parallel group's input is all-gathered first");
      } else {
        x = input_of(mb, id, o.inputs[0]);
      }
      if (o.expert) {  // routed experts: each local expert's rows with its weights
        out = be.empty(dt, {x.rows(), o.n});
        expert_linear_forward(mb, id, out, x);
        break;
      }
      const Tensor W = weight(id, false);
      out = be.empty(dt, {x.rows(), W.dim(0)});
      be.linear_forward(s, out, x, W, weight(id, true));
      A.partial = o.tp_split == TpSplit::row && L_.tp > 1;
      break;
    }
    case OpKind::attention: {
      const Tensor& x = input_of(mb, id, o.inputs[0]);
      const AttentionShape sh = attention_shape(L_, o);
      Tensor q = x;
      if (o.rotary) {
        A.qkv_rot = be.empty(dt, x.shape());
        be.rotary(s, A.qkv_rot, x, sh, o.rope_theta, false);
        q = A.qkv_rot;
      }
      out = be.empty(dt, {sh.tokens(), sh.out_cols()});
      A.lse = be.empty(dt, {sh.batch, sh.heads, sh.seq});
      be.attention_forward(s, out, A.lse, q, sh);
      break;
    }
    case OpKind::activation: {
      const Tensor& x = input_of(mb, id, o.inputs[0]);
      if (o.activation == models::Activation::swiglu) {
        out = be.empty(dt, {x.rows(), x.cols() / 2});
        be.swiglu_forward(s, out, x);
      } else {
        out = be.empty(dt, x.shape());
        if (o.activation == models::Activation::gelu)
          be.gelu_forward(s, out, x);
        else
          be.relu_forward(s, out, x);
      }
      break;
    }
    case OpKind::residual: {
      const Tensor& a = input_of(mb, id, o.inputs[0]);
      const Tensor& b = input_of(mb, id, o.inputs[1]);
      out = be.empty(dt, a.shape());
      be.add(s, out, a, b);
      break;
    }
    case OpKind::dropout:  // identity: the executor runs without dropout masks (README)
      out = input_of(mb, id, o.inputs[0]);
      break;
    case OpKind::router:
    case OpKind::moe_dispatch:
    case OpKind::moe_combine: out = moe_forward(mb, id); break;
    case OpKind::loss: {
      const Tensor& logits = input_of(mb, id, o.inputs[0]);
      const Tensor& labels = batch(mb).labels;
      const int64_t N = logits.rows();
      A.recording_loss = !recompute && tp_rank_ == 0;
      A.ce_max = be.empty(dt, {N});
      A.ce_stats = be.empty(dt, {2 * N});  // [sum_exp | target logit]
      A.losses = be.empty(dt, {N});
      A.loss_stats_seen = 0;
      if (o.tp_split == TpSplit::vocab && L_.tp > 1) {
        be.ce_local_max(s, A.ce_max, logits);  // the program's loss_stats all-reduces do the rest
        A.out = Tensor();
        A.release_after_stats = !recompute;    // they read the logits: keep them until then
        return;
      } else {
        be.cross_entropy_forward(s, A.losses, A.ce_max, A.ce_stats.flat(0, N), logits, labels);
        finish_loss(mb, id);
      }
      break;
    }
    default: TP_ASSERT_MSG(false, "op kind rejected by ModelLayout::build");
  }
  A.out = out;
  if (recompute) return;
  // Internals that the recompute task re-creates before this op's backward.
  if (A.recomputed) A.mean = A.rstd = A.lse = A.qkv_rot = Tensor();
  after_forward(mb, id);
}

void RankState::finish_loss(int mb, int id) {
  Act& A = act(mb, id);
  if (!A.recording_loss) return;
  const std::vector<double> losses = download(A.losses);
  for (double l : losses) result_.loss_sum += l;
  result_.loss_rows += static_cast<int64_t>(losses.size());
  A.recording_loss = false;
}

void RankState::after_forward(int mb, int id) {
  // Outputs that recomputation re-creates before any backward reads them go once their
  // forward readers ran.
  for (int p : L_.op(id).inputs) {
    Act& a = act(mb, p);
    if (--a.forward_users_left == 0 && a.drop_out) a.out = Tensor();
  }
}

void RankState::backward(int mb, int id) {
  const models::Op& o = L_.op(id);
  Backend& be = *backend_;
  Stream& s = *stream_;
  Act& A = act(mb, id);
  const DType dt = options_.dtype;
  if (o.kind != OpKind::loss && !A.dout.defined())
    throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) before any gradient of its output arrived",
                            rank_, o.name, mb))
        .hint("check the order of backward and pipeline recv tasks in the program");
  auto saved = [&](int producer) -> const Tensor& { return saved_output(mb, id, producer); };
  switch (o.kind) {
    case OpKind::embedding: {
      const Tensor gw = grad_for(id, false);
      MicroBatchData& b = batch(mb);
      if (o.batch_input == models::BatchInput::tokens) {
        const bool split = o.tp_split == TpSplit::vocab && L_.tp > 1;
        const Tensor& g = split && L_.sp ? A.dout_gathered : A.dout;
        if (!g.defined())
          throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) runs before the sequence-parallel "
                                  "all-gather of its output gradient",
                                  rank_, o.name, mb));
        be.embedding_backward(s, gw, g, b.tokens, split ? L_.vocab_range(o.weight_shape[0], tp_rank_).first : 0);
      } else {
        be.embedding_backward(s, gw, A.dout, b.positions_local, 0);
      }
      break;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm: {
      const Tensor& x = saved(o.inputs[0]);
      Tensor dx = be.empty(dt, x.shape());
      if (o.kind == OpKind::layernorm)
        be.layernorm_backward(s, dx, grad_for(id, false), grad_for(id, true), A.dout, x, weight(id, false), A.mean,
                              A.rstd);
      else
        be.rmsnorm_backward(s, dx, grad_for(id, false), A.dout, x, weight(id, false), A.rstd);
      add_grad(act(mb, o.inputs[0]).dout, dx);
      break;
    }
    case OpKind::linear: {
      Tensor x;
      if (o.inputs.empty())
        x = batch(mb).features;
      else if (L_.column_like(id) && L_.sp)
        x = act(mb, o.inputs[0]).gathered;
      else
        x = saved(o.inputs[0]);
      if (!x.defined())
        throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}): its gathered input is gone", rank_,
                                o.name, mb));
      const bool row_sp = o.tp_split == TpSplit::row && L_.tp > 1 && L_.sp;
      const Tensor& g = row_sp ? A.dout_gathered : A.dout;
      if (!g.defined())
        throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) runs before the sequence-parallel "
                                "all-gather of its output gradient",
                                rank_, o.name, mb))
            .hint("under sequence parallelism a row-parallel linear's output gradient is all-gathered first");
      Tensor dx = o.inputs.empty() ? Tensor() : be.empty(dt, x.shape());
      if (o.expert)
        expert_linear_backward(mb, id, dx, g, x);
      else
        be.linear_backward(s, dx, grad_for(id, false), grad_for(id, true), g, x, weight(id, false));
      if (dx.defined()) {
        Act& in = act(mb, o.inputs[0]);
        add_grad(L_.column_like(id) ? in.dpartial : in.dout, dx);
      }
      break;
    }
    case OpKind::attention: {
      const Tensor& x = saved(o.inputs[0]);
      const AttentionShape sh = attention_shape(L_, o);
      if (!A.out.defined() || !A.lse.defined() || (o.rotary && !A.qkv_rot.defined()))
        throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}): its saved output was dropped and not "
                                "recomputed",
                                rank_, o.name, mb));
      Tensor dq = be.empty(dt, x.shape());
      be.attention_backward(s, dq, A.dout, o.rotary ? A.qkv_rot : x, A.out, A.lse, sh);
      if (o.rotary) be.rotary(s, dq, dq, sh, o.rope_theta, true);
      add_grad(act(mb, o.inputs[0]).dout, dq);
      break;
    }
    case OpKind::activation: {
      const Tensor& x = saved(o.inputs[0]);
      Tensor dx = be.empty(dt, x.shape());
      if (o.activation == models::Activation::swiglu)
        be.swiglu_backward(s, dx, x, A.dout);
      else if (o.activation == models::Activation::gelu)
        be.gelu_backward(s, dx, x, A.dout);
      else
        be.relu_backward(s, dx, x, A.dout);
      add_grad(act(mb, o.inputs[0]).dout, dx);
      break;
    }
    case OpKind::residual:
      add_grad(act(mb, o.inputs[0]).dout, A.dout);
      add_grad(act(mb, o.inputs[1]).dout, A.dout);
      break;
    case OpKind::dropout: add_grad(act(mb, o.inputs[0]).dout, A.dout); break;
    case OpKind::router:
    case OpKind::moe_dispatch:
    case OpKind::moe_combine: moe_backward(mb, id); break;
    case OpKind::loss: {
      const Tensor& logits = saved(o.inputs[0]);
      const int64_t N = logits.rows();
      const bool split = o.tp_split == TpSplit::vocab && L_.tp > 1;
      if (split && A.loss_stats_seen < 2)
        throw Error(fmt::format("rank {}: backward of \"{}\" (micro-batch {}) before its two loss-statistics "
                                "all-reduces",
                                rank_, o.name, mb));
      Tensor dl = be.empty(dt, logits.shape());
      be.ce_backward(s, dl, logits, batch(mb).labels, split ? L_.vocab_range(o.inputs.empty() ? 0 : L_.op(o.inputs[0]).n, tp_rank_).first : 0,
                     A.ce_max, A.ce_stats.flat(0, N), 1.0 / L_.total_label_rows);
      add_grad(act(mb, o.inputs[0]).dout, dl);
      break;
    }
    default: TP_ASSERT_MSG(false, "op kind rejected by ModelLayout::build");
  }
  release_after_backward(mb, id);
}

void RankState::release_after_backward(int mb, int id) {
  auto release = [&](int op) {
    Act& a = act(mb, op);
    if (--a.users_left == 0) a = Act{};
  };
  release(id);
  for (int p : L_.op(id).inputs) release(p);
}

}  // namespace trainplan::executor::rt
