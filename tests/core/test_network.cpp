// The network mechanism on its own: descriptions it refuses, and how it sums the gradients of an
// output that several layers read (the whole networks are checked in test_model.cpp).
#include <catch2/catch.hpp>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/network.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

using namespace hardy::core;

namespace {

Tensor filled(Backend& backend, std::vector<std::int64_t> dims, std::uint64_t seed) {
  Tensor t = backend.empty(dims, DType::f32, backend.activation_layout());
  SplitMix64 rng(seed);
  for (float& v : t.f32()) v = static_cast<float>(rng.normal());
  return t;
}

void randomize(Network& network, std::uint64_t seed) {
  SplitMix64 rng(seed);
  for (Parameter* p : network.parameters())
    for (float& v : p->value.f32()) v = static_cast<float>(rng.normal());
}

}  // namespace

TEST_CASE("network: a description with a dead end or a repeated name is refused", "[core]") {
  auto backend = make_backend("cpu");
  {
    NetworkBuilder b(*backend, {});
    const Node x = b.input(3);
    b.conv("unused", x, 4, 3, same_padding(3), true);
    const Node y = b.conv("used", x, 4, 3, same_padding(3), true);
    CHECK_THROWS_WITH(b.finish(y), Catch::Contains("reaches no output"));
  }
  {
    NetworkBuilder b(*backend, {});
    const Node x = b.input(3);
    const Node y = b.conv("same", x, 4, 3, same_padding(3), true);
    CHECK_THROWS_WITH(b.finish(b.conv("same", y, 4, 3, same_padding(3), true)),
                      Catch::Contains("two parameters are named same.weight"));
  }
  {
    NetworkBuilder b(*backend, {});
    const Node x = b.input(3);
    const Node y = b.conv("a", x, 4, 1, same_padding(1), false);
    CHECK_THROWS_WITH(b.add(x, y), Catch::Contains("add of 3 and 4 channels"));
    CHECK_THROWS_WITH(b.relu(Node{7, 3}), Catch::Contains("node 7 does not exist"));
  }
}

// y = conv(x) + conv(x), with the same convolution output read twice: its weights' gradient is
// twice that of y = conv(x) alone, and the readers' gradients must be summed, not overwritten.
TEST_CASE("network: an output read by several layers gets the sum of their gradients", "[core]") {
  auto backend = make_backend("cpu");
  const Tensor x = filled(*backend, {2, 3, 6, 6}, 1);
  const Tensor dy = filled(*backend, {2, 4, 6, 6}, 2);
  auto weight_gradient = [&](bool twice) {
    NetworkBuilder b(*backend, {});
    const Node in = b.input(3);
    const Node c = b.conv("c", in, 4, 3, same_padding(3), true);
    Network network = b.finish(twice ? b.relu(b.add(c, c)) : b.relu(c));
    randomize(network, 3);
    network.forward(x, {});
    std::vector<std::size_t> announced;
    network.backward(
        dy, [&](std::size_t i) { announced.push_back(i); }, nullptr);
    CHECK(announced == std::vector<std::size_t>{1, 0});  // bias, then weight, each once
    const auto g = network.parameters()[0]->grad.f32();
    return std::vector<float>(g.begin(), g.end());
  };
  const auto once = weight_gradient(false), twice = weight_gradient(true);
  REQUIRE(once.size() == twice.size());
  // relu(2c) passes where relu(c) does, so the gradient doubles exactly.
  for (std::size_t i = 0; i < once.size(); ++i)
    CHECK(twice[i] == Approx(2 * once[i]).epsilon(1e-5));
}
