// The Tiramisu (FC-DenseNet, Jegou et al. 2017) of the 2018 Gordon Bell climate run (Kurth et
// al., azrael417/ClimDeepLearn, semanticsegm/tiramisu-tf, run with --blocks 2 2 2 4 5
// --growth 32 --filter-sz 5): no normalization; every dense layer is a convolution adding
// `growth` maps, ReLU and dropout, concatenated to its input; transitions down are strided 1x1
// convolutions keeping the channels; transitions up are 3x3 transposed convolutions of the
// previous block's new maps only, concatenated with the skip connection of their resolution.
// It trains by default with the run's recipe (Adam at 1e-4, L2 1e-4, class weights 1/frequency;
// tiramisu-tf-train.py and common_helpers.py; its LARC clipping left out): jobs/src/
// training_recipes.cpp, docs/training.md.
#include <fmt/format.h>

#include "nn/architectures/architectures.hpp"

namespace hardy::core::architectures {

Network describe_tiramisu(Backend& backend, const ModelConfig& c) {
  NetworkBuilder b(backend, {});
  const int k = c.dense_kernel;
  // One dense block: returns its output (the input and every new map; made only where it is
  // read: the bottleneck and the inner up blocks pass on their new maps alone) and the new maps.
  auto dense_block = [&](const std::string& name, Node x, int layers, bool whole_output) {
    std::vector<Node> added;
    for (int i = 0; i < layers; ++i) {
      Node y = b.conv(fmt::format("{}.layer{}", name, i), x, c.growth, k, same_padding(k), true);
      y = b.dropout(b.relu(y), c.dropout);
      added.push_back(y);
      if (i + 1 < layers || whole_output) x = b.concat({x, y});
    }
    return std::pair{x, added};
  };

  const Node input = b.input(c.input_channels);
  Node x = b.dropout(b.conv("first", input, c.first_channels, k, same_padding(k), true), c.dropout);
  const std::size_t down_blocks = c.dense_layers.size() - 1;
  std::vector<Node> skips;
  for (std::size_t i = 0; i < down_blocks; ++i) {
    x = dense_block(fmt::format("down{}", i), x, c.dense_layers[i], true).first;
    skips.push_back(x);
    x = b.conv(fmt::format("down{}.transition", i), x, x.channels, 1, {.stride = 2}, true);
    x = b.dropout(b.relu(x), c.dropout);
  }
  std::vector<Node> added = dense_block("bottleneck", x, c.dense_layers.back(), false).second;
  for (std::size_t i = 0; i < down_blocks; ++i) {
    const std::size_t level = down_blocks - 1 - i;
    const Node fresh = added.size() == 1 ? added.front() : b.concat(added);
    // TensorFlow's 'same' transposed convolution doubles the size: padding 1 and the output
    // padding that the skip connection's size asks for.
    const Node up = b.conv_transpose(fmt::format("up{}.transition", i), fresh, skips[level],
                                     fresh.channels, 3, {.stride = 2, .padding = 1}, true);
    std::tie(x, added) = dense_block(fmt::format("up{}", i), b.concat({up, skips[level]}),
                                     c.dense_layers[level], level == 0);
  }
  const Node logits = b.conv("classifier", x, c.num_classes, 1, same_padding(1), true);
  return b.finish(b.dropout(logits, c.dropout));
}

}  // namespace hardy::core::architectures
