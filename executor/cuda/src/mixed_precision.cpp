// Mixed-precision optimizer (cuda_mixed_precision.hpp).
#include <cmath>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/cuda_mixed_precision.hpp"

namespace trainplan::executor {

MixedPrecisionOptimizer::MixedPrecisionOptimizer(Backend& backend, ParameterStore& model)
    : backend_(backend), model_(model) {
  Stream& s = backend.default_stream();
  const int64_t n = model.total_elements();
  masters_ = backend.empty(DType::f32, {n});
  backend.upload_values(s, masters_, backend.download_values(s, model.params()));
  m_ = backend.zeros(s, DType::f32, {n});
  v_ = backend.zeros(s, DType::f32, {n});
  sum_squares_ = backend.empty(DType::f32, {1});
  scale_ = backend.empty(DType::f32, {1});
}

double MixedPrecisionOptimizer::step(Stream& s, const AdamWConfig& config, double max_grad_norm) {
  ++step_;
  backend_.fill(s, sum_squares_, 0.0);
  backend_.sum_squares(s, sum_squares_, model_.grads());
  backend_.clip_scale(s, scale_, sum_squares_, max_grad_norm);
  // One AdamW call per run of consecutive parameters with the same weight-decay choice.
  size_t i = 0;
  while (i < model_.size()) {
    const bool decay = model_.spec(i).weight_decay;
    size_t j = i + 1;
    while (j < model_.size() && model_.spec(j).weight_decay == decay) ++j;
    const int64_t begin = model_.offset(i);
    const int64_t end = j < model_.size() ? model_.offset(j) : model_.total_elements();
    AdamWConfig c = config;
    if (!decay) c.weight_decay = 0;
    backend_.adamw_step(s, masters_.flat(begin, end), model_.grads().flat(begin, end), m_.flat(begin, end),
                        v_.flat(begin, end), scale_, c, step_, model_.params().flat(begin, end));
    i = j;
  }
  return std::sqrt(backend_.download_values(s, sum_squares_).at(0));
}

size_t MixedPrecisionOptimizer::state_bytes() const {
  return masters_.size_bytes() + m_.size_bytes() + v_.size_bytes();
}

}  // namespace trainplan::executor
