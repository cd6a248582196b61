// MLP classifier on the backend interface (see mlp.hpp).
#include "trainplan/executor/mlp.hpp"

#include <cmath>

#include <fmt/format.h>

#include "model_common.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor {

MlpConfig MlpConfig::from_spec(const models::ModelSpec& spec) {
  if (spec.family != models::Family::mlp)
    throw Error(fmt::format("{}: not an mlp (family {})", spec.name, models::family_name(spec.family)))
        .at(spec.file, "/family");
  MlpConfig c;
  c.widths = spec.mlp_widths;
  c.activation = spec.activation;
  try {
    c.validate();
  } catch (Error& e) {
    e.at(spec.file, e.pointer());
    throw;
  }
  return c;
}

void MlpConfig::validate() const {
  if (widths.size() < 2)
    throw Error(fmt::format("mlp config: needs at least input and output widths, got {}", widths.size()))
        .at("", "/mlp_widths");
  for (size_t i = 0; i < widths.size(); ++i)
    if (widths[i] < 1)
      throw Error(fmt::format("mlp config: width {} is {}, must be >= 1", i, widths[i])).at("", fmt::format("/mlp_widths/{}", i));
  if (models::is_gated(activation))
    throw Error(fmt::format("mlp config: the mlp supports relu and gelu activations, not {}", models::activation_name(activation)))
        .at("", "/activation");
}

struct MlpModel::Impl {
  Backend& be;
  MlpConfig cfg;
  int64_t batch;
  ParameterStore store;
  Tensor input;               // (B, widths[0])
  std::vector<Tensor> pre;    // pre[i]: (B, widths[i+1]) output of linear i
  std::vector<Tensor> post;   // post[i]: activation of pre[i] (hidden layers only)
  Tensor losses, ce_max, ce_sum_exp, labels;
  std::vector<Tensor> dpre, dpost;
  bool have_forward = false;

  Impl(Backend& backend, const MlpConfig& c, int64_t b, DType dtype, std::vector<ParamSpec> specs)
      : be(backend), cfg(c), batch(b), store(backend, dtype, std::move(specs)) {}
  size_t layers() const { return cfg.widths.size() - 1; }
  Tensor w(size_t i) const { return store.param(2 * i); }
  Tensor b(size_t i) const { return store.param(2 * i + 1); }
  // Input of linear i.
  const Tensor& layer_input(size_t i) const { return i == 0 ? input : post[i - 1]; }
};

MlpModel::MlpModel(Backend& backend, const MlpConfig& config, int64_t batch, DType dtype, uint64_t seed) {
  config.validate();
  if (batch < 1) throw Error(fmt::format("mlp model: batch must be >= 1, got {}", batch));
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i + 1 < config.widths.size(); ++i) {
    const double stddev = 1.0 / std::sqrt(static_cast<double>(config.widths[i]));
    specs.push_back({fmt::format("fc{}.weight", i), {config.widths[i + 1], config.widths[i]}, ParamInit::normal, stddev, true});
    specs.push_back({fmt::format("fc{}.bias", i), {config.widths[i + 1]}, ParamInit::constant, 0.0, false});
  }
  impl_ = std::make_unique<Impl>(backend, config, batch, dtype, std::move(specs));
  Impl& m = *impl_;
  Stream& s = backend.default_stream();
  m.store.initialize(s, seed);
  m.input = backend.empty(dtype, {batch, config.widths[0]});
  for (size_t i = 0; i < m.layers(); ++i) {
    m.pre.push_back(backend.empty(dtype, {batch, config.widths[i + 1]}));
    m.dpre.push_back(backend.empty(dtype, {batch, config.widths[i + 1]}));
    if (i + 1 < m.layers()) {
      m.post.push_back(backend.empty(dtype, {batch, config.widths[i + 1]}));
      m.dpost.push_back(backend.empty(dtype, {batch, config.widths[i + 1]}));
    }
  }
  m.losses = backend.empty(dtype, {batch});
  m.ce_max = backend.empty(dtype, {batch});
  m.ce_sum_exp = backend.empty(dtype, {batch});
  m.labels = backend.empty(DType::i32, {batch});
}

MlpModel::~MlpModel() = default;

const MlpConfig& MlpModel::config() const { return impl_->cfg; }
ParameterStore& MlpModel::parameters() { return impl_->store; }

double MlpModel::forward(Stream& s, std::span<const double> inputs, std::span<const int32_t> labels) {
  Impl& m = *impl_;
  Backend& be = m.be;
  const int64_t in = m.cfg.widths.front();
  if (static_cast<int64_t>(inputs.size()) != m.batch * in)
    throw Error(fmt::format("mlp forward: expected {} x {} inputs, got {}", m.batch, in, inputs.size()));
  detail::check_ids(labels, m.batch, m.cfg.widths.back(), "mlp forward: labels");
  be.upload_values(s, m.input, inputs);
  be.upload_ids(s, m.labels, labels);
  for (size_t i = 0; i < m.layers(); ++i) {
    be.linear_forward(s, m.pre[i], m.layer_input(i), m.w(i), m.b(i));
    if (i + 1 == m.layers()) break;
    if (m.cfg.activation == models::Activation::gelu)
      be.gelu_forward(s, m.post[i], m.pre[i]);
    else
      be.relu_forward(s, m.post[i], m.pre[i]);
  }
  be.cross_entropy_forward(s, m.losses, m.ce_max, m.ce_sum_exp, m.pre.back(), m.labels);
  m.have_forward = true;
  return detail::mean_loss(be, s, m.losses);
}

void MlpModel::backward(Stream& s) {
  Impl& m = *impl_;
  Backend& be = m.be;
  if (!m.have_forward) throw Error("mlp backward: call forward first");
  be.ce_backward(s, m.dpre.back(), m.pre.back(), m.labels, 0, m.ce_max, m.ce_sum_exp,
                 1.0 / static_cast<double>(m.batch));
  for (size_t i = m.layers(); i-- > 0;) {
    // The input of the first layer is data: no gradient needed.
    Tensor dinput = i == 0 ? Tensor() : m.dpost[i - 1];
    be.linear_backward(s, dinput, m.store.grad(2 * i), m.store.grad(2 * i + 1), m.dpre[i], m.layer_input(i), m.w(i));
    if (i == 0) break;
    if (m.cfg.activation == models::Activation::gelu)
      be.gelu_backward(s, m.dpre[i - 1], m.pre[i - 1], m.dpost[i - 1]);
    else
      be.relu_backward(s, m.dpre[i - 1], m.pre[i - 1], m.dpost[i - 1]);
  }
}

double MlpModel::train_step(Stream& s, std::span<const double> inputs, std::span<const int32_t> labels,
                            const AdamWConfig& adamw, double max_grad_norm) {
  impl_->store.zero_grads(s);
  double loss = forward(s, inputs, labels);
  backward(s);
  impl_->store.clip_and_step(s, adamw, max_grad_norm);
  return loss;
}

}  // namespace trainplan::executor
