// JSON name tables of the plan's enums. One table per enum, used for reading and writing.
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan {

Recompute unit_recompute(Recompute r, const models::Unit& u) {
  return r == Recompute::full && u.name.rfind("block", 0) != 0 ? Recompute::none : r;
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

std::string_view schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved_1f1b: return "interleaved-1f1b";
  }
  return "?";
}

std::string_view dp_algorithm_name(DpAlgorithm a) {
  switch (a) {
    case DpAlgorithm::ring: return "ring";
    case DpAlgorithm::tree: return "tree";
    case DpAlgorithm::hierarchical: return "hierarchical";
    case DpAlgorithm::parameter_server: return "parameter-server";
    case DpAlgorithm::smddp: return "smddp";
    case DpAlgorithm::horovod: return "horovod";
  }
  return "?";
}

std::string_view purchase_name(Purchase p) {
  return p == Purchase::spot ? "spot" : p == Purchase::capacity_block ? "capacity-block" : "on-demand";
}
std::string_view platform_name(Platform p) { return p == Platform::sagemaker ? "sagemaker" : "ec2"; }
std::string_view attention_impl_name(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::unfused: return "unfused";
    case AttentionImpl::flash1: return "flash1";
    case AttentionImpl::flash: return "flash";
  }
  return "?";
}

std::string_view fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::delayed: return "delayed";
    case Fp8Recipe::current: return "current";
    case Fp8Recipe::mxfp8: return "mxfp8";
    case Fp8Recipe::blockwise: return "blockwise";
  }
  return "?";
}

std::string_view task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::compute: return "compute";
    case TaskKind::send: return "send";
    case TaskKind::recv: return "recv";
    case TaskKind::collective: return "collective";
    case TaskKind::alloc: return "alloc";
    case TaskKind::free: return "free";
  }
  return "?";
}

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::recompute: return "recompute";
    case Phase::optimizer: return "optimizer";
    case Phase::none: return "none";
  }
  return "?";
}

std::string_view collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce: return "reduce";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::barrier: return "barrier";
  }
  return "?";
}

std::string_view comm_purpose_name(CommPurpose p) {
  switch (p) {
    case CommPurpose::tp: return "tp";
    case CommPurpose::pp: return "pp";
    case CommPurpose::dp: return "dp";
    case CommPurpose::zero_grad: return "zero_grad";
    case CommPurpose::zero_param: return "zero_param";
    case CommPurpose::ps: return "ps";
    case CommPurpose::cp: return "cp";
    case CommPurpose::sync_bn: return "sync_bn";
    case CommPurpose::ep: return "ep";
    case CommPurpose::none: return "none";
  }
  return "?";
}

std::string_view tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::none: return "none";
    case TensorRole::output: return "output";
    case TensorRole::input: return "input";
    case TensorRole::grad_output: return "grad_output";
    case TensorRole::grad_input: return "grad_input";
    case TensorRole::params: return "params";
    case TensorRole::grads: return "grads";
    case TensorRole::loss_stats: return "loss_stats";
    case TensorRole::norm_stats: return "norm_stats";
  }
  return "?";
}

std::string_view buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::activations: return "activations";
    case BufferKind::params: return "params";
    case BufferKind::gradients: return "gradients";
    case BufferKind::comm: return "comm";
    case BufferKind::workspace: return "workspace";
  }
  return "?";
}

}  // namespace trainplan::plan
