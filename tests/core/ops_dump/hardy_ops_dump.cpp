// hardy_ops_dump DIRECTORY: runs the CPU backend's operations for volumetric regression networks
// (conv3d, max_pool3d, dense, flatten, leaky relu, scaled tanh, mse_loss) on seeded random inputs
// and writes every input, output and gradient into DIRECTORY, for
// tests/core/test_torch_ops_crosscheck.py to recompute with PyTorch in float64. Each tensor is a
// raw little-endian float32 file in logical (N, C, D, H, W) order (converted from the backend's
// channels-last layout), listed with its dims and the operation's settings in manifest.json.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/support/random.hpp"

using namespace hardy::core;

namespace {

class Dump {
 public:
  Dump(Backend& backend, std::filesystem::path directory)
      : backend_(backend), directory_(std::move(directory)) {}

  // A host f32 tensor of standard-normal values times `scale`, in `layout`.
  Tensor random(std::vector<std::int64_t> dims, std::uint64_t seed, float scale = 1.0f,
                Layout layout = Layout::nhwc) {
    Tensor t = Tensor::host(std::move(dims), DType::f32, layout);
    SplitMix64 rng(mix_seed(seed, 0x70c4, 2));
    for (float& v : t.f32()) v = scale * static_cast<float>(rng.normal());
    return t;
  }

  // Writes t in logical row-major order under `name`.
  void tensor(const std::string& name, const Tensor& t) {
    Tensor logical = Tensor::host(t.dims(), DType::f32, Layout::nchw);
    backend_.copy(t, logical);
    std::ofstream out(directory_ / (name + ".f32"), std::ios::binary);
    out.write(static_cast<const char*>(logical.raw()),
              static_cast<std::streamsize>(logical.bytes()));
    if (!out) throw std::runtime_error("cannot write " + name);
    entries_.push_back(fmt::format(R"("{}": {{"dims": [{}]}})", name, fmt::join(t.dims(), ", ")));
  }
  void scalar(const std::string& name, double value) {
    entries_.push_back(fmt::format(R"("{}": {{"value": {:.17g}}})", name, value));
  }
  void finish() {
    std::ofstream out(directory_ / "manifest.json");
    out << "{\n  " << fmt::format("{}", fmt::join(entries_, ",\n  ")) << "\n}\n";
  }

 private:
  Backend& backend_;
  std::filesystem::path directory_;
  std::vector<std::string> entries_;
};

std::vector<std::int64_t> conv3d_output(const Tensor& x, const Tensor& weight,
                                        const ConvGeometry& g) {
  std::vector<std::int64_t> dims{x.dim(0), weight.dim(0)};
  for (std::size_t i = 2; i < 5; ++i)
    dims.push_back(
        conv_output_size(static_cast<int>(x.dim(i)), static_cast<int>(weight.dim(i)), g));
  return dims;
}

void conv3d(Backend& backend, Dump& dump, const std::string& name, const ConvGeometry& g,
            std::uint64_t seed) {
  const Tensor x = dump.random({2, 3, 6, 5, 7}, seed);
  const Tensor weight = dump.random({4, 3, 3, 3, 3}, seed + 1, 0.2f, Layout::nchw);
  const Tensor bias = dump.random({4}, seed + 2, 0.5f, Layout::flat);
  Tensor y = Tensor::host(conv3d_output(x, weight, g));
  backend.conv3d_forward(x, weight, &bias, g, y);
  const Tensor dy = dump.random(y.dims(), seed + 3);
  Tensor dx = Tensor::host(x.dims());
  Tensor dweight = Tensor::host(weight.dims(), DType::f32, Layout::nchw);
  Tensor dbias = Tensor::host({4}, DType::f32, Layout::flat);
  backend.conv3d_backward_data(dy, weight, g, dx);
  backend.conv3d_backward_weights(x, dy, g, dweight, &dbias);
  for (const auto& [suffix, t] : std::map<std::string, const Tensor*>{{"x", &x},
                                                                      {"weight", &weight},
                                                                      {"bias", &bias},
                                                                      {"y", &y},
                                                                      {"dy", &dy},
                                                                      {"dx", &dx},
                                                                      {"dweight", &dweight},
                                                                      {"dbias", &dbias}})
    dump.tensor(name + "." + suffix, *t);
  dump.scalar(name + ".stride", g.stride);
  dump.scalar(name + ".padding", g.padding);
  dump.scalar(name + ".dilation", g.dilation);
}

void max_pool3d(Backend& backend, Dump& dump, const std::string& name, const PoolGeometry& g,
                std::uint64_t seed) {
  const Tensor x = dump.random({2, 4, 5, 6, 7}, seed);
  std::vector<std::int64_t> dims{2, 4};
  for (std::size_t i = 2; i < 5; ++i)
    dims.push_back(pool_output_size(static_cast<int>(x.dim(i)), g));
  Tensor y = Tensor::host(dims);
  backend.max_pool3d_forward(x, g, y);
  const Tensor dy = dump.random(dims, seed + 1);
  Tensor dx = Tensor::host(x.dims());
  backend.max_pool3d_backward(x, dy, g, dx);
  dump.tensor(name + ".x", x);
  dump.tensor(name + ".y", y);
  dump.tensor(name + ".dy", dy);
  dump.tensor(name + ".dx", dx);
  dump.scalar(name + ".kernel", g.kernel);
  dump.scalar(name + ".stride", g.stride);
  dump.scalar(name + ".padding", g.padding);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hardy_ops_dump DIRECTORY\n");
    return 2;
  }
  const std::filesystem::path directory = argv[1];
  std::filesystem::create_directories(directory);
  const auto backend = make_backend("cpu");
  Dump dump(*backend, directory);

  conv3d(*backend, dump, "conv3d_same", {.stride = 1, .padding = 1}, 10);
  conv3d(*backend, dump, "conv3d_strided_dilated", {.stride = 2, .padding = 2, .dilation = 2}, 20);
  max_pool3d(*backend, dump, "max_pool3d", {.kernel = 2, .stride = 2}, 30);
  max_pool3d(*backend, dump, "max_pool3d_overlapping", {.kernel = 3, .stride = 2, .padding = 1},
             40);

  // Flatten of a channels-last volume, then dense + leaky relu, dense + scaled tanh, MSE: the
  // head of CosmoFlow at a small scale, each operation dumped on its own.
  const Tensor volume = dump.random({3, 4, 2, 3, 2}, 50);
  Tensor flat = Tensor::host({3, 48}, DType::f32, Layout::flat);
  backend->flatten_forward(volume, flat);
  dump.tensor("flatten.x", volume);
  dump.tensor("flatten.y", flat);

  const Tensor weight = dump.random({6, 48}, 51, 0.2f, Layout::flat);
  const Tensor bias = dump.random({6}, 52, 0.5f, Layout::flat);
  Tensor dense = Tensor::host({3, 6}, DType::f32, Layout::flat);
  backend->dense_forward(flat, weight, &bias, dense);
  const Tensor ddense = dump.random({3, 6}, 53, 1.0f, Layout::flat);
  Tensor dflat = Tensor::host({3, 48}, DType::f32, Layout::flat);
  Tensor dweight = Tensor::host({6, 48}, DType::f32, Layout::flat);
  Tensor dbias = Tensor::host({6}, DType::f32, Layout::flat);
  backend->dense_backward_data(ddense, weight, dflat);
  backend->dense_backward_weights(flat, ddense, dweight, &dbias);
  dump.tensor("dense.weight", weight);
  dump.tensor("dense.bias", bias);
  dump.tensor("dense.y", dense);
  dump.tensor("dense.dy", ddense);
  dump.tensor("dense.dx", dflat);
  dump.tensor("dense.dweight", dweight);
  dump.tensor("dense.dbias", dbias);

  // An element-wise activation of one parameter: x, y, dy, dx and the parameter; returns y.
  const auto activation = [&](const std::string& op, const Tensor& x, const Tensor& dy,
                              const std::string& parameter, float value, auto forward,
                              auto backward) {
    Tensor y = Tensor::host(x.dims(), DType::f32, x.layout());
    Tensor dx = Tensor::host(x.dims(), DType::f32, x.layout());
    ((*backend).*forward)(x, value, y);
    ((*backend).*backward)(y, dy, value, dx);
    dump.tensor(op + ".x", x);
    dump.tensor(op + ".y", y);
    dump.tensor(op + ".dy", dy);
    dump.tensor(op + ".dx", dx);
    dump.scalar(op + "." + parameter, value);
    return y;
  };
  const std::vector<std::int64_t> five_d{2, 3, 4, 3, 5};
  activation("leaky_relu", dump.random(five_d, 60), dump.random(five_d, 61), "slope", 0.3f,
             &Backend::leaky_relu_forward, &Backend::leaky_relu_backward);
  const Tensor tanh = activation("scaled_tanh", dump.random({3, 4}, 70, 1.5f, Layout::flat),
                                 dump.random({3, 4}, 71, 1.0f, Layout::flat), "scale", 1.2f,
                                 &Backend::scaled_tanh_forward, &Backend::scaled_tanh_backward);

  const Tensor target = dump.random({3, 4}, 80, 1.0f, Layout::flat);
  Tensor dprediction = Tensor::host({3, 4}, DType::f32, Layout::flat);
  const float grad_scale = 1.0f / 12.0f;
  const double loss = backend->mse_loss(
      {.prediction = tanh, .target = target, .grad_scale = grad_scale}, dprediction);
  dump.tensor("mse.prediction", tanh);
  dump.tensor("mse.target", target);
  dump.tensor("mse.dprediction", dprediction);
  dump.scalar("mse.loss", loss);
  dump.scalar("mse.grad_scale", grad_scale);
  dump.finish();
  return 0;
}
