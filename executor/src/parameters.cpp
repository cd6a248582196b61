// Flat parameter storage with AdamW and global-norm clipping (see parameters.hpp).
#include "trainplan/executor/parameters.hpp"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::executor {

ParameterStore::ParameterStore(Backend& backend, DType dtype, std::vector<ParamSpec> specs)
    : backend_(backend), dtype_(dtype), specs_(std::move(specs)) {
  if (!is_floating(dtype) || !backend.supports(dtype))
    throw Error(fmt::format("parameters: the {} backend cannot hold {} master weights", backend.name(),
                            dtype_name(dtype)));
  std::set<std::string> names;
  for (const ParamSpec& s : specs_) {
    if (!names.insert(s.name).second) throw Error(fmt::format("parameters: duplicate name \"{}\"", s.name));
    for (int64_t d : s.shape)
      if (d < 1) throw Error(fmt::format("parameters: {} has shape {}", s.name, shape_string(s.shape)));
    offsets_.push_back(total_);
    total_ += shape_numel(s.shape);
  }
  params_ = backend.empty(dtype, {total_});
  grads_ = backend.empty(dtype, {total_});
  m_ = backend.empty(dtype, {total_});
  v_ = backend.empty(dtype, {total_});
  sum_squares_ = backend.empty(dtype, {1});
  scale_ = backend.empty(dtype, {1});
}

void ParameterStore::initialize(Stream& stream, uint64_t seed) {
  Rng root(seed);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    std::vector<double> values(static_cast<size_t>(shape_numel(s.shape)), s.init_value);
    if (s.init == ParamInit::normal) {
      Rng rng = root.fork(i);
      for (double& x : values) x = rng.normal(0.0, s.init_value);
    }
    backend_.upload_values(stream, param(i), values);
  }
  backend_.fill(stream, grads_, 0.0);
  backend_.fill(stream, m_, 0.0);
  backend_.fill(stream, v_, 0.0);
  step_ = 0;
}

size_t ParameterStore::index(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return i;
  std::vector<std::string> names;
  for (const ParamSpec& s : specs_) names.push_back(s.name);
  throw Error(fmt::format("unknown parameter \"{}\"", name)).hint(suggestion(name, names));
}

Tensor ParameterStore::param(size_t i) const {
  TP_ASSERT(i < specs_.size());
  return params_.flat(offsets_[i], offsets_[i] + shape_numel(specs_[i].shape)).view(specs_[i].shape);
}

Tensor ParameterStore::grad(size_t i) const {
  TP_ASSERT(i < specs_.size());
  return grads_.flat(offsets_[i], offsets_[i] + shape_numel(specs_[i].shape)).view(specs_[i].shape);
}

void ParameterStore::zero_grads(Stream& stream) { backend_.fill(stream, grads_, 0.0); }

double ParameterStore::clip_and_step(Stream& stream, const AdamWConfig& config, double max_grad_norm) {
  backend_.fill(stream, sum_squares_, 0.0);
  backend_.sum_squares(stream, sum_squares_, grads_);
  backend_.clip_scale(stream, scale_, sum_squares_, max_grad_norm);
  ++step_;
  // One AdamW call per parameter so that weight decay follows each spec.
  for (size_t i = 0; i < specs_.size(); ++i) {
    AdamWConfig c = config;
    if (!specs_[i].weight_decay) c.weight_decay = 0;
    int64_t begin = offsets_[i], end = begin + shape_numel(specs_[i].shape);
    backend_.adamw_step(stream, params_.flat(begin, end), grads_.flat(begin, end), m_.flat(begin, end),
                        v_.flat(begin, end), scale_, c, step_, Tensor());
  }
  return std::sqrt(backend_.download_values(stream, sum_squares_)[0]);
}

}  // namespace trainplan::executor
