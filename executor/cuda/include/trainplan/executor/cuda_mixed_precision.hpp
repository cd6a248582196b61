// File: trainplan/executor/cuda_mixed_precision.hpp
//
// Mixed-precision training on the CUDA backend: the model (GptModel, MlpModel) keeps its
// parameters and gradients in bf16 (f16 on GPUs without bf16), which the kernels read, and this
// optimizer keeps fp32 master weights and fp32 AdamW moments. A step clips the 16-bit gradients
// by their global norm (summed in fp64), runs AdamW on the masters and writes the updated
// weights back into the model's 16-bit parameters (AdamW's model_copy), as PyTorch AMP with
// an fp32 optimizer does.
//
//   GptModel model(*gpu, cfg, /*batch=*/8, DType::bf16, /*seed=*/1);
//   MixedPrecisionOptimizer opt(*gpu, model.parameters());     // masters = current weights
//   for (...) {
//     model.parameters().zero_grads(s);
//     double loss = model.forward(s, tokens, targets);
//     model.backward(s);
//     double grad_norm = opt.step(s, AdamWConfig{}, /*max_grad_norm=*/1.0);
//   }
//
// Only the Backend interface is used; the CPU backend cannot run it (it has no bf16 kernels).
#pragma once

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/parameters.hpp"

namespace trainplan::executor {

class MixedPrecisionOptimizer {
 public:
  /// fp32 masters initialized from `model`'s current parameters (any floating dtype), zero
  /// moments. `model` must outlive the optimizer.
  MixedPrecisionOptimizer(Backend& backend, ParameterStore& model);

  /// Clipping, AdamW on the masters (weight decay where the model's spec says so), model
  /// weights <- masters. Returns the gradient norm before clipping (synchronizes `stream`).
  /// max_grad_norm <= 0 disables clipping.
  double step(Stream& stream, const AdamWConfig& config, double max_grad_norm);

  /// The fp32 master weights, flat in the model's parameter order.
  const Tensor& masters() const { return masters_; }
  /// Optimizer steps taken.
  int64_t steps() const { return step_; }
  /// Bytes this optimizer holds on the device (masters and moments).
  size_t state_bytes() const;

 private:
  Backend& backend_;
  ParameterStore& model_;
  Tensor masters_, m_, v_, sum_squares_, scale_;
  int64_t step_ = 0;
};

}  // namespace trainplan::executor
