#include "hardy/core/nn/model.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "hardy/core/support/enum_names.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"
#include "nn/architectures/architectures.hpp"

namespace hardy::core {

namespace {
constexpr std::string_view kArchitectureNames[] = {"compact", "deepcam", "tiramisu", "cosmoflow"};
static_assert(std::size(kArchitectureNames) ==
              static_cast<std::size_t>(Architecture::cosmoflow) + 1);
}  // namespace

Architecture parse_architecture(const std::string& name) {
  if (auto architecture = value_named<Architecture>(kArchitectureNames, name)) return *architecture;
  throw InvalidArgument(
      fmt::format("unknown model '{}' (choose {})", name, choice_list(kArchitectureNames)));
}

std::string to_string(Architecture architecture) {
  return std::string(name_of(kArchitectureNames, architecture, "unknown"));
}

void ModelConfig::validate() const {
  auto positive = [](int value, const char* field) {
    if (value <= 0)
      throw InvalidArgument(fmt::format("model {} must be positive, got {}", field, value));
  };
  positive(input_channels, "input channels");
  positive(num_classes, "classes");
  positive(width, "width");
  positive(depth, "depth");
  positive(aspp_channels, "aspp channels");
  positive(low_level_channels, "low-level channels");
  positive(decoder_channels, "decoder channels");
  positive(groups, "groups");
  if (aspp_rates.empty())
    throw InvalidArgument("model aspp rates must name at least one dilation rate");
  for (int rate : aspp_rates) positive(rate, "aspp rate");
  if (!(norm_eps > 0)) throw InvalidArgument("model normalization epsilon must be positive");
  if (architecture == Architecture::tiramisu) {
    if (dense_layers.size() < 2)
      throw InvalidArgument(
          "model dense layers must name at least two blocks (the down path and the bottleneck)");
    for (int layers : dense_layers) positive(layers, "dense layers per block");
    positive(growth, "growth");
    positive(first_channels, "first channels");
    if (dense_kernel <= 0 || dense_kernel % 2 == 0)
      throw InvalidArgument(
          fmt::format("model dense kernel must be odd and positive, got {}", dense_kernel));
    if (!(dropout >= 0 && dropout < 1))
      throw InvalidArgument(fmt::format("model dropout must be in [0, 1), got {}", dropout));
  }
  if (architecture == Architecture::cosmoflow && (volume <= 0 || volume % input_multiple() != 0))
    throw InvalidArgument(
        fmt::format("model volume must be a positive multiple of {} (five 2x2x2 poolings), got {}",
                    input_multiple(), volume));
}

int ModelConfig::input_multiple() const {
  switch (architecture) {
    case Architecture::compact:
      return 8;  // three stride-2 stages
    case Architecture::deepcam:
      return 16;  // output stride 16
    case Architecture::tiramisu:
      return 1 << (dense_layers.size() - 1);  // one transition down per block before the last
    case Architecture::cosmoflow:
      return 32;  // five 2x2x2 poolings
  }
  return 1;
}

std::string ModelConfig::identity() const {
  std::ostringstream text;
  // The compact network's lines are those written before hardy had other networks, so that
  // its runs resume across the upgrade.
  if (architecture != Architecture::compact)
    text << fmt::format("model.architecture={}\n", to_string(architecture));
  text << fmt::format("model.input_channels={}\nmodel.num_classes={}\n", input_channels,
                      num_classes);
  switch (architecture) {
    case Architecture::compact:
      text << fmt::format(
          "model.width={}\nmodel.depth={}\nmodel.aspp_channels={}\nmodel.aspp_rates={}\n"
          "model.low_level_channels={}\nmodel.decoder_channels={}\nmodel.norm={}\n"
          "model.groups={}\n",
          width, depth, aspp_channels, fmt::join(aspp_rates, ","), low_level_channels,
          decoder_channels, to_string(norm), groups);
      break;
    case Architecture::deepcam:  // the published structure, no knobs
      break;
    case Architecture::tiramisu:
      text << fmt::format(
          "model.dense_layers={}\nmodel.growth={}\nmodel.first_channels={}\n"
          "model.dense_kernel={}\nmodel.dropout={}\n",
          fmt::join(dense_layers, ","), growth, first_channels, dense_kernel, dropout);
      break;
    case Architecture::cosmoflow:  // the published structure at this volume
      text << fmt::format("model.volume={}\n", volume);
      break;
  }
  return text.str();
}

nlohmann::json to_json(const ModelConfig& m) {
  nlohmann::json config{{"architecture", to_string(m.architecture)},
                        {"input_channels", m.input_channels},
                        {"num_classes", m.num_classes}};
  switch (m.architecture) {
    case Architecture::compact:
      config.update({{"width", m.width},
                     {"depth", m.depth},
                     {"aspp_channels", m.aspp_channels},
                     {"aspp_rates", m.aspp_rates},
                     {"low_level_channels", m.low_level_channels},
                     {"decoder_channels", m.decoder_channels},
                     {"norm", to_string(m.norm)},
                     {"groups", m.groups}});
      break;
    case Architecture::deepcam:
      break;
    case Architecture::tiramisu:
      config.update({{"dense_layers", m.dense_layers},
                     {"growth", m.growth},
                     {"first_channels", m.first_channels},
                     {"dense_kernel", m.dense_kernel},
                     {"dropout", m.dropout}});
      break;
    case Architecture::cosmoflow:
      config.update({{"volume", m.volume}});
      break;
  }
  return config;
}

namespace {

Network describe(Backend& backend, const ModelConfig& config) {
  config.validate();
  switch (config.architecture) {
    case Architecture::compact:
      return architectures::describe_compact(backend, config);
    case Architecture::deepcam:
      return architectures::describe_deepcam(backend, config);
    case Architecture::tiramisu:
      return architectures::describe_tiramisu(backend, config);
    case Architecture::cosmoflow:
      return architectures::describe_cosmoflow(backend, config);
  }
  throw InvalidArgument("unknown model architecture");
}

}  // namespace

Model::Model(Backend& backend, ModelConfig config)
    : backend_(backend), config_(std::move(config)), network_(describe(backend, config_)) {}

Model::~Model() = default;

void Model::initialize(std::uint64_t seed) {
  const auto& parameters = network_.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    Parameter& p = *parameters[i];
    Tensor host = Tensor::host(p.value.dims(), DType::f32, p.value.layout());
    auto values = host.f32();
    // Convolution (4-D, 5-D) and dense (2-D) weights; biases and normalization scales are 1-D.
    const bool is_weight = p.value.rank() >= 2;
    const bool is_scale = p.name.ends_with(".gamma");
    if (is_weight) {
      // Fans as PyTorch counts them: fan_in from dims 1.., fan_out from dims 0 and 2.. (also
      // for grouped and transposed convolutions).
      const double receptive =
          static_cast<double>(p.value.numel() / p.value.dim(0) / p.value.dim(1));
      const double fan_in = static_cast<double>(p.value.numel() / p.value.dim(0));
      const double fan_out = static_cast<double>(p.value.dim(0)) * receptive;
      SplitMix64 rng(mix_seed(seed, 0x5eed, i));
      if (p.init == WeightInit::glorot_uniform) {
        const double limit = std::sqrt(6.0 / (fan_in + fan_out));
        for (float& v : values) v = static_cast<float>(rng.uniform(-limit, limit));
      } else {
        const double stddev = std::sqrt(2.0 / fan_in);
        for (float& v : values) v = static_cast<float>(stddev * rng.normal());
      }
    } else {
      std::fill(values.begin(), values.end(), is_scale ? 1.0f : 0.0f);
    }
    backend_.copy(host, p.value);
  }
}

std::size_t Model::parameter_count() const {
  std::size_t count = 0;
  for (auto* p : network_.parameters()) count += static_cast<std::size_t>(p->value.numel());
  return count;
}

const Tensor& Model::forward(const Tensor& x, bool training, CrossRankSum* cross_rank,
                             DropoutKeys dropout) {
  const int multiple = config_.input_multiple();
  if (config_.volumetric()) {
    const std::int64_t v = config_.volume;
    if (x.rank() != 5 || x.dim(1) != config_.input_channels || x.dim(2) != v || x.dim(3) != v ||
        x.dim(4) != v)
      throw InvalidArgument(fmt::format("{} model input must be (N, {}, {}, {}, {}); got {}",
                                        to_string(config_.architecture), config_.input_channels, v,
                                        v, v, x.describe()));
  } else if (x.rank() != 4 || x.c() != config_.input_channels || x.h() % multiple != 0 ||
             x.w() % multiple != 0 || x.h() == 0 || x.w() == 0) {
    throw InvalidArgument(fmt::format(
        "{} model input must be (N, {}, H, W) with H and W divisible by {}; got {}",
        to_string(config_.architecture), config_.input_channels, multiple, x.describe()));
  }
  if (!dropout.samples.empty() && dropout.samples.size() != static_cast<std::size_t>(x.dim(0)))
    throw InvalidArgument(fmt::format("model forward: {} dropout keys for a batch of {}",
                                      dropout.samples.size(), x.dim(0)));
  logits_ =
      &network_.forward(x, {.training = training, .cross_rank = cross_rank, .dropout = dropout});
  return *logits_;
}

void Model::backward(const Tensor& dlogits, const std::function<void(std::size_t)>& on_grad_ready,
                     CrossRankSum* cross_rank) {
  if (logits_ == nullptr) throw Error("model backward called before forward");
  if (!dlogits.same_shape(*logits_))
    throw InvalidArgument(fmt::format("dlogits {} does not match logits {}", dlogits.describe(),
                                      logits_->describe()));
  network_.backward(dlogits, on_grad_ready, cross_rank);
}

}  // namespace hardy::core
