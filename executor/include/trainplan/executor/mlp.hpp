// File: trainplan/executor/mlp.hpp
//
// A multi-layer perceptron classifier assembled from the backend's kernels (the catalog's
// `mlp` family): linear layers of widths[0] -> widths[1] -> ... -> widths.back(), with the
// activation between them, and mean cross-entropy over widths.back() classes.
//
//   MlpModel mlp(backend, MlpConfig{{16, 32, 32, 4}}, /*batch=*/8, DType::f32, /*seed=*/1);
//   double loss = mlp.train_step(stream, inputs /*8*16*/, labels /*8*/, AdamWConfig{}, 1.0);
//
// Parameter names "fc<i>.weight" (widths[i+1], widths[i]) and "fc<i>.bias"; weights drawn from
// N(0, 1/widths[i]) (fan-in), biases 0.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/parameters.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::executor {

struct MlpConfig {
  std::vector<int64_t> widths;  // input features, hidden widths..., classes (>= 2 entries)
  models::Activation activation = models::Activation::relu;  // relu or gelu

  /// From a catalog spec of family mlp (its mlp_widths). Error otherwise.
  static MlpConfig from_spec(const models::ModelSpec& spec);
  void validate() const;
};

class MlpModel {
 public:
  MlpModel(Backend& backend, const MlpConfig& config, int64_t batch, DType dtype, uint64_t seed);
  ~MlpModel();
  MlpModel(const MlpModel&) = delete;
  MlpModel& operator=(const MlpModel&) = delete;

  const MlpConfig& config() const;
  ParameterStore& parameters();

  /// inputs: (batch, widths[0]) row-major; labels: batch ids in [0, widths.back()).
  /// Returns the mean cross-entropy (synchronizes); keeps the activations for backward().
  double forward(Stream& stream, std::span<const double> inputs, std::span<const int32_t> labels);
  /// Accumulates the gradients of the last forward's mean loss.
  void backward(Stream& stream);
  /// zero_grads, forward, backward, clip_and_step. Returns the loss before the update.
  double train_step(Stream& stream, std::span<const double> inputs, std::span<const int32_t> labels,
                    const AdamWConfig& adamw, double max_grad_norm);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainplan::executor
