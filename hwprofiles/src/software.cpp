// Software stacks (software.hpp): the one-line description reports print.
#include "trainplan/hwprofiles/software.hpp"

#include <fmt/format.h>

#include <vector>

#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::hw {

std::string fused_classes(const SoftwareStack& s) {
  std::vector<std::string> fused;
  for (const auto& [op_class, scale] : s.kernels) fused.push_back(scale == 0 ? op_class : fmt::format("{} x{:g}", op_class, scale));
  return join(fused, ", ");
}

std::string describe(const SoftwareStack& s) {
  if (s.name.empty()) return "none (no host overhead modelled)";
  const std::string fused = fused_classes(s);
  std::string extra =
      s.zero3_tensor_sync
          ? fmt::format("; ZeRO-3 gathers one tensor at a time after a device sync, {} each to issue", units::format_duration(s.zero3_tensor_issue_s))
          : "";
  if (s.zero3_rank_view_s + s.zero3_rank_copy_s > 0)
    extra += fmt::format(", plus {} per rank of the group for its view and {} for its copy", units::format_duration(s.zero3_rank_view_s),
                         units::format_duration(s.zero3_rank_copy_s));
  if (s.zero3_recompute_gathers) extra += "; ZeRO-3 gathers a recomputed layer again for its backward";
  if (s.fused_attention == "flash-attn-2") extra += "; fused attention: the flash-attn 2 package (FlashAttention-2 kernels, also on Hopper)";
  if (!s.grad_reduce.empty()) {
    std::vector<std::string> widened;
    for (const auto& [from, to] : s.grad_reduce) widened.push_back(fmt::format("{} in {}", precision_name(from), precision_name(to)));
    extra += fmt::format("; reduces {} gradients{}", join(widened, ", "), s.fp32_main_grads ? " (fp32 main grads)" : "");
  }
  if (s.grad_epilogue) extra += "; casts and pre-divides each unsharded gradient before reducing it";
  return fmt::format("{} (launch {} per kernel, {} per layer and pass, {} per micro-batch, {} per step{}{}{})", s.name,
                     units::format_duration(s.launch_s), units::format_duration(s.layer_hook_s),
                     units::format_duration(s.micro_batch_s), units::format_duration(s.step_s),
                     s.sync_before_optimizer ? ", host sync before the optimizer" : "",
                     fused.empty() ? "" : "; fuses " + fused, extra);
}

}  // namespace trainplan::hw
