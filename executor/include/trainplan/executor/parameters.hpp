// File: trainplan/executor/parameters.hpp
//
// A model's parameters, gradients and AdamW state in four flat device tensors, with one
// named view per parameter. Flat storage lets the optimizer, gradient clipping and (later)
// ZeRO sharding work on contiguous ranges.
//
//   std::vector<ParamSpec> specs = {
//       {"wte", {vocab, hidden}, ParamInit::normal, 0.02, /*weight_decay=*/true},
//       {"ln.bias", {hidden}, ParamInit::constant, 0.0, false}};
//   ParameterStore store(backend, DType::f32, specs);
//   store.initialize(stream, /*seed=*/1);
//   Tensor w = store.param(0), dw = store.grad(0);     // (vocab, hidden) views
//   store.zero_grads(stream);
//   ... forward / backward accumulate into the grads ...
//   double grad_norm = store.clip_and_step(stream, AdamWConfig{}, /*max_grad_norm=*/1.0);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

enum class ParamInit {
  normal,    // N(0, value^2)
  constant,  // every element = value (norm weights 1, biases 0)
};

struct ParamSpec {
  std::string name;   // "block0.attn.qkv.weight"
  Shape shape;        // weights (out, in); embeddings (rows, C)
  ParamInit init = ParamInit::normal;
  double init_value = 0.02;  // stddev (normal) or the constant
  bool weight_decay = true;  // false for biases and norm weights
};

class ParameterStore {
 public:
  /// Allocates params, grads, m and v (all `dtype`, the master precision) for `specs`.
  /// Names must be unique.
  ParameterStore(Backend& backend, DType dtype, std::vector<ParamSpec> specs);

  /// Draws the initial values (deterministic for a seed: parameter i uses Rng(seed).fork(i)),
  /// zeroes grads and AdamW state, and resets the step count.
  void initialize(Stream& stream, uint64_t seed);

  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  /// Index of a parameter by name; Error (with a suggestion) if unknown.
  size_t index(const std::string& name) const;
  /// Element offset of parameter i in the flat tensors.
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t total_elements() const { return total_; }
  DType dtype() const { return dtype_; }

  /// Views of parameter i (its spec's shape) in the flat tensors.
  Tensor param(size_t i) const;
  Tensor grad(size_t i) const;
  /// The flat tensors (total_elements()).
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  const Tensor& adam_m() const { return m_; }
  const Tensor& adam_v() const { return v_; }

  void zero_grads(Stream& stream);
  /// Global-norm clipping then one AdamW step on every parameter (weight decay only where the
  /// spec says so). Returns the gradient norm before clipping (synchronizes the stream).
  /// max_grad_norm <= 0 disables clipping.
  double clip_and_step(Stream& stream, const AdamWConfig& config, double max_grad_norm);
  /// AdamW steps taken since initialize().
  int64_t step() const { return step_; }

 private:
  Backend& backend_;
  DType dtype_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  Tensor params_, grads_, m_, v_;
  Tensor sum_squares_, scale_;  // 1 element each
  int64_t step_ = 0;
};

}  // namespace trainplan::executor
