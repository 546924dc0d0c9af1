#pragma once
// A network as data: a list of layers in the order they run, each reading the outputs of
// earlier ones (or the network's input). An architecture (core/src/nn/architectures/) is a
// function that describes its network with a NetworkBuilder; Network runs the description
// forward in that order and backward in reverse, sums the gradients of an output that several
// layers read, and announces each layer's parameters as soon as their gradients are final. So
// nothing outside an architecture's description knows which network hardy trains: the trainer,
// checkpoints (tensor names are the layers' names), restore, broadcast and every test see
// parameters, buffers, forward and backward.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hardy/core/nn/layers.hpp"

namespace hardy::core {

// What makes dropout's masks reproducible: a seed for the step and one key per sample of the
// batch (its index in the dataset), so that a rollback or a rebalance that computes a sample's
// step again, on any rank, draws the same masks. Without keys, sample n of the batch is key n.
struct DropoutKeys {
  std::uint64_t seed = 0;
  std::span<const std::uint64_t> samples;
};

// One forward pass's settings, handed to every layer.
struct ForwardPass {
  bool training = true;
  CrossRankSum* cross_rank = nullptr;  // batch-norm statistics across ranks (may be null)
  DropoutKeys dropout;
};

// One operation of a network: reads its inputs' outputs, keeps what its backward pass needs and
// owns its output and its inputs' gradients between steps.
class Layer {
 public:
  virtual ~Layer() = default;
  virtual const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass& pass) = 0;
  // Overwrites its parameters' gradients and sets grads[i] to the gradient of inputs[i] where
  // need[i] (a tensor the layer owns, valid until its next backward).
  virtual void backward(const Tensor& dy, std::span<const bool> need,
                        std::span<const Tensor*> grads, CrossRankSum* cross_rank) = 0;
  // False for an input read for its shape only (it gets no gradient from this layer).
  virtual bool takes_gradient(std::size_t input) const { return true; }
  virtual std::vector<Parameter*> parameters() { return {}; }
  virtual std::vector<std::pair<std::string, Tensor*>> buffers() { return {}; }
};

// A layer's output in a description: which node it is and how many channels it has (so that an
// architecture can size what reads it).
struct Node {
  int index = -1;
  int channels = 0;
};

class Network {
 public:
  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;
  ~Network();

  const Tensor& forward(const Tensor& x, const ForwardPass& pass);
  // Back-propagates the output's gradient through every layer in reverse; on_grad_ready(i) as
  // soon as parameters()[i].grad is final.
  void backward(const Tensor& dy, const std::function<void(std::size_t)>& on_grad_ready,
                CrossRankSum* cross_rank);
  // In the order the layers were described.
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  std::vector<std::pair<std::string, Tensor*>> buffers();
  std::size_t layer_count() const { return steps_.size(); }

 private:
  friend class NetworkBuilder;
  struct Step {
    std::unique_ptr<Layer> layer;
    std::vector<int> inputs;  // node indices; node 0 is the network's input
    std::vector<std::size_t> parameter_indices;
  };
  Network(Backend& backend, std::vector<Step> steps, int output);

  Backend* backend_;
  std::vector<Step> steps_;  // node i + 1 is the output of steps_[i]
  int output_;
  std::vector<int> readers_;  // per node, how many layer inputs take a gradient from it
  std::vector<Parameter*> parameters_;
  std::vector<const Tensor*> outputs_;  // per node, during a pass
  std::vector<Tensor> gradient_sums_;   // per node read more than once
  // In mixed precision, a node read more than once sums its readers' gradients in f32 here, and
  // rounds the sum into gradient_sums_ once, after its last reader (as autocast accumulates);
  // wide_parts_ holds one reader's gradient widened.
  std::vector<Tensor> wide_sums_, wide_parts_;
  std::vector<const Tensor*> input_grads_;
  bool forward_done_ = false;
};

// How the normalizations of a description are made (the architecture's choice, from the model
// configuration).
struct NormSettings {
  NormKind kind = NormKind::group;
  int groups = 8;
  float eps = 1e-5f;
};

// Records a description. Layer names become parameter names ("encoder.stem.0.conv.weight"), which
// checkpoints store, so they must be unique and stable.
class NetworkBuilder {
 public:
  static constexpr std::size_t max_inputs = 32;
  // `init`: how every weight of the description is drawn (Model::initialize).
  NetworkBuilder(Backend& backend, NormSettings norm, WeightInit init = WeightInit::kaiming_normal);

  Node input(int channels);
  Node conv(const std::string& name, Node x, int out_channels, int kernel, ConvGeometry geometry,
            bool bias);
  // conv (no bias) -> norm -> relu.
  Node conv_norm_relu(const std::string& name, Node x, int out_channels, int kernel,
                      ConvGeometry geometry);
  // PyTorch's ConvTranspose2d; the output is `like`'s height and width (which picks the output
  // padding).
  Node conv_transpose(const std::string& name, Node x, Node like, int out_channels, int kernel,
                      ConvGeometry geometry, bool bias);
  Node norm(const std::string& name, Node x, bool relu);
  // y = gamma[c] * x + beta[c], gamma starting at 1 and beta at 0.
  Node channel_affine(const std::string& name, Node x);
  Node relu(Node x);
  Node dropout(Node x, float rate);
  Node add(Node a, Node b);
  Node concat(const std::vector<Node>& inputs);
  // Bilinear resize of x to `like`'s height and width.
  Node upsample_like(Node x, Node like);
  Node global_avg_pool(Node x);
  // Volumes and features (CosmoFlow): PyTorch's Conv3d (cubic kernel) and MaxPool3d; a leaky
  // ReLU; flatten to `features` per sample (the architecture knows the spatial size left);
  // nn.Linear, whose node's channels are its features; y = scale * tanh(x).
  Node conv3d(const std::string& name, Node x, int out_channels, int kernel, ConvGeometry geometry,
              bool bias);
  Node max_pool3d(Node x, PoolGeometry geometry);
  // conv3d followed by max_pool3d where nothing else reads the convolution's output: the same
  // function and parameters, one fused backend operation where the backend has it (the CPU
  // backend keeps no convolution output then).
  Node conv3d_max_pool(const std::string& name, Node x, int out_channels, int kernel,
                       ConvGeometry geometry, bool bias, PoolGeometry pooling);
  Node leaky_relu(Node x, float slope);
  Node flatten(Node x, int features);
  Node dense(const std::string& name, Node x, int out_features);
  Node scaled_tanh(Node x, float scale);

  Network finish(Node output);

 private:
  Node append(std::unique_ptr<Layer> layer, std::vector<Node> inputs, int channels);
  void check(Node node) const;

  Backend& backend_;
  NormSettings norm_;
  WeightInit init_;
  std::vector<Network::Step> steps_;
  int dropout_layers_ = 0;
  bool has_input_ = false;
};

// "same" padding for an odd kernel at a stride and dilation.
inline ConvGeometry same_padding(int kernel, int stride = 1, int dilation = 1) {
  return {.stride = stride, .padding = dilation * (kernel - 1) / 2, .dilation = dilation};
}

}  // namespace hardy::core
