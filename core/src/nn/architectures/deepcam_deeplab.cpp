// DeepCAM's DeepLabv3+ (MLPerf HPC, mlcommons/hpc deepcam/src/deepCam/architecture/
// deeplab_xception.py) at output stride 16, as published: 56,454,720 parameters for 16 input
// channels and 3 classes.
// - A modified aligned-Xception encoder: a 3x3/s2 and a 3x3 stem; entry blocks to 128 (whose
//   output, after its ReLU, is the low-level feature at stride 4), 256 and 728 channels, each
//   ending in a strided separable convolution; 16 middle blocks of three separable convolutions;
//   an exit block to 1024 and three separable convolutions to 1536, 1536 and 2048 at dilation 2.
//   A separable convolution is a depthwise 3x3 then a pointwise 1x1, both without bias; blocks add
//   a residual (a 1x1 convolution and batch norm where channels or stride change).
// - ASPP: a 1x1 branch and 3x3 branches at rates 6, 12, 18 (256 channels, batch norm, ReLU), an
//   image-pooling branch (global average, 1x1 convolution, a learned per-channel scale and bias,
//   ReLU, broadcast back), concatenated and projected 1280 -> 256.
// - A decoder of transposed convolutions (3x3, stride 2, 'same'): two to stride 4, concatenated
//   with the low-level feature projected to 48 channels, two 3x3 convolutions and a 1x1, a third
//   to stride 2 and a last one, without bias or normalization, to the classes.
// Batch norm everywhere, its statistics summed over the data-parallel ranks.
// It trains by default with the reference's recipe (LAMB at 0.0055, weight decay 0.01, 400 warm-up
// steps, x0.1 at step 1200, class weights frequency^-1/8; run_training.sh, train.py):
// jobs/src/training_recipes.cpp, docs/training.md.
#include <fmt/format.h>

#include "nn/architectures/architectures.hpp"

namespace hardy::core::architectures {

namespace {

class Describer {
 public:
  Describer(Backend& backend, const ModelConfig& c)
      : b_(backend, {.kind = NormKind::batch, .groups = 1, .eps = c.norm_eps}) {}
  NetworkBuilder& builder() { return b_; }

  // Depthwise 3x3 (at `stride` and `dilation`) then pointwise 1x1, no bias.
  Node separable(const std::string& name, Node x, int out, int stride = 1, int dilation = 1) {
    ConvGeometry depthwise = same_padding(3, stride, dilation);
    depthwise.groups = x.channels;
    const Node d = b_.conv(name + ".depthwise", x, x.channels, 3, depthwise, false);
    return b_.conv(name + ".pointwise", d, out, 1, same_padding(1), false);
  }

  // The reference's Block: separable convolutions with batch norm and ReLU between them (none
  // after the last), a strided separable convolution where the block downsamples (or one more
  // where it is the last at stride 1), plus the residual, then ReLU if asked.
  Node block(const std::string& name, Node x, int out, int reps, int stride, bool end_with_relu,
             bool grow_first = true, bool is_last = false) {
    const Node input = x;
    std::vector<int> widths;  // each separable convolution's output channels
    if (grow_first) widths.push_back(out);
    for (int i = 0; i < reps - 1; ++i) widths.push_back(grow_first ? out : x.channels);
    if (!grow_first) widths.push_back(out);
    for (std::size_t i = 0; i < widths.size(); ++i) {
      x = separable(fmt::format("{}.sep{}", name, i), x, widths[i]);
      x = b_.norm(fmt::format("{}.sep{}.bn", name, i), x, /*relu=*/i + 1 < widths.size());
    }
    if (stride != 1) x = separable(name + ".down", x, out, stride);
    if (stride == 1 && is_last) x = separable(name + ".last", x, out);
    Node skip = input;
    if (out != input.channels || stride != 1) {
      skip = b_.conv(name + ".skip", input, out, 1, {.stride = stride}, false);
      skip = b_.norm(name + ".skip.bn", skip, false);
    }
    x = b_.add(x, skip);
    return end_with_relu ? b_.relu(x) : x;
  }

  Node conv_bn_relu(const std::string& name, Node x, int out, int kernel, ConvGeometry g) {
    return b_.norm(name + ".bn", b_.conv(name, x, out, kernel, g, false), true);
  }

  // 3x3, stride 2, PyTorch padding 1 and output padding 1: twice the size (`like`'s).
  Node up(const std::string& name, Node x, Node like, int out) {
    return b_.conv_transpose(name, x, like, out, 3, {.stride = 2, .padding = 1}, false);
  }

 private:
  NetworkBuilder b_;
};

}  // namespace

Network describe_deepcam(Backend& backend, const ModelConfig& c) {
  Describer d(backend, c);
  NetworkBuilder& b = d.builder();
  const Node input = b.input(c.input_channels);

  // Encoder.
  Node x = d.conv_bn_relu("encoder.conv1", input, 32, 3, same_padding(3, 2));
  const Node stride2 = d.conv_bn_relu("encoder.conv2", x, 64, 3, same_padding(3));
  // The reference applies its in-place ReLU to block 1's output after keeping it as the
  // low-level feature, so the decoder reads it rectified too.
  const Node low = b.relu(d.block("encoder.block1", stride2, 128, 2, 2, false));
  x = d.block("encoder.block2", low, 256, 2, 2, true);
  const Node stride8 = x;
  x = d.block("encoder.block3", x, 728, 2, 2, true);
  for (int i = 4; i <= 19; ++i) x = d.block(fmt::format("encoder.block{}", i), x, 728, 3, 1, true);
  x = d.block("encoder.block20", x, 1024, 2, 1, false, /*grow_first=*/false, /*is_last=*/true);
  x = b.norm("encoder.conv3.bn", d.separable("encoder.conv3", x, 1536, 1, 2), true);
  x = b.norm("encoder.conv4.bn", d.separable("encoder.conv4", x, 1536, 1, 2), true);
  const Node high = b.norm("encoder.conv5.bn", d.separable("encoder.conv5", x, 2048, 1, 2), true);

  // ASPP.
  std::vector<Node> branches{d.conv_bn_relu("aspp.rate1", high, 256, 1, same_padding(1))};
  for (int rate : {6, 12, 18})
    branches.push_back(
        d.conv_bn_relu(fmt::format("aspp.rate{}", rate), high, 256, 3, same_padding(3, 1, rate)));
  Node pooled = b.conv("aspp.image_pool", b.global_avg_pool(high), 256, 1, same_padding(1), false);
  pooled = b.relu(b.channel_affine("aspp.image_pool.affine", pooled));
  branches.push_back(b.upsample_like(pooled, high));  // from 1x1: a broadcast
  x = d.conv_bn_relu("aspp.projection", b.concat(branches), 256, 1, same_padding(1));

  // Decoder.
  x = b.norm("decoder.up1.bn", d.up("decoder.up1", x, stride8, 256), true);
  x = b.norm("decoder.up2.bn", d.up("decoder.up2", x, low, 256), true);
  const Node low_projected = d.conv_bn_relu("decoder.low_level", low, 48, 1, same_padding(1));
  x = d.conv_bn_relu("decoder.conv1", b.concat({x, low_projected}), 256, 3, same_padding(3));
  x = d.conv_bn_relu("decoder.conv2", x, 256, 3, same_padding(3));
  x = b.conv("decoder.conv3", x, 256, 1, same_padding(1), true);
  x = b.norm("decoder.up3.bn", d.up("decoder.up3", x, stride2, 256), true);
  return b.finish(d.up("decoder.classifier", x, input, c.num_classes));
}

}  // namespace hardy::core::architectures
