// Private to the report: the parts a step's time splits into, with the colour each part has in
// every chart (the breakdown bars and the Gantt chart use the same colours), and the
// formatting helpers the Markdown and HTML renderers share.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "trainplan/plan/step_program.hpp"

namespace trainplan::reports::report_detail {

enum class Part {
  compute,     // forward + backward (estimate: excluding recomputation)
  forward,     // Gantt only
  backward,    // Gantt only
  recompute,
  optimizer,
  tp,
  cp,
  pp,
  dp,
  zero_grad,
  zero_param,
  ps,
  sync_bn,
  ep,
  bubble,
  io_stall,
  other,
};
inline constexpr size_t kNumParts = static_cast<size_t>(Part::other) + 1;

struct PartInfo {
  std::string_view name;   // legend text
  int color;               // svg::palette_color index
};

inline const PartInfo& part_info(Part p) {
  static const std::array<PartInfo, kNumParts> kInfo = {{
      {"compute", 0},
      {"forward", 0},
      {"backward", 5},
      {"recompute", 9},
      {"optimizer", 4},
      {"TP comm", 1},
      {"CP comm", 13},
      {"PP comm", 2},
      {"DP all-reduce", 3},
      {"ZeRO reduce-scatter", 6},
      {"ZeRO all-gather", 7},
      {"parameter server", 10},
      {"sync batch norm", 3},  // data-parallel group traffic: the DP colour
      {"EP all-to-all", 14},
      {"pipeline bubble", 8},
      {"I/O stall", 11},
      {"other", 12},
  }};
  return kInfo[static_cast<size_t>(p)];
}

/// The part of exposed communication of `purpose`.
inline Part comm_part(plan::CommPurpose purpose) {
  switch (purpose) {
    case plan::CommPurpose::tp: return Part::tp;
    case plan::CommPurpose::pp: return Part::pp;
    case plan::CommPurpose::dp: return Part::dp;
    case plan::CommPurpose::zero_grad: return Part::zero_grad;
    case plan::CommPurpose::zero_param: return Part::zero_param;
    case plan::CommPurpose::ps: return Part::ps;
    case plan::CommPurpose::cp: return Part::cp;
    case plan::CommPurpose::sync_bn: return Part::sync_bn;
    case plan::CommPurpose::ep: return Part::ep;
    case plan::CommPurpose::none: return Part::other;
  }
  return Part::other;
}

}  // namespace trainplan::reports::report_detail
