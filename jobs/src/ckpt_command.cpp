#include <fmt/args.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <variant>

#include "command_line.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/jobs/commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace hardy::jobs {

namespace {

// A checkpoint's strings (hosts, the configuration) are bytes as the writer stored them, checked
// by checksum but not as UTF-8: JSON output shows invalid bytes as U+FFFD instead of failing.
std::string json_text(const nlohmann::json& value) {
  return value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

using checkpoint::CheckpointContents;
using checkpoint::NamedTensor;
using nlohmann::json;

constexpr const char* kUsage = R"(Usage: hardy ckpt <command> [options]

Look into checkpoints without training: every command only reads, but convert writes OUT.

Commands:
  list RUN_DIR         one line per checkpoint: step, time, size, valid or not, which is latest;
                       then the run's node-local snapshots on this node
  inspect FILE         step, epoch, world size, loss and every dataset with shape, dtype, checksum
  verify FILE...       exit status 0 when every file is a valid checkpoint, 1 (with the reason) if not
  diff A B             per-tensor maximum absolute (and relative) difference between two checkpoints
  convert FILE OUT     writes a checkpoint or node-local snapshot, validated, as a checkpoint file

FILE may be a checkpoint file or a node-local snapshot's slot file (slot-N.snapshot); both resume
with `hardy train --resume FILE`.

Run `hardy ckpt <command> --help` for a command's options.
)";

struct Parsed {
  po::variables_map options;
  std::vector<std::string> paths;
  bool help = false;  // --help was asked for and printed
};

// Parses the command's options (its table from ckpt_<command>_options) and its positional paths;
// prints `usage` and the options for --help.
Parsed parse(const std::string& command, const std::vector<std::string>& args,
             const po::options_description& options, std::string_view usage) {
  po::options_description paths;
  paths.add_options()("path", po::value<std::vector<std::string>>(), "");
  po::positional_options_description positional;
  positional.add("path", -1);
  const std::string name = "hardy ckpt " + command;
  Parsed parsed;
  parsed.help = !parse_command_line(
      args, options, {.command = name, .usage = usage, .positional = &positional, .hidden = &paths},
      parsed.options);
  if (parsed.options.count("path"))
    parsed.paths = parsed.options["path"].as<std::vector<std::string>>();
  return parsed;
}

void require_paths(const Parsed& parsed, const std::string& command, std::size_t min,
                   std::size_t max, const char* what) {
  if (parsed.paths.size() < min || parsed.paths.size() > max)
    throw InvalidArgument(
        fmt::format("{} takes {} (see hardy ckpt {} --help)", command, what, command));
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// A reason without the file name that every checkpoint error starts with.
std::string without_path(std::string reason, const fs::path& path) {
  const std::string prefix = path.string() + ": ";
  if (reason.starts_with(prefix)) reason.erase(0, prefix.size());
  return reason;
}

double file_time(const fs::path& path) {
  std::error_code error;
  const auto written = fs::last_write_time(path, error);
  if (error) return 0;
  const auto system = std::chrono::file_clock::to_sys(written);
  return std::chrono::duration<double>(system.time_since_epoch()).count();
}

// ---- list ----

constexpr const char* kListUsage =
    "Usage: hardy ckpt list RUN_DIR [--snapshot-dir DIR]\n\n"
    "Lists the checkpoints of a run directory (RUN_DIR/checkpoints, or RUN_DIR\n"
    "itself when it holds them): step, file, when it was saved, size, and whether\n"
    "it is valid (every checksum is read and checked). The one `latest` names is\n"
    "marked. Then the run's node-local snapshots that this node holds (what a crashed\n"
    "job left for its relaunch), each host's and fault domain's, checked the same way.\n";

// One line of the listing: the step, the file, when it was saved, its size and whether it is
// valid (every checksum read).
void print_entry(std::optional<long> step, const fs::path& path, std::size_t width,
                 const std::string& suffix) {
  std::string saved, status;
  std::uint64_t bytes = 0;
  try {
    const CheckpointContents contents = checkpoint::read_checkpoint_file(path);
    saved = core::iso_time(contents.state.unix_time);
    bytes = contents.file_bytes;
    status = "valid";
    step = contents.state.step;
  } catch (const Error& e) {
    saved = core::iso_time(file_time(path));
    std::error_code error;
    bytes = fs::file_size(path, error);
    status = "INVALID: " + without_path(e.what(), path);
  }
  std::cout << fmt::format("{:>8}  {:<{}}  {:<24}  {:>10}  {}{}\n",
                           step ? std::to_string(*step) : "?", path.filename().string(), width,
                           saved, human_bytes(bytes), status, suffix);
}

// The host directories of a run's node-local snapshots under ROOT on this node: ROOT/<run key>/*
// and, for jobs of fault domains, ROOT/domain-*/<run key>/*. Each tree is checked as the job
// checks it before anything in it is read; one that fails is named with the reason.
void list_node_snapshots(const fs::path& root, const fs::path& run_dir) {
  const std::string key = checkpoint::run_key(run_dir);
  std::vector<fs::path> roots{root};
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error))
    if (it->path().filename().string().starts_with("domain-") && !it->is_symlink())
      roots.push_back(it->path());
  bool any = false;
  for (const fs::path& domain_root : roots) {
    std::error_code ignored;
    for (fs::directory_iterator host(domain_root / key, ignored), end; !ignored && host != end;
         host.increment(ignored)) {
      const std::string name = host->path().filename().string();
      try {
        core::check_private_tree(domain_root, fs::path(key) / name, false);
      } catch (const core::UnsafeDirectory& e) {
        std::cout << fmt::format("node-local snapshots in {}: not read: {}\n",
                                 host->path().string(), e.what());
        continue;
      }
      const auto slots = checkpoint::list_snapshots(host->path());
      if (slots.empty()) continue;
      any = true;
      std::cout << fmt::format(
          "\nnode-local snapshots of host {} in {}\n{:>8}  {:<16}  {:<24}  {:>10}  {}\n", name,
          host->path().string(), "step", "file", "saved (UTC)", "size", "status");
      for (auto slot = slots.rbegin(); slot != slots.rend(); ++slot)
        print_entry(slot->step, slot->path, 16, slot == slots.rbegin() ? "  <- newest" : "");
    }
  }
  if (!any)
    std::cout << fmt::format("\nno node-local snapshots of this run under {} on this node\n",
                             root.string());
}

int list(const std::vector<std::string>& args) {
  const Parsed parsed = parse("list", args, ckpt_list_options(), kListUsage);
  if (parsed.help) return 0;
  require_paths(parsed, "list", 1, 1, "one run directory");
  const fs::path run_dir = parsed.paths.front();
  if (!fs::is_directory(run_dir))
    throw InvalidArgument(fmt::format("{} is not a directory", run_dir.string()));
  const fs::path dir =
      fs::is_directory(run_dir / "checkpoints") ? run_dir / "checkpoints" : run_dir;
  const auto entries = checkpoint::list_checkpoints(dir);
  const auto latest = checkpoint::read_latest(dir);
  if (entries.empty()) {
    std::cout << fmt::format("no checkpoints in {}\n", dir.string());
  } else {
    std::size_t width = 16;
    for (const auto& entry : entries)
      width = std::max(width, entry.path.filename().string().size());
    std::cout << fmt::format("checkpoints in {}\n{:>8}  {:<{}}  {:<24}  {:>10}  {}\n", dir.string(),
                             "step", "file", width, "saved (UTC)", "size", "status");
    for (const auto& entry : entries) {
      const bool is_latest = latest && latest->filename() == entry.path.filename();
      print_entry(entry.step, entry.path, width, is_latest ? "  <- latest" : "");
    }
    if (latest && !fs::exists(*latest))
      std::cout << fmt::format("latest names {}, which does not exist\n",
                               latest->filename().string());
  }
  // The node-local tier is keyed by the run directory the job was given, made absolute: the
  // checkpoints' parent when RUN_DIR was the checkpoints directory itself.
  list_node_snapshots(parsed.options["snapshot-dir"].as<std::string>(),
                      dir == run_dir ? fs::absolute(run_dir).parent_path() : run_dir);
  return 0;
}

// ---- inspect ----

struct TensorStatistics {
  double min = 0, max = 0, mean = 0;
};

TensorStatistics statistics(const NamedTensor& tensor) {
  if (tensor.values.empty()) return {};
  TensorStatistics s{std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity(), 0};
  double sum = 0;
  for (float v : tensor.values) {
    s.min = std::min(s.min, static_cast<double>(v));
    s.max = std::max(s.max, static_cast<double>(v));
    sum += v;
  }
  s.mean = sum / static_cast<double>(tensor.values.size());
  return s;
}

std::map<std::string, const NamedTensor*> tensors_by_path(const checkpoint::TrainingState& state) {
  std::map<std::string, const NamedTensor*> tensors;
  for (const NamedTensor& t : state.model)
    tensors.emplace(std::string(checkpoint::kModelGroup) + t.name, &t);
  for (const NamedTensor& t : state.optimizer)
    tensors.emplace(std::string(checkpoint::kOptimizerGroup) + t.name, &t);
  return tensors;
}

// Every scalar of the checkpoint (checkpoint::scalar_fields()) at its JSON pointer, so that the
// JSON cannot miss one.
json to_json(const fs::path& path, const CheckpointContents& contents) {
  const checkpoint::TrainingState& s = contents.state;
  json datasets = json::array();
  const auto tensors = tensors_by_path(s);
  for (const auto& d : contents.datasets) {
    json item = {{"path", d.path},
                 {"dtype", d.dtype},
                 {"shape", d.shape},
                 {"checksum", fmt::format("{:016x}", d.checksum)}};
    if (const auto found = tensors.find(d.path); found != tensors.end()) {
      const TensorStatistics stats = statistics(*found->second);
      item["min"] = stats.min;
      item["max"] = stats.max;
      item["mean"] = stats.mean;
    }
    datasets.push_back(std::move(item));
  }
  json report = {{"file", path.string()},
                 {"bytes", contents.file_bytes},
                 {"format", checkpoint::kFormatName},
                 {"format_version", contents.format_version},
                 {"time", core::iso_time(s.unix_time)},
                 {"datasets", std::move(datasets)}};
  for (const checkpoint::ScalarField& scalar : checkpoint::scalar_fields())
    std::visit(
        [&](const auto& value) {
          report[json::json_pointer(std::string(scalar.json_pointer))] = value;
        },
        scalar.get(s));
  return report;
}

// The text's summary lines. A pattern names scalar fields by their key (the JSON pointer without
// the leading '/' and with '_' for '/': /lr_schedule/base_lr is {lr_schedule_base_lr}), with
// fmt's format specifications.
struct SummaryLine {
  const char* label;
  const char* pattern;
};
constexpr SummaryLine kSummary[] = {
    {"step", "{step}"},
    {"epoch", "{epoch}"},
    {"world size", "{world_size}"},
    {"loss", "{loss:.6g}"},
    {"optimizer", "{optimizer_kind}, {optimizer_steps} steps taken"},
    {"sampler", "seed {sampler_seed}, epoch {sampler_epoch}, cursor {sampler_cursor}"},
    {"rng seed", "{rng_seed}"},
    {"lr schedule",
     "{lr_schedule_decay} decay from {lr_schedule_base_lr:g}, {lr_schedule_warmup_steps} warm-up "
     "steps, {lr_schedule_total_steps} steps in all (final fraction "
     "{lr_schedule_final_fraction:g}, poly power {lr_schedule_poly_power:g}, step decay "
     "x{lr_schedule_step_gamma:g} every {lr_schedule_step_every} steps)"},
    {"precision", "{precision} (parameters and optimizer state are f32 in every precision)"},
    {"loss scale", "{loss_scale_scale:g} ({loss_scale_good_steps} good steps)"},
    {"saved", "{unix_time} by hardy {hardy_version} on {hosts}"},
    {"run", "{run_id} (configuration hash {config_hash})"},
};
// Scalars that only --json shows: the configuration is dozens of lines, the step's log lines
// (metrics and the audit's every sample) are one long JSON text.
constexpr std::string_view kOnlyInJson[] = {"/job/config", "/job/committed_lines"};

std::string summary_key(std::string_view json_pointer) {
  std::string key(json_pointer.substr(1));
  std::replace(key.begin(), key.end(), '/', '_');
  return key;
}

// Every scalar as a named argument for the summary's patterns; throws Error when a scalar has no
// place in the summary (a field added to the table but not here).
fmt::dynamic_format_arg_store<fmt::format_context> summary_arguments(
    const checkpoint::TrainingState& s) {
  fmt::dynamic_format_arg_store<fmt::format_context> arguments;
  for (const checkpoint::ScalarField& scalar : checkpoint::scalar_fields()) {
    const std::string key = summary_key(scalar.json_pointer);
    const bool shown = std::any_of(std::begin(kSummary), std::end(kSummary), [&](const auto& line) {
      const std::string_view pattern = line.pattern;
      return pattern.find("{" + key + "}") != std::string_view::npos ||
             pattern.find("{" + key + ":") != std::string_view::npos;
    });
    const bool only_in_json = std::find(std::begin(kOnlyInJson), std::end(kOnlyInJson),
                                        scalar.path) != std::end(kOnlyInJson);
    if (!shown && !only_in_json)
      throw Error(fmt::format("hardy ckpt inspect has no place for {} in its text ({{{}}})",
                              scalar.path, key));
    std::visit(
        [&](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::vector<std::string>>) {  // hosts, once each
            std::vector<std::string> names = value;
            names.erase(std::unique(names.begin(), names.end()), names.end());
            arguments.push_back(
                fmt::arg(key.c_str(), names.empty() ? "unknown hosts"
                                                    : fmt::format("{}", fmt::join(names, ", "))));
          } else if constexpr (std::is_same_v<T, double>) {
            if (key == "unix_time")
              arguments.push_back(fmt::arg(key.c_str(), core::iso_time(value)));
            else
              arguments.push_back(fmt::arg(key.c_str(), value));
          } else {
            arguments.push_back(fmt::arg(key.c_str(), value));
          }
        },
        scalar.get(s));
  }
  return arguments;
}

void print_text(const fs::path& path, const CheckpointContents& contents) {
  const checkpoint::TrainingState& s = contents.state;
  const auto arguments = summary_arguments(s);
  std::cout << fmt::format("{:<15}{} ({})\n{:<15}{} version {}\n", "file:", path.string(),
                           human_bytes(contents.file_bytes), "format:", checkpoint::kFormatName,
                           contents.format_version);
  for (const SummaryLine& line : kSummary)
    std::cout << fmt::format("{:<15}{}\n", fmt::format("{}:", line.label),
                             fmt::vformat(line.pattern, arguments));
  std::cout << fmt::format("{:<15}{} model, {} optimizer, {} of data\n\n",
                           "tensors:", s.model.size(), s.optimizer.size(),
                           human_bytes(checkpoint::tensor_bytes(s)));
  std::size_t width = 7;
  for (const auto& d : contents.datasets) width = std::max(width, d.path.size());
  std::cout << fmt::format("{:<{}}  {:<5}  {:<16}  {}\n", "dataset", width, "dtype", "shape",
                           "xxh64");
  for (const auto& d : contents.datasets)
    std::cout << fmt::format("{:<{}}  {:<5}  {:<16}  {:016x}\n", d.path, width, d.dtype,
                             shape_text(d.shape), d.checksum);
}

constexpr const char* kInspectUsage =
    "Usage: hardy ckpt inspect FILE [--json]\n\n"
    "Validates a checkpoint and prints where training stood (step, epoch, world\n"
    "size, loss, sampler, schedule) and every dataset with its dtype, shape and\n"
    "xxHash64 checksum.\n";

int inspect(const std::vector<std::string>& args) {
  const Parsed parsed = parse("inspect", args, ckpt_inspect_options(), kInspectUsage);
  if (parsed.help) return 0;
  require_paths(parsed, "inspect", 1, 1, "one checkpoint file");
  const fs::path path = parsed.paths.front();
  const CheckpointContents contents = checkpoint::read_checkpoint_file(path);
  if (parsed.options["json"].as<bool>())
    std::cout << json_text(to_json(path, contents)) << "\n";
  else
    print_text(path, contents);
  return 0;
}

// ---- verify ----

constexpr const char* kVerifyUsage =
    "Usage: hardy ckpt verify FILE...\n\n"
    "Reads every dataset of each checkpoint and checks the format, the version, the\n"
    "manifest and every checksum. Exit status 0 when all are valid, 1 when one is\n"
    "not (the reason goes to stderr), 2 when a file is missing or is not a\n"
    "checkpoint at all.\n";

int verify(const std::vector<std::string>& args) {
  const Parsed parsed = parse("verify", args, ckpt_verify_options(), kVerifyUsage);
  if (parsed.help) return 0;
  require_paths(parsed, "verify", 1, std::numeric_limits<std::size_t>::max(),
                "one or more checkpoint files");
  int status = 0;
  for (const fs::path path : parsed.paths) {
    try {
      const CheckpointContents contents = checkpoint::read_checkpoint_file(path);
      std::cout << fmt::format("{}: valid (step {}, {} datasets, every checksum matches)\n",
                               path.string(), contents.state.step, contents.datasets.size());
    } catch (const checkpoint::CorruptCheckpoint& e) {
      std::cerr << fmt::format("{}: INVALID: {}\n", path.string(), without_path(e.what(), path));
      status = 1;
    }
  }
  return status;
}

// ---- diff ----

struct TensorDifference {
  std::string path;
  double max_abs = 0;
  double max_rel = 0;  // max_abs relative to the largest magnitude in A
};

TensorDifference compare(const std::string& path, const NamedTensor& a, const NamedTensor& b) {
  TensorDifference d{path};
  double largest = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    const double x = a.values[i], y = b.values[i];
    double difference = std::abs(x - y);
    if (std::isnan(difference))
      difference = std::isnan(x) && std::isnan(y) ? 0 : std::numeric_limits<double>::infinity();
    d.max_abs = std::max(d.max_abs, difference);
    largest = std::max(largest, std::abs(x));
  }
  d.max_rel = d.max_abs == 0 ? 0
              : largest == 0 ? std::numeric_limits<double>::infinity()
                             : d.max_abs / largest;
  return d;
}

constexpr const char* kDiffUsage =
    "Usage: hardy ckpt diff A B [--json]\n\n"
    "Compares the tensors of two checkpoints: for each tensor in both, the maximum\n"
    "absolute difference and that difference relative to the tensor's largest\n"
    "magnitude in A; tensors in only one of them or with other shapes are listed.\n"
    "Exit status 0 whatever the differences.\n";

int diff(const std::vector<std::string>& args) {
  const Parsed parsed = parse("diff", args, ckpt_diff_options(), kDiffUsage);
  if (parsed.help) return 0;
  require_paths(parsed, "diff", 2, 2, "two checkpoint files");
  const fs::path path_a = parsed.paths[0], path_b = parsed.paths[1];
  const CheckpointContents a = checkpoint::read_checkpoint_file(path_a);
  const CheckpointContents b = checkpoint::read_checkpoint_file(path_b);
  const auto tensors_a = tensors_by_path(a.state), tensors_b = tensors_by_path(b.state);
  std::vector<TensorDifference> differences;
  std::vector<std::string> only_a, only_b, other_shape;
  for (const auto& [path, tensor] : tensors_a) {
    const auto found = tensors_b.find(path);
    if (found == tensors_b.end())
      only_a.push_back(path);
    else if (found->second->dims != tensor->dims)
      other_shape.push_back(path);
    else
      differences.push_back(compare(path, *tensor, *found->second));
  }
  for (const auto& [path, tensor] : tensors_b)
    if (!tensors_a.contains(path)) only_b.push_back(path);
  const auto largest =
      std::max_element(differences.begin(), differences.end(),
                       [](const auto& x, const auto& y) { return x.max_abs < y.max_abs; });
  const auto identical = std::count_if(differences.begin(), differences.end(),
                                       [](const auto& d) { return d.max_abs == 0; });

  if (parsed.options["json"].as<bool>()) {
    json tensors = json::array();
    for (const auto& d : differences)
      tensors.push_back(
          {{"path", d.path}, {"max_abs_diff", d.max_abs}, {"max_rel_diff", d.max_rel}});
    std::cout << json_text(
                     json{{"a", {{"file", path_a.string()}, {"step", a.state.step}}},
                          {"b", {{"file", path_b.string()}, {"step", b.state.step}}},
                          {"tensors", std::move(tensors)},
                          {"identical", identical},
                          {"max_abs_diff", largest == differences.end() ? 0.0 : largest->max_abs},
                          {"only_in_a", only_a},
                          {"only_in_b", only_b},
                          {"shape_differs", other_shape}})
              << "\n";
    return 0;
  }
  std::size_t width = 6;
  for (const auto& d : differences) width = std::max(width, d.path.size());
  std::cout << fmt::format("A: {} (step {})\nB: {} (step {})\n\n{:<{}}  {:>12}  {:>12}\n",
                           path_a.string(), a.state.step, path_b.string(), b.state.step, "tensor",
                           width, "max |a-b|", "relative");
  for (const auto& d : differences)
    std::cout << fmt::format("{:<{}}  {:>12.4e}  {:>12.4e}\n", d.path, width, d.max_abs, d.max_rel);
  for (const auto& path : only_a) std::cout << fmt::format("{}: only in A\n", path);
  for (const auto& path : only_b) std::cout << fmt::format("{}: only in B\n", path);
  for (const auto& path : other_shape) std::cout << fmt::format("{}: shapes differ\n", path);
  std::cout << fmt::format("\n{} tensors compared: {} identical, {} differ", differences.size(),
                           identical, differences.size() - static_cast<std::size_t>(identical));
  if (largest != differences.end() && largest->max_abs > 0)
    std::cout << fmt::format(" (largest difference {:.4e} in {})", largest->max_abs, largest->path);
  std::cout << "\n";
  return 0;
}

// ---- convert ----

constexpr const char* kConvertUsage =
    "Usage: hardy ckpt convert FILE OUT\n\n"
    "Reads FILE (a checkpoint or a node-local snapshot's slot file), validates it, and\n"
    "writes it as a checkpoint file OUT (HDF5, readable by h5py and h5dump), atomically.\n"
    "OUT must not exist yet. Node memory is lost with the node: convert a snapshot to\n"
    "keep it.\n";

int convert(const std::vector<std::string>& args) {
  const Parsed parsed = parse("convert", args, ckpt_convert_options(), kConvertUsage);
  if (parsed.help) return 0;
  require_paths(parsed, "convert", 2, 2, "a checkpoint or snapshot file and the file to write");
  const fs::path from = parsed.paths[0], to = parsed.paths[1];
  std::error_code error;
  if (fs::exists(fs::symlink_status(to, error)))
    throw InvalidArgument(fmt::format("{} exists; remove it or choose another name", to.string()));
  const CheckpointContents contents = checkpoint::read_checkpoint_file(from);
  const auto bytes = checkpoint::write_checkpoint_file(contents.state, to);
  std::cout << fmt::format("{} (step {}) written as {} ({})\n", from.string(), contents.state.step,
                           to.string(), human_bytes(bytes));
  return 0;
}

}  // namespace

po::options_description ckpt_list_options() {
  po::options_description options("hardy ckpt list options");
  options.add_options()("help,h", "print this help")(
      "snapshot-dir", po::value<std::string>()->default_value(train_default("snapshot-dir")),
      "the node-local snapshot root that `hardy train --snapshot-dir` used");
  return options;
}

po::options_description ckpt_convert_options() {
  po::options_description options("hardy ckpt convert options");
  options.add_options()("help,h", "print this help");
  return options;
}

po::options_description ckpt_inspect_options() {
  po::options_description options("hardy ckpt inspect options");
  options.add_options()("help,h", "print this help")(
      "json", po::bool_switch(),
      "print the same as one JSON object (with each tensor's min, max and mean)");
  return options;
}

po::options_description ckpt_verify_options() {
  po::options_description options("hardy ckpt verify options");
  options.add_options()("help,h", "print this help");
  return options;
}

po::options_description ckpt_diff_options() {
  po::options_description options("hardy ckpt diff options");
  options.add_options()("help,h", "print this help")("json", po::bool_switch(),
                                                     "print the differences as one JSON object");
  return options;
}

int ckpt_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string& command = args.front();
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "list") return list(rest);
  if (command == "inspect") return inspect(rest);
  if (command == "verify") return verify(rest);
  if (command == "diff") return diff(rest);
  if (command == "convert") return convert(rest);
  throw InvalidArgument(fmt::format(
      "unknown ckpt command '{}'; choose list, inspect, verify, diff or convert", command));
}

}  // namespace hardy::jobs
