// build_graph: validates a spec and dispatches to the family's builder.
#include "internal.hpp"

namespace trainplan::models {

ModelGraph build_graph(const ModelSpec& spec) {
  ModelSpec s = detail::finalize_spec(spec);
  validate_spec(s);
  switch (s.family) {
    case Family::gpt:
    case Family::llama:
    case Family::bert:
    case Family::vit: return detail::build_transformer_graph(s);
    case Family::resnet: return detail::build_resnet_graph(s);
    case Family::mlp: return detail::build_mlp_graph(s);
  }
  TP_ASSERT_MSG(false, "unknown family");
  return detail::build_mlp_graph(s);
}

}  // namespace trainplan::models
