// MLPerf HPC CosmoFlow's reference network (mlcommons/hpc, cosmoflow/models/cosmoflow.py with
// configs/cosmo.yaml; Mathuriya et al., SC18): five blocks of a 3x3x3 'same' convolution with
// bias, LeakyReLU(0.3) and 2x2x2 max pooling, 4 -> 32 -> 64 -> 128 -> 256 -> 512 channels; then
// flatten, dense 128 + LeakyReLU + dropout 0.5, dense 64 + LeakyReLU + dropout 0.5, dense to the
// targets and 1.2 tanh. 8,907,556 parameters at 128^3 (the first dense layer sees 512 x 4^3).
// The reference flattens Keras's channels-last (D, H, W, C); hardy flattens PyTorch's (C, D, H,
// W), the PyTorch ports' order: the same count, a permutation of that layer's inputs. Weights
// start Glorot-uniform, biases at zero, as the reference's Keras layers do.
// It trains by default with the reference's recipe (SGD, momentum 0.9, 0.001 per global batch 64,
// warm-up, x0.25 and x0.125 steps; cosmo.yaml): jobs/src/training_recipes.cpp, docs/training.md.
#include <fmt/format.h>

#include "nn/architectures/architectures.hpp"

namespace hardy::core::architectures {

namespace {

constexpr int kFirstChannels = 32;
constexpr int kBlocks = 5;
constexpr float kSlope = 0.3f;
constexpr float kDropout = 0.5f;
constexpr float kOutputScale = 1.2f;

}  // namespace

Network describe_cosmoflow(Backend& backend, const ModelConfig& c) {
  NetworkBuilder b(backend, {}, WeightInit::glorot_uniform);  // Keras's default, as published
  Node x = b.input(c.input_channels);
  int edge = c.volume;
  for (int block = 0; block < kBlocks; ++block) {
    // Pooled before the LeakyReLU, the reverse of the reference's order and the same function:
    // an increasing activation commutes with a maximum, and the gradient takes the same slope
    // to the window's maximum (to another voxel only where two inputs round to one activation,
    // a tie either order breaks by position). The activation then runs over an eighth of the
    // voxels: at 128^3 the first block's two passes took 59 ms of a 1117 ms bf16 step. With
    // nothing between them, the convolution and the pooling are one fused operation where the
    // backend has it (the CPU backend never keeps the convolution's output whole).
    x = b.leaky_relu(b.conv3d_max_pool(fmt::format("conv{}", block), x, kFirstChannels << block, 3,
                                       same_padding(3), true, {.kernel = 2, .stride = 2}),
                     kSlope);
    edge /= 2;
  }
  x = b.flatten(x, x.channels * edge * edge * edge);
  x = b.dropout(b.leaky_relu(b.dense("dense0", x, 128), kSlope), kDropout);
  x = b.dropout(b.leaky_relu(b.dense("dense1", x, 64), kSlope), kDropout);
  return b.finish(b.scaled_tanh(b.dense("output", x, c.num_classes), kOutputScale));
}

}  // namespace hardy::core::architectures
