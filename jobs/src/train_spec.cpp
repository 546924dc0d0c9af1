#include "hardy/jobs/train_spec.hpp"

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "command_line.hpp"
#include "hardy/core/data/cosmoflow.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/version.hpp"
#include "hardy/jobs/training_recipes.hpp"
#include "recipe_defaults.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

template <class T>
T get(const po::variables_map& vm, const char* name) {
  return vm[name].as<T>();
}

void require(bool condition, const std::string& message) {
  if (!condition) throw InvalidArgument(message);
}

// An option that takes auto (nullopt) or a whole number of at least `least`, which the message
// for anything else calls `what`.
std::optional<long> parse_auto_or_number(const std::string& text, const std::string& option,
                                         long least, const std::string& what) {
  if (text == "auto") return std::nullopt;
  std::size_t used = 0;
  long number = least - 1;
  try {
    number = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || number < least)
    throw InvalidArgument(fmt::format("{} takes auto or {}, got '{}'", option, what, text));
  return number;
}

// A positive, finite number of seconds, or nothing.
std::optional<double> positive_seconds(const std::string& text) {
  std::size_t used = 0;
  double seconds = 0;
  try {
    seconds = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || !(seconds > 0) || !std::isfinite(seconds)) return std::nullopt;
  return seconds;
}

// An option that takes auto (0), off (-1) or a positive number of seconds: --hang-timeout
// (auto: learned), --regrow (auto: measured).
double parse_auto_off_or_seconds(const std::string& text, const std::string& option) {
  if (text == "auto") return 0;
  if (text == "off") return -1;
  if (const auto seconds = positive_seconds(text)) return *seconds;
  throw InvalidArgument(
      fmt::format("{} takes auto, off or a positive number of seconds, got '{}'", option, text));
}

std::string value_text(const po::variable_value& value) {
  const auto& v = value.value();
  if (auto* s = boost::any_cast<std::string>(&v)) return *s;
  if (auto* i = boost::any_cast<int>(&v)) return std::to_string(*i);
  if (auto* l = boost::any_cast<long>(&v)) return std::to_string(*l);
  if (auto* u = boost::any_cast<std::uint64_t>(&v)) return std::to_string(*u);
  if (auto* f = boost::any_cast<float>(&v)) return fmt::format("{}", *f);
  if (auto* d = boost::any_cast<double>(&v)) return fmt::format("{}", *d);
  if (auto* b = boost::any_cast<bool>(&v)) return *b ? "true" : "false";
  if (auto* list = boost::any_cast<std::vector<std::string>>(&v))
    return fmt::format("{}", fmt::join(*list, ","));
  return "?";
}

std::string default_run_dir() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return fmt::format("runs/train-{}", stamp);
}

// The run itself: where, how long, how big a batch, and the per-step checks.
void read_run_options(const po::variables_map& vm, TrainSpec& spec) {
  spec.run_dir = vm.count("run-dir") ? get<std::string>(vm, "run-dir") : default_run_dir();
  spec.steps = get<long>(vm, "steps");
  spec.epochs = get<long>(vm, "epochs");
  spec.global_batch = get<long>(vm, "global-batch");
  spec.seed = get<std::uint64_t>(vm, "seed");
  spec.backend = get<std::string>(vm, "backend");
  const auto precision = get<std::string>(vm, "precision");
  try {
    spec.precision = precision == "auto" ? core::default_precision(spec.backend)
                                         : core::parse_precision(precision);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("--precision: {}", e.what()));
  }
  if (const auto why = core::precision_unsupported(spec.backend, spec.precision))
    throw InvalidArgument(fmt::format("--precision {}: {}", precision, *why));
  spec.threads = get<int>(vm, "threads");
  spec.log_every = get<long>(vm, "log-every");
  require(spec.steps >= 0, "--steps must not be negative");
  require(spec.epochs > 0, "--epochs must be positive");
  require(spec.global_batch > 0, "--global-batch must be positive");
  require(spec.threads >= 0, "--threads must not be negative");
  require(spec.log_every > 0, "--log-every must be positive");
  spec.bucket_mib = get<double>(vm, "bucket-mib");
  spec.gradient_lag = get<int>(vm, "gradient-lag");
  spec.audit_samples = get<bool>(vm, "audit-samples");
  spec.verify_replicas_every = get<long>(vm, "verify-replicas-every");
  require(spec.bucket_mib > 0, "--bucket-mib must be positive");
  require(spec.gradient_lag == 0 || spec.gradient_lag == 1, "--gradient-lag must be 0 or 1");
  require(spec.verify_replicas_every >= 0, "--verify-replicas-every must not be negative");
}

void read_data_source(const po::variables_map& vm, TrainSpec& spec) {
  // At most one data source survives the merge of command line and file (a source given on
  // the command line hides the file's), so the choice is simple here.
  const bool has_dataset = vm.count("dataset") > 0;
  const bool has_synthetic = vm.count("synthetic") > 0;
  const bool synthetic_flag = has_synthetic && get<bool>(vm, "synthetic");
  require(!(synthetic_flag && has_dataset),
          "synthetic and dataset are exclusive; choose one data source");
  require(!(has_synthetic && !synthetic_flag && !has_dataset),
          "synthetic = false needs a dataset directory (--dataset DIR)");
  spec.data.synthetic = !has_dataset;
  if (has_dataset) spec.data.dataset = get<std::string>(vm, "dataset");
  const long samples = get<long>(vm, "samples"), eval_samples = get<long>(vm, "eval-samples");
  const int height = get<int>(vm, "height"), width = get<int>(vm, "width");
  require(samples > 0, "--samples must be positive");
  require(eval_samples >= 0, "--eval-samples must not be negative");
  require(height > 0 && width > 0,
          fmt::format("--height and --width must be positive (got {}x{})", height, width));
  spec.data.samples = static_cast<std::size_t>(samples);
  spec.data.eval_samples = static_cast<std::size_t>(eval_samples);
  spec.data.shape = {spec.model.input_channels, height, width};
  spec.data.seed = spec.seed;
}

// Options of the published DeepCAM layout; each is refused for any other data source.
void read_deepcam_options(const po::variables_map& vm, TrainSpec& spec) {
  auto& deepcam = spec.data.deepcam;
  deepcam.seed = spec.seed;
  deepcam.label_set = get<int>(vm, "labels");
  require(deepcam.label_set == 0 || deepcam.label_set == 1,
          fmt::format("--labels must be 0 or 1, not {}", deepcam.label_set));
  if (const auto channels = get<std::string>(vm, "channels"); channels != "all")
    deepcam.channels = core::parse_channel_selection(channels);
  if (const auto crop = get<std::string>(vm, "crop"); crop != "none") {
    const auto size = parse_int_list(crop, "--crop");
    require(size.size() == 2 && size[0] > 0 && size[1] > 0,
            fmt::format("--crop takes a height and a width, e.g. 384,576 (got '{}')", crop));
    deepcam.crop_height = size[0];
    deepcam.crop_width = size[1];
  }
  deepcam.downsample = get<int>(vm, "downsample");
  require(deepcam.downsample >= 1, "--downsample must be at least 1");
  // The ClimateNet reader takes the same selection, crop and downsampling.
  auto& climatenet = spec.data.climatenet;
  climatenet = {.channels = deepcam.channels,
                .crop_height = deepcam.crop_height,
                .crop_width = deepcam.crop_width,
                .downsample = deepcam.downsample,
                .seed = deepcam.seed};
  if (const auto normalization = get<std::string>(vm, "normalization"); normalization != "auto")
    climatenet.statistics = normalization;
  const auto layout =
      !spec.data.synthetic ? core::dataset_layout(spec.data.dataset) : core::DatasetLayout::other;
  // By value, not by whether an option was given: config.ini spells out every default.
  const bool deepcam_layout = layout == core::DatasetLayout::deepcam,
             climatenet_layout = layout == core::DatasetLayout::climatenet,
             packed_layout = layout == core::DatasetLayout::packed;
  constexpr const char* kDeepCam =
      "the DeepCAM layout (--dataset ROOT with ROOT/stats.h5 and "
      "ROOT/train/)";
  constexpr const char* kClimateNet = "the ClimateNet layout (--dataset ROOT with ROOT/train/*.nc)";
  constexpr const char* kEither = "the DeepCAM or ClimateNet layout (docs/data.md)";
  const std::tuple<const char*, bool, bool, const char*> layout_only[] = {
      {"labels", deepcam.label_set != 0, deepcam_layout, kDeepCam},
      {"channels", !deepcam.channels.empty(), deepcam_layout || climatenet_layout, kEither},
      {"crop", deepcam.crop_height > 0, deepcam_layout || climatenet_layout, kEither},
      {"downsample", deepcam.downsample != 1, deepcam_layout || climatenet_layout, kEither},
      {"stage-to", !get<std::string>(vm, "stage-to").empty(),
       deepcam_layout || climatenet_layout || packed_layout ||
           layout == core::DatasetLayout::cosmoflow,
       "the DeepCAM, ClimateNet or CosmoFlow layout, or one `hardy data pack` wrote "
       "(docs/data.md)"},
      {"normalization", !climatenet.statistics.empty(), climatenet_layout, kClimateNet}};
  for (const auto& [option, chosen, applies, needs] : layout_only)
    require(!chosen || applies,
            packed_layout && chosen
                ? fmt::format("--{} does not apply to a packed dataset: `hardy data pack` applied "
                              "the window and normalisation already (see {}/packed.json)",
                              option, spec.data.dataset.string())
                : fmt::format("--{} needs a dataset in {}", option, needs));
  if (packed_layout) {  // its channels are the ones packed
    spec.model.input_channels = core::packed_channels(spec.data.dataset);
    spec.data.shape.channels = spec.model.input_channels;
  }
  if (!deepcam.channels.empty()) {
    spec.model.input_channels = static_cast<int>(deepcam.channels.size());
    spec.data.shape.channels = spec.model.input_channels;
  }
}

// How samples reach the step: bad-sample policy, staging, prefetching, class weights.
void read_input_pipeline(const po::variables_map& vm, TrainSpec& spec) {
  const auto bad_samples = get<std::string>(vm, "bad-samples");
  require(bad_samples == "fail" || bad_samples == "skip",
          fmt::format("--bad-samples must be fail or skip, not '{}'", bad_samples));
  spec.bad_samples =
      bad_samples == "skip" ? core::BadSamplePolicy::skip : core::BadSamplePolicy::fail;
  spec.stage_to = get<std::string>(vm, "stage-to");
  spec.stage_threads = get<int>(vm, "stage-threads");
  require(spec.stage_threads >= 1, "--stage-threads must be at least 1");
  spec.prefetch_batches = get<long>(vm, "prefetch-batches");
  spec.loader_threads =
      static_cast<int>(parse_auto_or_number(get<std::string>(vm, "loader-threads"),
                                            "--loader-threads", 1, "a number of at least 1")
                           .value_or(0));
  require(spec.prefetch_batches >= 0, "--prefetch-batches must not be negative");
  if (const auto overlap = get<std::string>(vm, "overlap-input"); overlap != "auto") {
    require(overlap == "on" || overlap == "off",
            fmt::format("--overlap-input must be on, off or auto, not '{}'", overlap));
    spec.overlap_input = overlap == "on";
  }
  const double cache_mib = get<double>(vm, "sample-cache-mib");
  require(cache_mib >= 0 && cache_mib < 1e9, "--sample-cache-mib must be between 0 and 1e9");
  spec.data.cache_bytes = static_cast<std::size_t>(cache_mib * (1 << 20));
  // The regression has none (read_model_options refuses one given).
  const auto text = vm.count("class-weights") ? get<std::string>(vm, "class-weights") : "auto";
  if (text.starts_with("frequency^")) {
    const auto power = text.substr(std::string_view("frequency^").size());
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(power, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used != 0 && used == power.size() && std::isfinite(value) && value <= 0,
            fmt::format("--class-weights frequency^P takes a power P of 0 or below (e.g. "
                        "frequency^-0.125), got '{}'",
                        text));
    spec.class_weight_power = value;
  } else if (text != "auto") {
    auto weights = parse_float_list(text, "--class-weights");
    require(weights.size() == static_cast<std::size_t>(spec.model.num_classes),
            fmt::format("--class-weights needs {} values, got {}", spec.model.num_classes,
                        weights.size()));
    for (float w : weights) require(w >= 0, "--class-weights must not be negative");
    spec.class_weights = std::move(weights);
  }
}

void read_checkpoint_options(const po::variables_map& vm, TrainSpec& spec) {
  spec.checkpoint_every = get<long>(vm, "checkpoint-every");
  spec.checkpoint_every_seconds = get<double>(vm, "checkpoint-every-seconds");
  spec.keep_last = get<int>(vm, "keep-last");
  spec.keep_every = get<int>(vm, "keep-every");
  const auto mode = get<std::string>(vm, "checkpoint-mode");
  const auto when_busy = get<std::string>(vm, "checkpoint-when-busy");
  spec.resume = get<std::string>(vm, "resume");
  spec.snapshot_every = parse_auto_or_number(get<std::string>(vm, "snapshot-every"),
                                             "--snapshot-every", 0, "a number of steps (0: never)")
                            .value_or(resilience::kSnapshotEveryAuto);
  spec.snapshot_dir = get<std::string>(vm, "snapshot-dir");
  require(spec.checkpoint_every >= 0 && spec.checkpoint_every_seconds >= 0,
          "checkpoint intervals must not be negative");
  require(spec.keep_last >= 1, "--keep-last must be at least 1");
  require(!spec.snapshot_dir.empty(), "--snapshot-dir must not be empty");
  require(spec.keep_every >= 0, "--keep-every must not be negative");
  require(mode == "async" || mode == "sync",
          fmt::format("--checkpoint-mode must be async or sync, not '{}'", mode));
  require(when_busy == "wait" || when_busy == "skip",
          fmt::format("--checkpoint-when-busy must be wait or skip, not '{}'", when_busy));
  spec.checkpoint_async = mode == "async";
  spec.checkpoint_skip_when_busy = when_busy == "skip";
}

// Failures: how many, how small the job may shrink, and what is injected for tests.
void read_fault_tolerance_options(const po::variables_map& vm, TrainSpec& spec) {
  spec.ranks_per_node = get<int>(vm, "ranks-per-node");
  spec.min_world_size = get<int>(vm, "min-world-size");
  spec.max_failures = get<int>(vm, "max-failures");
  spec.rebalance = resilience::parse_rebalance_policy(get<std::string>(vm, "rebalance"));
  spec.memory_snapshots = get<bool>(vm, "memory-snapshots");
  spec.collective_timeout_s = get<double>(vm, "collective-timeout");
  spec.hang_timeout_s =
      parse_auto_off_or_seconds(get<std::string>(vm, "hang-timeout"), "--hang-timeout");
  spec.hang_io_timeout_s = get<double>(vm, "hang-io-timeout");
  if (vm.count("inject-failure"))
    spec.inject_failures = get<std::vector<std::string>>(vm, "inject-failure");
  spec.stragglers = {.mode = resilience::parse_straggler_mode(get<std::string>(vm, "straggler")),
                     .slowdown = get<double>(vm, "straggler-slowdown"),
                     .window = get<long>(vm, "straggler-window"),
                     .window_s = get<double>(vm, "straggler-window-s"),
                     .confirm = get<long>(vm, "straggler-confirm"),
                     .confirm_s = get<double>(vm, "straggler-confirm-s"),
                     .warmup = get<long>(vm, "straggler-warmup")};
  require(spec.stragglers.slowdown > 0 && std::isfinite(spec.stragglers.slowdown),
          "--straggler-slowdown must be a positive fraction (0.1: 10% slower)");
  require(spec.stragglers.window >= 1, "--straggler-window must be at least 1 step");
  require(spec.stragglers.confirm >= 1, "--straggler-confirm must be at least 1 step");
  require(spec.stragglers.warmup >= 0, "--straggler-warmup must not be negative");
  require(spec.stragglers.window_s >= 0 && std::isfinite(spec.stragglers.window_s) &&
              spec.stragglers.confirm_s >= 0 && std::isfinite(spec.stragglers.confirm_s),
          "--straggler-window-s and --straggler-confirm-s must not be negative");
  if (const auto cost = get<std::string>(vm, "straggler-evict-cost"); cost != "auto") {
    const auto seconds = positive_seconds(cost);
    require(seconds.has_value(),
            "--straggler-evict-cost must be auto or a positive number of seconds");
    spec.stragglers.evict_cost_s = *seconds;
  }
  spec.regrow_cost_s = parse_auto_off_or_seconds(get<std::string>(vm, "regrow"), "--regrow");
  spec.spare_nodes_left = get<int>(vm, "spare-nodes-left");
  require(spec.spare_nodes_left >= 0, "--spare-nodes-left must not be negative");
  require(spec.ranks_per_node >= 1, "--ranks-per-node must be at least 1");
  require(spec.min_world_size >= 1, "--min-world-size must be at least 1");
  require(spec.max_failures >= 0, "--max-failures must not be negative");
  require(spec.collective_timeout_s > 0, "--collective-timeout must be positive");
  require(spec.hang_io_timeout_s > 0, "--hang-io-timeout must be positive");
  spec.domain = get<int>(vm, "domain");
  spec.domain_count = get<int>(vm, "domains");
  spec.domain_address = get<std::string>(vm, "domain-address");
  spec.domain_interface = get<std::string>(vm, "domain-interface");
  spec.domain_timeout_s = get<double>(vm, "domain-timeout");
  spec.domain_join = get<std::string>(vm, "domain-join");
  spec.run_lock_token = get<std::string>(vm, "run-lock-token");
  if (vm.count("domain-store")) spec.domain_store = get<std::string>(vm, "domain-store");
  spec.domain_store_token = get<std::string>(vm, "domain-store-token");
  require(spec.domain_count >= 1, "--domains must be at least 1");
  require(spec.domain >= -1 && spec.domain < spec.domain_count,
          "--domain must be -1 (none) or one of 0 .. --domains - 1");
  require(spec.domain < 0 || !spec.domain_store.empty(), "--domain needs --domain-store");
  require(spec.domain_timeout_s > 0, "--domain-timeout must be positive");
  spec.domain_sync_every = get<int>(vm, "domain-sync-every");
  spec.domain_exchange = resilience::parse_domain_exchange(get<std::string>(vm, "domain-exchange"));
  require(spec.domain_sync_every >= 1, "--domain-sync-every must be at least 1");
  // Checked with or without domains, so that `hardy submit` refuses it before the job queues.
  require(spec.checkpoint_every % spec.domain_sync_every == 0,
          "--checkpoint-every must be a multiple of --domain-sync-every: a checkpoint holds a "
          "step that every domain committed");
}

// The shape options of the networks other than `architecture` (model_options()).
std::vector<std::string> options_of_other_networks(core::Architecture architecture) {
  const std::vector<std::string> compact{
      "model-width",        "model-depth",      "aspp-channels", "aspp-rates",
      "low-level-channels", "decoder-channels", "norm",          "groups"};
  const std::vector<std::string> tiramisu{"dense-layers", "growth", "first-channels",
                                          "dense-kernel", "dropout"};
  // cosmoflow's cube replaces the synthetic climate fields' height and width.
  const std::vector<std::string> cosmoflow{"volume"}, fields{"height", "width"};
  std::vector<std::string> names;
  if (architecture != core::Architecture::compact)
    names.insert(names.end(), compact.begin(), compact.end());
  if (architecture != core::Architecture::tiramisu)
    names.insert(names.end(), tiramisu.begin(), tiramisu.end());
  if (architecture != core::Architecture::cosmoflow)
    names.insert(names.end(), cosmoflow.begin(), cosmoflow.end());
  else
    names.insert(names.end(), fields.begin(), fields.end());
  return names;
}

// What a dataset directory is, for a message that refuses it.
std::string layout_description(core::DatasetLayout layout) {
  switch (layout) {
    case core::DatasetLayout::deepcam:
      return "a DeepCAM dataset (segmentation of climate fields)";
    case core::DatasetLayout::climatenet:
      return "a ClimateNet dataset (segmentation of climate fields)";
    case core::DatasetLayout::packed:
      return "a packed dataset of climate fields (`hardy data pack`)";
    case core::DatasetLayout::cosmoflow:
      return "a CosmoFlow dataset";
    case core::DatasetLayout::other:
      break;
  }
  return "not in the CosmoFlow layout";
}

void read_model_options(const po::variables_map& vm, TrainSpec& spec) {
  auto& m = spec.model;
  m.width = get<int>(vm, "model-width");
  m.depth = get<int>(vm, "model-depth");
  m.aspp_channels = get<int>(vm, "aspp-channels");
  m.aspp_rates = parse_int_list(get<std::string>(vm, "aspp-rates"), "--aspp-rates");
  m.low_level_channels = get<int>(vm, "low-level-channels");
  m.decoder_channels = get<int>(vm, "decoder-channels");
  m.norm = core::parse_norm_kind(get<std::string>(vm, "norm"));
  m.groups = get<int>(vm, "groups");
  m.architecture = core::parse_architecture(get<std::string>(vm, "model"));
  // An option of another network's shape would be silently ignored: refuse it by name.
  std::vector<std::string> foreign;
  for (const auto& name : options_of_other_networks(m.architecture))
    if (vm.count(name) && !vm[name].defaulted()) foreign.push_back("--" + name);
  const bool one = foreign.size() == 1;
  require(foreign.empty(), fmt::format("{} {} another network's shape, not --model {}'s: remove {}",
                                       fmt::join(foreign, ", "), one ? "sets" : "set",
                                       core::to_string(m.architecture), one ? "it" : "them"));
  m.dense_layers = parse_int_list(get<std::string>(vm, "dense-layers"), "--dense-layers");
  m.growth = get<int>(vm, "growth");
  m.first_channels = get<int>(vm, "first-channels");
  m.dense_kernel = get<int>(vm, "dense-kernel");
  m.dropout = get<float>(vm, "dropout");
  if (m.regression()) {
    // CosmoFlow's sample: 4 redshifts of a cube, 4 targets.
    m.input_channels = core::kCosmologyChannels;
    m.num_classes = core::kCosmologyTargets;
    m.volume = get<int>(vm, "volume");
    const auto layout =
        spec.data.synthetic ? core::DatasetLayout::other : core::dataset_layout(spec.data.dataset);
    require(spec.data.synthetic || layout == core::DatasetLayout::cosmoflow,
            fmt::format("--model cosmoflow regresses CosmoFlow's 4 parameters: it trains on "
                        "--synthetic data or a dataset in the CosmoFlow layout (ROOT/train/ of "
                        "NAME.h5 with x and y, or of NAME_data.npy; docs/data.md); {} is {}",
                        spec.data.dataset.string(), layout_description(layout)));
    if (layout == core::DatasetLayout::cosmoflow) {
      // The network's input size is fixed by --volume; the files' cube must be that size.
      const int edge = core::CosmoFlowDataset(spec.data.dataset, "train").shape().depth;
      require(edge == m.volume,
              fmt::format("{} holds volumes of {}^3 voxels but --volume is {}: give --volume {}",
                          spec.data.dataset.string(), edge, m.volume, edge));
    }
    require(!vm.count("class-weights") || vm["class-weights"].defaulted(),
            "--class-weights weighs the classes of a segmentation; --model cosmoflow regresses "
            "4 parameters (MSE): remove it");
    spec.data.shape = {.channels = m.input_channels,
                       .height = m.volume,
                       .width = m.volume,
                       .depth = m.volume,
                       .targets = m.num_classes};
  }
  if (!m.regression() && !spec.data.synthetic &&
      core::dataset_layout(spec.data.dataset) == core::DatasetLayout::cosmoflow)
    throw InvalidArgument(fmt::format(
        "{} is a CosmoFlow dataset (volumes and 4 regression targets); --model {} segments "
        "climate fields: train it with --model cosmoflow",
        spec.data.dataset.string(), core::to_string(m.architecture)));
  m.validate();
  // A dataset's sample size is checked when it is opened (the crop and downsampling decide it).
  const int multiple = m.input_multiple();
  const auto& shape = spec.data.shape;
  require(!spec.data.synthetic || m.volumetric() ||
              (shape.height % multiple == 0 && shape.width % multiple == 0),
          fmt::format("--height and --width must be multiples of {} for --model {} (got {}x{})",
                      multiple, core::to_string(m.architecture), shape.height, shape.width));
}

void read_optimizer_options(const po::variables_map& vm, TrainSpec& spec) {
  auto& o = spec.optimizer;
  o.kind = core::parse_optimizer_kind(get<std::string>(vm, "optimizer"));
  o.momentum = get<float>(vm, "momentum");
  o.nesterov = get<bool>(vm, "nesterov");
  o.weight_decay = get<float>(vm, "weight-decay");
  o.beta1 = get<float>(vm, "beta1");
  o.beta2 = get<float>(vm, "beta2");
  o.eps = get<float>(vm, "eps");
  o.lamb_max_grad_norm = get<float>(vm, "lamb-max-grad-norm");
  o.lars_eta = get<float>(vm, "lars-eta");
  o.larc_clip = get<bool>(vm, "larc-clip");
  require(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1)");
  require(o.weight_decay >= 0, "--weight-decay must not be negative");
  require(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
          "--beta1 and --beta2 must be in [0, 1)");
  require(o.eps > 0 && std::isfinite(o.eps), "--eps must be positive");
  require(o.lamb_max_grad_norm >= 0 && std::isfinite(o.lamb_max_grad_norm),
          "--lamb-max-grad-norm must not be negative");
  spec.divergence.factor = get<double>(vm, "divergence-factor");
  spec.divergence.window = get<long>(vm, "divergence-window");
  require(spec.divergence.factor == 0 ||
              (spec.divergence.factor > 1 && std::isfinite(spec.divergence.factor)),
          "--divergence-factor must be 0 (never) or a number above 1");
  require(spec.divergence.window >= 1, "--divergence-window must be at least 1 step");
}

// --lr scaled from --lr-reference-batch to the job's --global-batch by --lr-scaling.
float peak_lr(const po::variables_map& vm, long global_batch) {
  const float lr = get<float>(vm, "lr");
  require(lr > 0 && std::isfinite(lr), "--lr must be positive");
  const auto scaling = get<std::string>(vm, "lr-scaling");
  require(scaling == "none" || scaling == "linear" || scaling == "sqrt",
          fmt::format("--lr-scaling must be none, linear or sqrt, not '{}'", scaling));
  const long reference = get<long>(vm, "lr-reference-batch");
  require(reference >= 0, "--lr-reference-batch must not be negative (0: the job's batch)");
  if (scaling == "none" || reference == 0) return lr;
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(reference);
  return static_cast<float>(lr * (scaling == "linear" ? ratio : std::sqrt(ratio)));
}

// A list option's value, or nothing for "none".
std::vector<float> optional_float_list(const po::variables_map& vm, const char* option) {
  const auto text = get<std::string>(vm, option);
  if (text == "none") return {};
  return parse_float_list(text, fmt::format("--{}", option));
}

void read_schedule_options(const po::variables_map& vm, TrainSpec& spec) {
  auto& s = spec.schedule;
  s.base_lr = peak_lr(vm, spec.global_batch);
  s.warmup_steps = get<long>(vm, "warmup-steps");
  s.warmup_fraction = get<float>(vm, "warmup-fraction");
  require(s.warmup_steps >= 0, "--warmup-steps must not be negative");
  require(s.warmup_fraction >= 0 && s.warmup_fraction <= 1, "--warmup-fraction must be in [0, 1]");
  // A recipe's warm-up is sized for the reference's run, and config.ini carries it into a
  // relaunch: a job shorter than its warm-up ends inside it, as the references' code would.
  s.warmup_may_outlast_run = true;
  s.decay = core::parse_lr_decay(get<std::string>(vm, "lr-decay"));
  s.final_fraction = get<float>(vm, "final-lr-fraction");
  require(s.final_fraction >= 0 && s.final_fraction <= 1, "--final-lr-fraction must be in [0, 1]");
  const auto milestones = optional_float_list(vm, "lr-milestones");
  s.milestones.assign(milestones.begin(), milestones.end());
  s.milestone_factors = optional_float_list(vm, "lr-milestone-factors");
  if (s.decay == core::LrSchedule::Decay::multistep) {
    require(!s.milestones.empty() && s.milestones.size() == s.milestone_factors.size(),
            fmt::format("--lr-decay multistep needs --lr-milestones and as many "
                        "--lr-milestone-factors (got {} and {})",
                        s.milestones.size(), s.milestone_factors.size()));
    // The remaining checks need the job's length; with a long stand-in (distinct fractions stay
    // distinct steps) they run now, so that a bad list is refused before the job starts.
    auto check = s;
    check.total_steps = std::max<long>(1'000'000, s.warmup_steps);
    check.warmup_may_outlast_run = true;
    check.validate();
  }
  // total_steps is set by the trainer, which knows the dataset size when --steps is 0.
}

// config.ini of the run: every option as resolved, so that a relaunch trains the same job.
// A recipe option's line ends with where its value came from (RecipeOrigins).
std::string effective_config_ini(const po::variables_map& vm, const TrainSpec& spec,
                                 const RecipeOrigins& origins) {
  std::ostringstream ini;
  ini << "# hardy " << HARDY_VERSION << " effective configuration\n";
  ini << fmt::format(
      "# training recipe: --model {}: {} ({}); the options below marked with it "
      "take its values, the others were given\n",
      core::to_string(spec.model.architecture), training_recipe(spec.model.architecture).name,
      training_recipe(spec.model.architecture).reference);
  const auto other_networks = options_of_other_networks(spec.model.architecture);
  for (const auto& [name, value] : vm) {
    if (name == "help" || name == "config" || value.empty()) continue;
    // Another network's shape options mean nothing to this job (and would be refused).
    if (std::find(other_networks.begin(), other_networks.end(), name) != other_networks.end())
      continue;
    // Resolved below; a resume or an injected failure belongs to one launch, not to the job.
    if (name == "synthetic" || name == "dataset" || name == "run-dir" || name == "resume" ||
        name == "precision" || name == "inject-failure" || name == "run-lock-token" ||
        (name.starts_with("domain") && name != "domain-sync-every" && name != "domain-exchange"))
      continue;
    ini << name << " = " << value_text(value);
    if (const auto origin = origins.find(name); origin != origins.end())
      ini << "  # " << origin->second;
    if (name == "lr" && spec.schedule.base_lr != get<float>(vm, "lr"))
      ini << fmt::format(" (peak rate at --global-batch {}: {:g})", spec.global_batch,
                         spec.schedule.base_lr);
    ini << "\n";
  }
  // As resolved: `auto` becomes the precision this job trains in.
  ini << "precision = " << core::to_string(spec.precision) << "\n";
  ini << "run-dir = " << spec.run_dir.string() << "\n";
  if (spec.data.synthetic)
    ini << "synthetic = true\n";
  else
    ini << "dataset = " << spec.data.dataset.string() << "\n";
  return ini.str();
}

// Each step reads its options and checks them; the order matters where a later step builds on
// an earlier one (the data shape takes the model's input channels, a DeepCAM channel selection
// changes them), and decides which of several wrong options is reported first.
TrainSpec spec_from(const po::variables_map& vm, const RecipeOrigins& origins) {
  TrainSpec spec;
  read_run_options(vm, spec);
  read_data_source(vm, spec);
  read_deepcam_options(vm, spec);
  read_input_pipeline(vm, spec);
  read_checkpoint_options(vm, spec);
  read_fault_tolerance_options(vm, spec);
  read_model_options(vm, spec);
  read_optimizer_options(vm, spec);
  read_schedule_options(vm, spec);
  spec.config_ini = effective_config_ini(vm, spec, origins);
  return spec;
}

void read_config_file(const std::string& path, const po::options_description& options,
                      po::variables_map& vm) {
  std::ifstream file(path);
  if (!file) throw InvalidArgument(fmt::format("cannot read configuration file '{}'", path));
  const std::string text{std::istreambuf_iterator<char>(file), {}};
  reject_option_placeholders(text, fmt::format("configuration file '{}'", path));
  std::istringstream lines(text);
  try {
    po::store(po::parse_config_file(lines, options, /*allow_unregistered=*/false), vm);
  } catch (const po::error& e) {
    throw InvalidArgument(fmt::format("configuration file '{}': {}", path, e.what()));
  }
}

}  // namespace

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> values;
  for (float v : parse_float_list(text, option)) {
    // Range first: converting a float outside int's range is undefined behaviour.
    if (!(std::abs(v) < 2e9f) || v != std::trunc(v))
      throw InvalidArgument(fmt::format("{} takes whole numbers, got '{}'", option, text));
    values.push_back(static_cast<int>(v));
  }
  return values;
}

std::vector<float> parse_float_list(const std::string& text, const std::string& option) {
  std::vector<float> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    std::size_t used = 0;
    try {
      values.push_back(std::stof(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && std::isspace(static_cast<unsigned char>(item[used]))) ++used;
    if (used == 0 || used != item.size())
      throw InvalidArgument(
          fmt::format("{}: '{}' is not a comma-separated list of numbers", option, text));
  }
  if (values.empty()) throw InvalidArgument(fmt::format("{} needs at least one value", option));
  return values;
}

std::optional<TrainSpec> parse_train_spec(const std::vector<std::string>& args) {
  const auto options = train_options();
  po::variables_map vm;
  if (!parse_command_line(
          args, options,
          {.command = "hardy train",
           .usage = "Usage: hardy train [--config FILE] [options]\n\n"
                    "Trains a network (--model: climate segmentation, or CosmoFlow's regression) "
                    "data-parallel over all ranks of the job.\n",
           .notify = false},
          vm, recipes_help()))
    return std::nullopt;
  const bool dataset_cli = vm.count("dataset") > 0;
  const bool synthetic_cli = vm.count("synthetic") > 0;
  if (vm.count("config")) {
    // Values already stored from the command line are kept: the command line wins. A data
    // source given on the command line also hides the file's other data source.
    po::variables_map from_file;
    read_config_file(vm["config"].as<std::string>(), options, from_file);
    for (const auto& [name, value] : from_file) {
      if ((dataset_cli || synthetic_cli) && (name == "dataset" || name == "synthetic")) continue;
      if (!vm.count(name) || vm[name].defaulted()) vm.erase(name), vm.insert({name, value});
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(e.what());
  }
  const auto origins = apply_training_recipe(vm, options);
  return spec_from(vm, origins);
}

TrainSpec load_train_spec(const std::filesystem::path& config_file) {
  const auto options = train_options();
  po::variables_map vm;
  read_config_file(config_file.string(), options, vm);
  po::notify(vm);
  const auto origins = apply_training_recipe(vm, options);
  return spec_from(vm, origins);
}

}  // namespace hardy::jobs
