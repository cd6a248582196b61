// Operator graphs of the non-transformer models: bottleneck ResNets (torchvision's v1.5
// layout: stride on the 3x3 conv) and ReLU MLPs. Neither is split by tensor parallelism
// (tp_split none).
//
// Saved activations: a conv or linear saves its input, a batchnorm its input, a max pool
// its input; a ReLU saves nothing because the next conv counts the same tensor (the last
// ReLU, read by the global average pool, counts its output); a downsample conv saves
// nothing because conv1 of its block counts the same input.
#include <fmt/format.h>

#include <numeric>

#include "builder.hpp"
#include "internal.hpp"

namespace trainplan::models::detail {
namespace {

struct Feature {
  int op;        // producer op id (-1: the batch)
  int64_t c, hw; // channels and (square) side
};

int64_t conv_out(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

class ResNetBuilder {
 public:
  explicit ResNetBuilder(const ModelSpec& spec) : spec_(spec), b_(spec) {}

  ModelGraph build() {
    b_.begin_unit("stem");
    Feature x{-1, spec_.channels, spec_.image_size};
    x = conv("stem.conv", x, spec_.resnet_width, 7, 2, 3, true);
    x = batchnorm("stem.bn", x);
    x = relu("stem.relu", x, false);
    x = max_pool("stem.pool", x);
    int block = 0;
    const int total = static_cast<int>(std::accumulate(spec_.resnet_blocks.begin(), spec_.resnet_blocks.end(), int64_t{0}));
    for (size_t stage = 0; stage < spec_.resnet_blocks.size(); ++stage) {
      const int64_t width = spec_.resnet_width << stage;
      for (int64_t j = 0; j < spec_.resnet_blocks[stage]; ++j) {
        ++block;
        b_.begin_unit(fmt::format("block{}", block));
        const int64_t stride = (stage > 0 && j == 0) ? 2 : 1;
        x = bottleneck(fmt::format("block{}", block), x, width, stride, block == total);
      }
    }
    b_.begin_unit("head");
    Op gap = make_elementwise("head.pool", OpKind::pool, TpSplit::none, {x.op}, {1, x.c}, {0, 0});
    gap.pool_mode = PoolMode::global_avg;
    const double in = elems({x.c, x.hw, x.hw});
    gap.flops_fwd = in;
    gap.flops_bwd = in;
    gap.mem_elems_fwd = in + static_cast<double>(x.c);
    gap.mem_elems_bwd = in + static_cast<double>(x.c);
    const int gap_id = b_.add(std::move(gap));
    Op fc = make_linear("head.fc", TpSplit::none, gap_id, 1, x.c, spec_.num_classes, true);
    set_saved(fc, static_cast<double>(x.c), 0, false);
    const int fc_id = b_.add(std::move(fc));
    Op loss = make_loss("head.loss", TpSplit::none, fc_id, 1, spec_.num_classes);
    set_saved(loss, static_cast<double>(spec_.num_classes), 0, false);
    b_.add(std::move(loss));
    return b_.finish();
  }

 private:
  Feature conv(const std::string& name, Feature x, int64_t out_c, int64_t kernel, int64_t stride, int64_t padding,
               bool saves_input) {
    const int64_t out_hw = conv_out(x.hw, kernel, stride, padding);
    // The im2col view: (out_hw^2 x Cin k^2) times (Cin k^2 x Cout).
    Op op = make_linear(name, TpSplit::none, x.op, out_hw * out_hw, x.c * kernel * kernel, out_c, false);
    op.kind = OpKind::conv2d;
    if (x.op < 0) op.batch_input = BatchInput::pixels;
    op.kernel = kernel;
    op.stride = stride;
    op.padding = padding;
    op.out_shape = {out_c, out_hw, out_hw};
    op.weight_shape = {out_c, x.c, kernel, kernel};
    const double in = elems({x.c, x.hw, x.hw}), out = elems(op.out_shape), w = op.params;
    op.mem_elems_fwd = in + w + out;
    op.mem_elems_bwd = out + in + 2 * w + (x.op >= 0 ? in : 0);
    set_saved(op, saves_input ? in : 0, 0, false);
    return {b_.add(std::move(op)), out_c, out_hw};
  }

  Feature batchnorm(const std::string& name, Feature x) {
    Op op = make_norm(name, OpKind::batchnorm, x.op, {x.c, x.hw, x.hw}, x.c, true, spec_.norm_eps);
    set_saved(op, elems(op.out_shape), 0, false);
    return {b_.add(std::move(op)), x.c, x.hw};
  }

  Feature relu(const std::string& name, Feature x, bool saves_output) {
    Op op = make_activation(name, Activation::relu, TpSplit::none, x.op, {x.c, x.hw, x.hw});
    set_saved(op, saves_output ? elems(op.out_shape) : 0, 0, false);
    return {b_.add(std::move(op)), x.c, x.hw};
  }

  Feature max_pool(const std::string& name, Feature x) {
    const int64_t kernel = 3, stride = 2, padding = 1;
    const int64_t out_hw = conv_out(x.hw, kernel, stride, padding);
    Op op = make_elementwise(name, OpKind::pool, TpSplit::none, {x.op}, {x.c, out_hw, out_hw}, {0, 0});
    op.pool_mode = PoolMode::max;
    op.kernel = kernel;
    op.stride = stride;
    op.padding = padding;
    const double in = elems({x.c, x.hw, x.hw}), out = elems(op.out_shape);
    op.flops_fwd = static_cast<double>(kernel * kernel) * out;  // comparisons
    op.flops_bwd = out;
    op.mem_elems_fwd = in + out;
    op.mem_elems_bwd = in + out;
    set_saved(op, in, 0, false);
    return {b_.add(std::move(op)), x.c, out_hw};
  }

  Feature bottleneck(const std::string& p, Feature x, int64_t width, int64_t stride, bool last) {
    Feature y = conv(p + ".conv1", x, width, 1, 1, 0, true);
    y = relu(p + ".relu1", batchnorm(p + ".bn1", y), false);
    y = conv(p + ".conv2", y, width, 3, stride, 1, true);
    y = relu(p + ".relu2", batchnorm(p + ".bn2", y), false);
    y = conv(p + ".conv3", y, 4 * width, 1, 1, 0, true);
    y = batchnorm(p + ".bn3", y);
    Feature shortcut = x;
    if (stride != 1 || x.c != 4 * width)
      shortcut = batchnorm(p + ".downsample.bn", conv(p + ".downsample.conv", x, 4 * width, 1, stride, 0, false));
    const int add = b_.add(make_residual(p + ".residual", TpSplit::none, y.op, shortcut.op, {y.c, y.hw, y.hw}));
    return relu(p + ".relu3", {add, y.c, y.hw}, last);
  }

  const ModelSpec& spec_;
  GraphBuilder b_;
};

ModelGraph build_mlp(const ModelSpec& spec) {
  GraphBuilder b(spec);
  const auto& w = spec.mlp_widths;
  const size_t n = w.size();
  int x = -1;
  // Layer i maps w[i] -> w[i+1]; the first is the input unit, the last the head.
  for (size_t i = 0; i + 1 < n; ++i) {
    const bool head = i + 2 == n;
    if (i == 0) b.begin_unit("input");
    else if (head) b.begin_unit("head");
    else b.begin_unit(fmt::format("block{}", i));
    const std::string p = i == 0 ? "input" : head ? "head" : fmt::format("block{}", i);
    Op fc = make_linear(p + ".fc", TpSplit::none, x, 1, w[i], w[i + 1], spec.bias);
    if (x < 0) fc.batch_input = BatchInput::features;
    set_saved(fc, static_cast<double>(w[i]), 0, false);
    x = b.add(std::move(fc));
    if (head) {
      Op loss = make_loss("head.loss", TpSplit::none, x, 1, w[i + 1]);
      set_saved(loss, static_cast<double>(w[i + 1]), 0, false);
      b.add(std::move(loss));
    } else {
      Op act = make_activation(p + ".act", spec.activation, TpSplit::none, x, {1, w[i + 1]});
      // ReLU's backward needs its output, which the next linear saves; gelu needs its input.
      set_saved(act, spec.activation == Activation::relu ? 0 : static_cast<double>(w[i + 1]), 0, false);
      x = b.add(std::move(act));
    }
  }
  return b.finish();
}

}  // namespace

ModelGraph build_resnet_graph(const ModelSpec& spec) { return ResNetBuilder(spec).build(); }
ModelGraph build_mlp_graph(const ModelSpec& spec) { return build_mlp(spec); }

}  // namespace trainplan::models::detail
