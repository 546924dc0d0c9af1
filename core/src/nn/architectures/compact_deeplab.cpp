// The compact DeepLabv3+: stride 2, 4 and 8 encoder stages of 3x3 blocks, an atrous stage that
// keeps stride 8, atrous spatial pyramid pooling (a 1x1 branch, one 3x3 branch per rate and an
// image-pooling branch), and a decoder at stride 4 that fuses the pyramid's output with the
// stride-4 features.
#include <fmt/format.h>

#include "nn/architectures/architectures.hpp"

namespace hardy::core::architectures {

Network describe_compact(Backend& backend, const ModelConfig& c) {
  NetworkBuilder b(backend, {.kind = c.norm, .groups = c.groups, .eps = c.norm_eps});
  auto stage = [&](const std::string& name, Node x, int out, int stride, int dilation) {
    for (int i = 0; i < c.depth; ++i)
      x = b.conv_norm_relu(fmt::format("{}.{}", name, i), x, out, 3,
                           same_padding(3, i == 0 ? stride : 1, dilation));
    return x;
  };
  const int w = c.width, a = c.aspp_channels;
  const Node input = b.input(c.input_channels);
  const Node stem = stage("encoder.stem", input, w, 2, 1);
  const Node low = stage("encoder.stage4x", stem, 2 * w, 2, 1);
  const Node high =
      stage("encoder.atrous", stage("encoder.stage8x", low, 4 * w, 2, 1), 4 * w, 1, 2);

  std::vector<Node> branches{b.conv_norm_relu("aspp.branch1x1", high, a, 1, same_padding(1))};
  for (int rate : c.aspp_rates)
    branches.push_back(
        b.conv_norm_relu(fmt::format("aspp.rate{}", rate), high, a, 3, same_padding(3, 1, rate)));
  const Node pooled =
      b.conv_norm_relu("aspp.image_pool", b.global_avg_pool(high), a, 1, same_padding(1));
  branches.push_back(b.upsample_like(pooled, high));
  const Node pyramid =
      b.conv_norm_relu("aspp.projection", b.concat(branches), a, 1, same_padding(1));

  const Node pyramid_up = b.upsample_like(pyramid, low);
  const Node low_projected =
      b.conv_norm_relu("decoder.low_level", low, c.low_level_channels, 1, same_padding(1));
  Node fused = b.conv_norm_relu("decoder.fuse1", b.concat({pyramid_up, low_projected}),
                                c.decoder_channels, 3, same_padding(3));
  fused = b.conv_norm_relu("decoder.fuse2", fused, c.decoder_channels, 3, same_padding(3));
  const Node logits = b.conv("decoder.classifier", fused, c.num_classes, 1, same_padding(1), true);
  return b.finish(b.upsample_like(logits, input));
}

}  // namespace hardy::core::architectures
