// Graph structure: topological order, edges, units as a chain, shapes an executor can run.
#include <algorithm>
#include <map>

#include "test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;

namespace {

double numel(const std::vector<int64_t>& shape) {
  double n = 1;
  for (auto d : shape) n *= static_cast<double>(d);
  return n;
}

// Checks that each op's inputs have the shapes the op's kind needs.
void check_shapes(const ModelGraph& g) {
  const ModelSpec& s = g.spec();
  for (const auto& op : g.ops()) {
    INFO(s.name << " " << op.name << " (" << op_kind_name(op.kind) << ")");
    REQUIRE_FALSE(op.out_shape.empty());
    std::vector<std::vector<int64_t>> in;
    for (int i : op.inputs) in.push_back(g.op(i).out_shape);
    switch (op.kind) {
      case OpKind::linear:
        if (in.empty()) {  // the first layer of an mlp reads the batch
          CHECK(op.batch_input == BatchInput::features);
          CHECK(op.k == s.mlp_widths.front());
        } else {
          REQUIRE(in.size() == 1);
          CHECK(numel(in[0]) == static_cast<double>(op.m) * static_cast<double>(op.k));
          CHECK(in[0] == std::vector<int64_t>{op.m, op.k});
        }
        CHECK(op.out_shape == std::vector<int64_t>{op.m, op.n});
        if (op.expert) {  // routed experts: one {k, n} weight (+ {n} bias) per expert
          CHECK(op.weight_shape == std::vector<int64_t>{op.num_experts, op.k, op.n});
          CHECK(op.params == static_cast<double>(op.num_experts * (op.k * op.n + (op.has_bias ? op.n : 0))));
          CHECK(op.m == s.seq_len * s.experts_per_token);
        } else if (op.tied_weight_op >= 0) {
          CHECK(g.op(op.tied_weight_op).weight_shape == std::vector<int64_t>{op.n, op.k});
          CHECK(op.params == (op.has_bias ? static_cast<double>(op.n) : 0.0));
        } else {
          CHECK(op.params == static_cast<double>(op.k * op.n + (op.has_bias ? op.n : 0)));
        }
        break;
      case OpKind::conv2d: {
        CHECK(op.weight_shape.size() == 4);
        CHECK(op.out_shape.size() == 3);
        const int64_t in_c = in.empty() ? s.channels : in[0][0];
        const int64_t in_hw = in.empty() ? s.image_size : in[0][1];
        CHECK(op.weight_shape == std::vector<int64_t>{op.out_shape[0], in_c, op.kernel, op.kernel});
        CHECK(op.out_shape[1] == (in_hw + 2 * op.padding - op.kernel) / op.stride + 1);
        CHECK(op.m == op.out_shape[1] * op.out_shape[2]);
        CHECK(op.k == in_c * op.kernel * op.kernel);
        break;
      }
      case OpKind::attention:
        if (op.v_head_dim > 0) {  // MLA: [q, kv, latent]
          REQUIRE(in.size() == 3);
          const int64_t nope = op.head_dim - op.rotary_dims;
          CHECK(in[0] == std::vector<int64_t>{s.seq_len, op.heads * op.head_dim});
          CHECK(in[1] == std::vector<int64_t>{s.seq_len, op.heads * (nope + op.v_head_dim)});
          CHECK(in[2] == std::vector<int64_t>{s.seq_len, s.kv_lora_rank + op.rotary_dims});
          CHECK(op.out_shape == std::vector<int64_t>{s.seq_len, op.heads * op.v_head_dim});
          break;
        }
        REQUIRE(in.size() == 1);
        CHECK(in[0] == std::vector<int64_t>{s.seq_len, (op.heads + 2 * op.kv_heads) * op.head_dim});
        CHECK(op.out_shape == std::vector<int64_t>{s.seq_len, op.heads * op.head_dim});
        CHECK(op.heads % op.kv_heads == 0);
        CHECK(op.causal == s.is_decoder());
        break;
      case OpKind::activation:
        REQUIRE(in.size() == 1);
        CHECK(numel(in[0]) == (op.activation == Activation::swiglu ? 2 : 1) * numel(op.out_shape));
        break;
      case OpKind::residual:
        REQUIRE(in.size() == 2);
        CHECK(in[0] == op.out_shape);
        CHECK(in[1] == op.out_shape);
        break;
      case OpKind::rmsnorm:
        if (op.name.size() > 13 && op.name.substr(op.name.size() - 13) == ".attn.kv_norm") {  // MLA latent
          REQUIRE(in.size() == 1);
          CHECK(in[0] == std::vector<int64_t>{s.seq_len, s.kv_lora_rank + s.qk_rope_head_dim});
          CHECK(op.out_shape == std::vector<int64_t>{s.seq_len, s.kv_lora_rank});
          break;
        }
        REQUIRE(in.size() == 1);
        CHECK(in[0] == op.out_shape);
        break;
      case OpKind::layernorm:
      case OpKind::batchnorm:
      case OpKind::dropout:
        REQUIRE(in.size() == 1);
        CHECK(in[0] == op.out_shape);
        break;
      case OpKind::embedding:
        CHECK(in.empty());
        CHECK(op.batch_input != BatchInput::none);
        CHECK(op.weight_shape.size() == 2);
        CHECK(op.out_shape.back() == op.weight_shape.back());
        break;
      case OpKind::patch_embed:
        CHECK(op.batch_input == BatchInput::pixels);
        CHECK(op.out_shape == std::vector<int64_t>{s.seq_len, s.hidden});
        break;
      case OpKind::pool:
        REQUIRE(in.size() == 1);
        if (op.pool_mode == PoolMode::global_avg) CHECK(op.out_shape == std::vector<int64_t>{1, in[0][0]});
        if (op.pool_mode == PoolMode::first_token) CHECK(op.out_shape == std::vector<int64_t>{1, in[0][1]});
        break;
      case OpKind::loss:
        REQUIRE(in.size() == 1);
        CHECK(op.batch_input == BatchInput::labels);
        CHECK(op.out_shape == std::vector<int64_t>{1});
        break;
      case OpKind::router:
        REQUIRE(in.size() == 1);
        CHECK(op.weight_shape == std::vector<int64_t>{in[0][1], op.num_experts});
        CHECK(op.out_shape == std::vector<int64_t>{in[0][0], op.top_k});
        CHECK(op.params == static_cast<double>(in[0][1] * op.num_experts));
        break;
      case OpKind::moe_dispatch:
        REQUIRE(in.size() == 2);
        CHECK(g.op(op.inputs[1]).kind == OpKind::router);
        CHECK(op.out_shape == std::vector<int64_t>{in[0][0] * op.top_k, in[0][1]});
        break;
      case OpKind::moe_combine:
        REQUIRE(in.size() == 2);
        CHECK(g.op(op.inputs[0]).expert);
        CHECK(g.op(op.inputs[1]).kind == OpKind::router);
        CHECK(op.out_shape == std::vector<int64_t>{in[0][0] / op.top_k, in[0][1]});
        break;
    }
  }
}

}  // namespace

TEST_CASE("models: every catalog model builds a graph whose op shapes chain", "[models]") {
  for (const auto& spec : ModelCatalog::builtin().specs()) {
    ModelGraph g = build_graph(spec);
    check_shapes(g);
  }
}

TEST_CASE("models: the topological order puts every op after its inputs", "[models]") {
  for (const char* name : {"gpt2-124m", "llama-tiny", "bert-tiny", "vit-tiny", "resnet-50", "mlp"}) {
    ModelGraph g = build_graph(ModelCatalog::builtin().spec(name));
    std::vector<int> order = g.topological_order();
    REQUIRE(order.size() == g.ops().size());
    std::vector<int> position(order.size(), -1);
    for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = static_cast<int>(i);
    CHECK(std::find(position.begin(), position.end(), -1) == position.end());
    for (auto [from, to] : g.edges()) CHECK(position[static_cast<size_t>(from)] < position[static_cast<size_t>(to)]);
    // Edges are exactly the op inputs, and consumers invert them.
    size_t inputs = 0;
    for (const auto& op : g.ops()) {
      inputs += op.inputs.size();
      for (int in : op.inputs) {
        auto c = g.consumers(in);
        CHECK(std::find(c.begin(), c.end(), op.id) != c.end());
      }
    }
    CHECK(inputs == g.edges().size());
  }
}

TEST_CASE("models: residual edges join the block input to both residual adds", "[models]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("gpt-tiny"));
  const Unit& b1 = g.unit(1);
  const int block_input = g.unit(0).output_op;
  const Op& r1 = g.op_named("block1.attn.residual");
  const Op& r2 = g.op_named("block1.mlp.residual");
  CHECK(r1.inputs[0] == block_input);
  CHECK(r2.inputs[0] == r1.id);
  CHECK(b1.output_op == r2.id);
  CHECK(g.consumers(block_input) == std::vector<int>{g.op_named("block1.norm1").id, r1.id});
}

TEST_CASE("models: units are input, one per block, output, ops read only their unit and the previous output",
          "[models]") {
  for (const auto& spec : ModelCatalog::builtin().specs()) {
    ModelGraph g = build_graph(spec);
    const auto& units = g.units();
    INFO(spec.name);
    REQUIRE(units.size() >= 3);
    if (spec.is_transformer()) {
      CHECK(g.num_blocks() == spec.layers);
      CHECK(units.front().name == "embedding");
      for (int u = 0; u + 1 < static_cast<int>(units.size()); ++u)
        CHECK(units[static_cast<size_t>(u)].output_elems ==
              static_cast<double>(spec.seq_len) * static_cast<double>(spec.hidden));
    }
    if (spec.family == Family::resnet) {
      int64_t blocks = 0;
      for (auto b : spec.resnet_blocks) blocks += b;
      CHECK(g.num_blocks() == blocks);
    }
    if (spec.family == Family::mlp) CHECK(g.num_blocks() == static_cast<int>(spec.mlp_widths.size()) - 3);
    CHECK(units.back().name == "head");
    CHECK(units.back().output_elems == 0);
    for (const auto& u : units) {
      CHECK(u.output_op == u.ops.back());
      for (int id : u.ops) {
        const Op& op = g.op(id);
        CHECK(op.unit == u.index);
        for (int in : op.inputs) {
          const Op& producer = g.op(in);
          const bool ok = producer.unit == u.index ||
                          (producer.unit == u.index - 1 && g.unit(u.index - 1).output_op == in);
          CHECK(ok);
        }
      }
    }
  }
}

TEST_CASE("models: GPT block ops split under tensor parallelism as in Megatron-LM", "[models]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("gpt2-124m"));
  const std::map<std::string, TpSplit> expected = {
      {"embed.token", TpSplit::vocab},          {"embed.position", TpSplit::replicated},
      {"block1.norm1", TpSplit::replicated},    {"block1.attn.qkv", TpSplit::column},
      {"block1.attn.core", TpSplit::heads},     {"block1.attn.proj", TpSplit::row},
      {"block1.attn.dropout", TpSplit::replicated}, {"block1.attn.residual", TpSplit::replicated},
      {"block1.mlp.fc1", TpSplit::column},      {"block1.mlp.fc2", TpSplit::row},
      {"head.lm", TpSplit::vocab},              {"head.loss", TpSplit::vocab},
  };
  for (const auto& [name, split] : expected) {
    INFO(name);
    CHECK(g.op_named(name).tp_split == split);
  }
  // The graph must outlive the loop: ops() is a reference into it.
  const ModelGraph resnet = build_graph(ModelCatalog::builtin().spec("resnet-50"));
  for (const auto& op : resnet.ops()) CHECK(op.tp_split == TpSplit::none);
}

TEST_CASE("models: ResNet-50 feature maps shrink 224 -> 112 -> 56 -> 28 -> 14 -> 7", "[models]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("resnet-50"));
  CHECK(g.op_named("stem.conv").out_shape == std::vector<int64_t>{64, 112, 112});
  CHECK(g.op_named("stem.pool").out_shape == std::vector<int64_t>{64, 56, 56});
  CHECK(g.op(g.unit(3).output_op).out_shape == std::vector<int64_t>{256, 56, 56});
  CHECK(g.op(g.unit(7).output_op).out_shape == std::vector<int64_t>{512, 28, 28});
  CHECK(g.op(g.unit(13).output_op).out_shape == std::vector<int64_t>{1024, 14, 14});
  CHECK(g.op(g.unit(16).output_op).out_shape == std::vector<int64_t>{2048, 7, 7});
  CHECK(g.unit(16).output_elems == 2048.0 * 7 * 7);
  CHECK(g.op_named("block4.downsample.conv").stride == 2);
  CHECK(g.op_named("block4.conv2").stride == 2);
}

TEST_CASE("models: a copied graph is independent and equal", "[models]") {
  ModelGraph a = build_graph(ModelCatalog::builtin().spec("vit-tiny"));
  ModelGraph b = a;
  ModelGraph c = std::move(a);
  CHECK(b.total_params() == c.total_params());
  CHECK(b.topological_order() == c.topological_order());
  CHECK(b.ops().size() == c.ops().size());
}

TEST_CASE("models: building the same spec twice gives identical graphs", "[models]") {
  ModelGraph a = build_graph(ModelCatalog::builtin().spec("llama3-8b"));
  ModelGraph b = build_graph(ModelCatalog::builtin().spec("llama3-8b"));
  REQUIRE(a.ops().size() == b.ops().size());
  for (size_t i = 0; i < a.ops().size(); ++i) {
    CHECK(a.ops()[i].name == b.ops()[i].name);
    CHECK(a.ops()[i].flops_fwd == b.ops()[i].flops_fwd);
    CHECK(a.ops()[i].inputs == b.ops()[i].inputs);
  }
  CHECK(a.topological_order() == b.topological_order());
}

TEST_CASE("graph: a copy shares the built graph and reads the same", "[models]") {
  const ModelGraph g = build_graph(resolve_model("gpt3-13b"));
  const ModelGraph copy = g;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the subject
  CHECK(&copy.ops() == &g.ops());
  CHECK(&copy.units() == &g.units());
  CHECK(copy.total_params() == g.total_params());
  CHECK(copy.topological_order() == g.topological_order());
  // A moved-to graph keeps what it was given; the source of the copy is untouched.
  ModelGraph moved = build_graph(resolve_model("gpt3-13b"));
  const double params = moved.total_params();
  const ModelGraph taken = std::move(moved);
  CHECK(taken.total_params() == params);
  CHECK(g.ops().size() == taken.ops().size());
}
