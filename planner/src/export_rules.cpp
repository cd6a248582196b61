// The rules the exports rely on, each with the framework source it was read from (facts only:
// flag names, units, valid values, version lists), and the shared facts of export_rules.hpp.
// planner/README.md prints the same table.
#include "trainplan/planner/export_rules.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::planner {
namespace {

constexpr std::string_view kMegatronArgs = "NVIDIA/Megatron-LM megatron/training/arguments.py (validate_args, commit 000c4ac)";
constexpr std::string_view kDeepSpeedConfig = "deepspeedai/DeepSpeed deepspeed/runtime/config.py (commit 3a890ec)";

constexpr std::array kRules = {
    ExportRule{"all.no-parameter-server",
               "no target runs a parameter server: DeepSpeed, Megatron-LM and torchrun reduce gradients with NCCL collectives, "
               "and the SageMaker PyTorch estimator's distributions are torch_distributed, pytorchddp and smdistributed "
               "(its parameter_server distribution is for TensorFlow and MXNet)",
               "deepspeedai/DeepSpeed deepspeed/runtime/engine.py; aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py "
               "(warn_if_parameter_server_with_multi_gpu), doc/frameworks/pytorch/using_pytorch.rst"},
    ExportRule{"all.no-horovod",
               "no target writes a Horovod job: DeepSpeed, Megatron-LM and torchrun reduce gradients with torch.distributed's "
               "NCCL collectives, and the SageMaker PyTorch estimator's torch_distributed and smdistributed distributions start "
               "torch.distributed entry points (Horovod scripts need its mpi distribution and hvd.DistributedOptimizer in the code)",
               "aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py (validate_distribution); horovod/horovod docs/pytorch.rst"},
    ExportRule{"all.expert-parallel-megatron",
               "expert parallelism is exported as Megatron-LM arguments (--expert-model-parallel-size, --num-experts, "
               "--moe-router-topk, --moe-token-dispatcher-type alltoall); DeepSpeed's MoE layer takes ep_size in the model "
               "code (deepspeed.moe.layer.MoE), and torchrun / SageMaker run the user's script, so those exports cannot set it",
               "NVIDIA/Megatron-LM megatron/training/arguments.py (_add_moe_args); deepspeedai/DeepSpeed deepspeed/moe/layer.py"},
    ExportRule{"all.smddp-sagemaker-only",
               "the SageMaker data parallel library (torch.distributed backend \"smddp\") ships only in SageMaker's training "
               "containers and is enabled by the estimator's smdistributed distribution: DeepSpeed, Megatron-LM and torchrun "
               "jobs elsewhere cannot use it",
               "SageMaker developer guide data-parallel-modify-sdp-pt and distributed-data-parallel-support; "
               "aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py"},
    // DeepSpeed
    ExportRule{"deepspeed.bucket-elements",
               "zero_optimization.reduce_bucket_size and allgather_bucket_size count elements (\"Number of elements "
               "reduced/allreduced at a time\", default 5e8), not bytes",
               "deepspeedai/DeepSpeed deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig, commit cbf3d66); "
               "docs/_pages/config-json.md"},
    ExportRule{"deepspeed.known-keys",
               "zero_optimization and tensor_parallel are pydantic models that refuse unknown keys (extra=\"forbid\"); unknown "
               "top-level keys are ignored silently, so only keys DeepSpeedConfig reads are written",
               "deepspeedai/DeepSpeed deepspeed/runtime/config_utils.py (DeepSpeedConfigModel.model_config); "
               "deepspeed/runtime/config.py (commit 3a890ec)"},
    ExportRule{"deepspeed.pipeline-module",
               "pipeline stages, the layer partition and the activation checkpoint interval are PipelineModule(num_stages, "
               "partition_method, activation_checkpoint_interval) arguments: a \"pipeline\" config block's stages/partition are "
               "parsed by get_pipeline_config but the engine never reads them",
               "deepspeedai/DeepSpeed deepspeed/runtime/config.py (get_pipeline_config, commit 3a890ec); "
               "deepspeed/runtime/pipe/module.py"},
    ExportRule{"deepspeed.batch",
               "train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size",
               kDeepSpeedConfig},
    ExportRule{"deepspeed.precision",
               "mixed precision is bf16.enabled or fp16.enabled; the config has no FP8 setting (FP8 GEMMs come from Transformer "
               "Engine modules under te.fp8_autocast in the model code)",
               "deepspeedai/DeepSpeed docs/_pages/config-json.md (BFLOAT16 / FP16 training options); deepspeed/runtime/config.py"},
    ExportRule{"deepspeed.communication-data-type",
               "gradients are averaged in the training precision unless communication_data_type (fp32, fp16 or bf16) says "
               "otherwise; a plan that reduces its gradients in another precision (plan data_parallel.grad_reduce) says it",
               "deepspeedai/DeepSpeed docs/_pages/config-json.md (communication_data_type); deepspeed/runtime/config.py "
               "(get_communication_data_type)"},
    ExportRule{"deepspeed.autotp",
               "tensor parallelism is AutoTP, tensor_parallel.autotp_size; AutoTP trains with ZeRO stages 0, 1 and 2 (stage 3 only "
               "for inference) and not under the pipeline engine",
               "deepspeedai/DeepSpeed deepspeed/runtime/tensor_parallel/config.py (TPTrainingConfig.autotp_size, commit 18e7227); "
               "docs/_pages/config-json.md \"Tensor Parallel (AutoTP)\" (PR #8167); issue #7147 (AutoTP with pipeline parallelism)"},
    ExportRule{"deepspeed.pipeline-zero", "the pipeline engine runs with ZeRO stage 0 or 1 (ZeRO-2/3 are refused with pipeline parallelism)",
               "deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py (PipelineEngine.__init__)"},
    ExportRule{"deepspeed.pipeline-schedule", "the pipeline engine runs its own 1F1B schedule (TrainSchedule); no GPipe, no interleaving",
               "deepspeedai/DeepSpeed deepspeed/runtime/pipe/schedule.py"},
    ExportRule{"deepspeed.pipeline-partition",
               "PipelineModule splits layers itself (partition_method \"parameters\", \"uniform\" or \"type:<regex>\"); it takes no "
               "explicit per-stage split",
               "deepspeedai/DeepSpeed deepspeed/runtime/pipe/module.py (PipelineModule._partition_layers)"},
    ExportRule{"deepspeed.sequence-parallel",
               "DeepSpeed has no Megatron-style sequence parallelism over the tensor-parallel group, and its sequence parallelism "
               "(Ulysses) all-to-alls heads instead of gathering K, V: a different scheme from the plan's context parallelism",
               "deepspeedai/DeepSpeed deepspeed/sequence/layer.py (DistributedAttention); deepspeed/runtime/tensor_parallel/config.py"},
    // Megatron-LM
    ExportRule{"megatron.known-flags", "every flag written is defined by Megatron-LM's argument parser (argparse refuses others)",
               kMegatronArgs},
    ExportRule{"megatron.ddp-bucket-parameters",
               "--ddp-bucket-size is DistributedDataParallelConfig.bucket_size, the \"Maximum number of parameters in each "
               "bucket\", not bytes",
               "NVIDIA/Megatron-LM megatron/core/distributed/distributed_data_parallel_config.py (commit 0011998); "
               "megatron/training/arguments.py"},
    ExportRule{"megatron.grad-reduce-bf16",
               "with --bf16 gradients are accumulated and all-reduced in fp32 unless --grad-reduce-in-bf16, with --fp16 in fp16 "
               "unless --accumulate-allreduce-grads-in-fp32; a plan with data parallelism says the one that reduces its "
               "gradients in the precision it costs (plan data_parallel.grad_reduce, else its software stack's default: fp32 "
               "on megatron-lm, 16-bit on megatron-core)",
               kMegatronArgs},
    ExportRule{"megatron.cp-comm-type",
               "--cp-comm-type goes unchanged to Transformer Engine's attention, which accepts p2p, all_gather, a2a and a2a+p2p "
               "(\"allgather\", as Megatron's help text spells it, is refused)",
               "NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
               "(attn_forward_func_with_cp, commit 9c61cd7); NVIDIA/Megatron-LM megatron/training/arguments.py"},
    ExportRule{"megatron.cuda-device-max-connections",
               "tensor or context parallelism (tp > 1 or cp > 1) before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS=1 in the "
               "environment, except with FSDP, which asserts it is not 1",
               kMegatronArgs},
    ExportRule{"megatron.fsdp",
               "ZeRO-2/3 is Megatron-FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads (ZeRO-2) or "
               "optim_grads_params (ZeRO-3), with --use-distributed-optimizer --no-gradient-accumulation-fusion --ckpt-format "
               "fsdp_dtensor; ZeRO-1 is --use-distributed-optimizer",
               "NVIDIA/Megatron-LM docs/discussions/megatron-fsdp-user-guide/megatron-fsdp-user-guide.md; "
               "megatron/core/distributed/distributed_data_parallel_config.py (data_parallel_sharding_strategy); "
               "megatron/training/arguments.py (validate_args)"},
    ExportRule{"megatron.precision",
               "--bf16 or --fp16; FP8 is --fp8-format e4m3|hybrid (with --fp8-recipe) on top of --bf16, else the run trains in "
               "fp32",
               "NVIDIA/Megatron-LM megatron/training/arguments.py (_add_mixed_precision_args, _add_transformer_engine_args, "
               "commit 000c4ac)"},
    ExportRule{"megatron.fp8-recipe",
               "FP8 plans carry their recipe: --fp8-recipe delayed|tensorwise|mxfp8|blockwise (current scaling is "
               "tensorwise), delayed scaling with --fp8-amax-history-len (Megatron's default is 1, TE's 1024) and "
               "--fp8-amax-compute-algo, FP8 parameters with --fp8-param-gather (TE fp8_model_init, FP8 all-gather)",
               "NVIDIA/Megatron-LM megatron/training/arguments.py (_add_transformer_engine_args); pretrain_gpt.py "
               "(fp8_param_gather builds the model under fp8_model_init)"},
    ExportRule{"megatron.attention-backend",
               "--attention-backend is flash, fused, unfused, local or auto; Transformer Engine disables FlashAttention and "
               "FusedAttention below sm80, so a V100 (sm70) has only the unfused backend, which keeps the score matrix",
               "NVIDIA/Megatron-LM megatron/core/transformer/enums.py (AttnBackend); NVIDIA/TransformerEngine "
               "transformer_engine/pytorch/attention/dot_product_attention/utils.py (get_attention_backend)"},
    ExportRule{"megatron.models", "Megatron-LM trains transformer language models (GPT, Llama, BERT, T5), not ResNets, MLPs or ViTs "
               "from a GPT script",
               "NVIDIA/Megatron-LM pretrain_gpt.py, pretrain_bert.py"},
    // SageMaker
    ExportRule{"sagemaker.instance-types",
               "instance_type is one of the SageMaker training instance types (ml.g4dn, ml.g5, ml.g6, ml.g6e, ml.p3, ml.p3dn, "
               "ml.p4d, ml.p4de, ml.p5, ml.p5e, ml.p5en, ...), whatever its price listing",
               "SageMaker API TrainingInstanceType (botocore data/sagemaker/2017-07-24/service-2.json), as listed in "
               "youtype/boto3_stubs_docs mypy_boto3_sagemaker/literals.md (TrainingInstanceTypeType)"},
    ExportRule{"sagemaker.framework-version",
               "with torch_distributed, framework_version must be one of TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS, "
               "compared as exact strings (\"2.2.0\"; the \"2.2\" alias only resolves image URIs)",
               "aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py (validate_torch_distributed_distribution, as of PR #4454, "
               "Feb 2024) and src/sagemaker/image_uri_config/pytorch.json (version_aliases)"},
    ExportRule{"sagemaker.distribution",
               "distribution is {\"torch_distributed\": {\"enabled\": True}} (torchrun: any layout the entry point makes, e.g. "
               "Megatron-LM) or {\"smdistributed\": {\"dataparallel\": {\"enabled\": True}}}; the SMP v1 model-parallel form "
               "(placement_strategy only \"spread\" or \"cluster\") is not in current training images",
               "aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py (validate_mp_config, validate_distribution); SageMaker "
               "developer guide \"Use the PyTorch framework estimators\" (data-parallel-framework-estimator)"},
    ExportRule{"sagemaker.smddp-instance-types",
               "the smdistributed data parallel library runs on ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge and "
               "ml.p4de.24xlarge, and without model parallelism or sharding",
               "aws/sagemaker-python-sdk v2 src/sagemaker/fw_utils.py (SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES); SageMaker "
               "developer guide distributed-data-parallel-support"},
    ExportRule{"sagemaker.max-run",
               "max_run (StoppingCondition.MaxRuntimeInSeconds) is at most 28 days; with spot, max_wait >= max_run",
               "SageMaker API StoppingCondition (botocore data/sagemaker/2017-07-24/service-2.json)"},
    ExportRule{"sagemaker.environment",
               "the estimator's environment carries what the training processes need, here CUDA_DEVICE_MAX_CONNECTIONS=1 for "
               "Megatron-LM's tensor or context parallelism",
               "aws/sagemaker-python-sdk v2 src/sagemaker/estimator.py (EstimatorBase environment); " "NVIDIA/Megatron-LM "
               "megatron/training/arguments.py"},
    // torchrun
    ExportRule{"torchrun.launch",
               "torchrun --nnodes N --nproc-per-node K --node-rank R --master-addr A --master-port P starts K processes per node; "
               "the environment before it reaches every process (CUDA_DEVICE_MAX_CONNECTIONS, NCCL_ALGO, FI_PROVIDER)",
               "pytorch/pytorch torch/distributed/run.py (PyTorch 2.x)"},
};

constexpr std::string_view kSageMakerTrainingGpuTypes[] = {
    "ml.g4dn.xlarge",   "ml.g4dn.2xlarge",  "ml.g4dn.4xlarge",  "ml.g4dn.8xlarge",  "ml.g4dn.12xlarge", "ml.g4dn.16xlarge",
    "ml.g5.xlarge",     "ml.g5.2xlarge",    "ml.g5.4xlarge",    "ml.g5.8xlarge",    "ml.g5.12xlarge",   "ml.g5.16xlarge",
    "ml.g5.24xlarge",   "ml.g5.48xlarge",   "ml.g6.xlarge",     "ml.g6.2xlarge",    "ml.g6.4xlarge",    "ml.g6.8xlarge",
    "ml.g6.12xlarge",   "ml.g6.16xlarge",   "ml.g6.24xlarge",   "ml.g6.48xlarge",   "ml.g6e.xlarge",    "ml.g6e.2xlarge",
    "ml.g6e.4xlarge",   "ml.g6e.8xlarge",   "ml.g6e.12xlarge",  "ml.g6e.16xlarge",  "ml.g6e.24xlarge",  "ml.g6e.48xlarge",
    "ml.p2.xlarge",     "ml.p2.8xlarge",    "ml.p2.16xlarge",   "ml.p3.2xlarge",    "ml.p3.8xlarge",    "ml.p3.16xlarge",
    "ml.p3dn.24xlarge", "ml.p4d.24xlarge",  "ml.p4de.24xlarge", "ml.p5.4xlarge",    "ml.p5.48xlarge",   "ml.p5e.48xlarge",
    "ml.p5en.48xlarge", "ml.p6-b200.48xlarge"};
constexpr std::string_view kTorchDistributedVersions[] = {"1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2", "2.2.0"};
constexpr std::string_view kSmddpTypes[] = {"ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge"};
constexpr std::string_view kTeCpCommTypes[] = {"p2p", "all_gather", "a2a", "a2a+p2p"};

}  // namespace

std::span<const ExportRule> export_rules() { return kRules; }

const ExportRule& export_rule(std::string_view id) {
  const auto it = std::find_if(kRules.begin(), kRules.end(), [&](const ExportRule& r) { return r.id == id; });
  TP_ASSERT_MSG(it != kRules.end(), ("no export rule " + std::string(id)).c_str());
  return *it;
}

std::span<const std::string_view> sagemaker_training_instance_types() { return kSageMakerTrainingGpuTypes; }
std::span<const std::string_view> sagemaker_torch_distributed_versions() { return kTorchDistributedVersions; }
std::span<const std::string_view> sagemaker_smddp_instance_types() { return kSmddpTypes; }
std::span<const std::string_view> te_cp_comm_types() { return kTeCpCommTypes; }

int64_t bucket_elements(const plan::Plan& plan, const plan::PlanContext& ctx) {
  // A bucket holds bucket_size_bytes of gradients in the precision they are reduced in.
  return static_cast<int64_t>(std::llround(plan.bucket_size_bytes / bytes_per_element(plan::grad_reduce_precision(plan, ctx))));
}

bool needs_one_cuda_connection(const plan::Plan& plan) { return (plan.tp > 1 || plan.cp > 1) && plan.zero_stage < 2; }

int compute_capability(const plan::PlanContext& ctx) {
  if (!ctx.gpu) return 0;
  const std::string& cc = ctx.gpu->compute_capability;
  const size_t dot = cc.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 >= cc.size()) return 0;
  try {
    return std::stoi(cc.substr(0, dot)) * 10 + std::stoi(cc.substr(dot + 1));
  } catch (...) {
    return 0;
  }
}

std::string_view megatron_fp8_recipe(plan::Fp8Recipe recipe) {
  return recipe == plan::Fp8Recipe::current ? "tensorwise" : plan::fp8_recipe_name(recipe);
}

}  // namespace trainplan::planner
