#include "hardy/core/data/packed_samples.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "file_reads.hpp"
#include "hardy/core/compute/labels.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "sample_window.hpp"

namespace hardy::core {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kFormat = "hardy-packed";
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kBf16 = 1;  // the only element type written so far
constexpr std::array<char, 8> kPackedMagic = {'h', 'd', 'y', '-', 'p', 'a', 'c', 'k'};

struct Header {
  std::array<char, 8> magic;
  std::uint32_t version, dtype, channels, height, width, reserved;
};
static_assert(sizeof(Header) == 32);

// Round to nearest, ties to even (what a GPU's conversion does); NaNs stay NaNs.
std::uint16_t to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::string quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

nlohmann::json read_manifest(const fs::path& root) {
  const fs::path path = root / kPackedManifest;
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("{} is missing: not a packed dataset", quoted(path)));
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("{} is not valid JSON: {}", quoted(path), e.what()));
  }
  if (!manifest.is_object() || manifest.value("format", "") != kFormat)
    throw InvalidArgument(
        fmt::format("{} does not describe a packed dataset (format {})", quoted(path), kFormat));
  if (manifest.value("version", 0u) != kVersion || manifest.value("dtype", "") != "bf16")
    throw InvalidArgument(fmt::format(
        "{} is of version {} with {} fields; this hardy reads version {} with bf16 fields",
        quoted(path), manifest.value("version", 0u), manifest.value("dtype", "?"), kVersion));
  return manifest;
}

// The bytes of one packed sample of `shape`.
std::uint64_t sample_file_bytes(const SampleShape& shape) {
  return sizeof(Header) + 2 * shape.field_elements() + shape.label_elements();
}

// Writes one sample's file from its fp32 fields and int32 labels.
void write_packed_sample(const fs::path& path, const SampleShape& shape,
                         std::span<const float> fields, std::span<const std::int32_t> labels,
                         std::vector<char>& bytes, std::size_t index, const std::string& split) {
  bytes.resize(sample_file_bytes(shape));
  const Header header{.magic = kPackedMagic,
                      .version = kVersion,
                      .dtype = kBf16,
                      .channels = static_cast<std::uint32_t>(shape.channels),
                      .height = static_cast<std::uint32_t>(shape.height),
                      .width = static_cast<std::uint32_t>(shape.width),
                      .reserved = 0};
  std::memcpy(bytes.data(), &header, sizeof header);
  char* out = bytes.data() + sizeof header;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::uint16_t value = to_bf16(fields[i]);
    if ((value & 0x7f80u) == 0x7f80u)
      throw InvalidArgument(fmt::format(
          "sample {} of the {} split has field value {} at element {}, which bf16 cannot hold",
          index, split, fields[i], i));
    std::memcpy(out + 2 * i, &value, 2);
  }
  out += 2 * fields.size();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= kNumClasses)
      throw InvalidArgument(fmt::format("sample {} of the {} split has label {} at pixel {}", index,
                                        split, labels[i], i));
    out[i] = static_cast<char>(labels[i]);
  }
  write_atomically(path, [&](const fs::path& temporary) {
    std::ofstream file(temporary, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    file.close();
    if (!file)
      throw IoError(fmt::format("cannot write {}: {}", quoted(temporary), std::strerror(errno)));
  });
}

}  // namespace

bool is_packed_layout(const fs::path& root) {
  std::error_code error;
  if (!fs::is_regular_file(root / kPackedManifest, error)) return false;
  std::ifstream in(root / kPackedManifest);
  const auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return manifest.is_object() && manifest.value("format", "") == kFormat;
}

int packed_channels(const fs::path& root) {
  const auto manifest = read_manifest(root);
  return static_cast<int>(manifest.value("channels", nlohmann::json::array()).size());
}

PackReport pack_dataset(const std::vector<PackedSplit>& splits, const fs::path& root, int threads,
                        const std::function<void(std::size_t done)>& progress) {
  if (splits.empty()) throw InvalidArgument("nothing to pack: no splits");
  if (threads < 1) throw InvalidArgument(fmt::format("{} threads cannot pack", threads));
  const SampleShape shape = splits.front().source->shape();
  for (const PackedSplit& split : splits) {
    if (split.name != "train" && split.name != "validation" && split.name != "test")
      throw InvalidArgument(
          fmt::format("a packed dataset's splits are train, validation and "
                      "test, not '{}'",
                      split.name));
    if (split.source->size() == 0)
      throw InvalidArgument(fmt::format("the {} split has no samples", split.name));
    if (split.source->shape() != shape)
      throw InvalidArgument(fmt::format("the {} split has samples of {}, the {} split of {}",
                                        split.name, to_string(split.source->shape()),
                                        splits.front().name, to_string(shape)));
  }
  std::error_code error;
  if (fs::exists(root, error) && !fs::is_empty(root, error))
    throw InvalidArgument(fmt::format("{} is not empty: pack into a new directory", quoted(root)));
  fs::create_directories(root, error);
  if (error) throw IoError(fmt::format("cannot create {}: {}", quoted(root), error.message()));

  PackReport report;
  std::atomic<std::size_t> done{0};
  nlohmann::json counts = nlohmann::json::object();
  for (const PackedSplit& split : splits) {
    const fs::path dir = root / split.name;
    fs::create_directories(dir, error);
    if (error) throw IoError(fmt::format("cannot create {}: {}", quoted(dir), error.message()));
    const std::size_t count = split.source->size();
    std::atomic<std::size_t> next{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const auto work = [&] {
      std::vector<float> fields(shape.field_elements());
      std::vector<std::int32_t> labels(shape.label_elements());
      std::vector<char> bytes;
      try {
        for (std::size_t i = next++; i < count; i = next++) {
          split.source->load(i, fields, labels);
          write_packed_sample(dir / fmt::format("{:08d}{}", i, kPackedExtension), shape, fields,
                              labels, bytes, i, split.name);
          const std::size_t finished = ++done;
          if (progress) {
            const std::lock_guard lock(failure_mutex);
            progress(finished);
          }
        }
      } catch (...) {
        next = count;  // the others stop after their sample
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    };
    std::vector<std::jthread> workers;
    for (int t = 1; t < std::min<int>(threads, static_cast<int>(count)); ++t)
      workers.emplace_back(work);
    work();
    workers.clear();  // joins
    if (failure) std::rethrow_exception(failure);
    report.samples[split.name] = count;
    report.bytes += count * sample_file_bytes(shape);
    counts[split.name] = count;
  }
  const SampleSource& first = *splits.front().source;
  const nlohmann::json manifest = {{"format", kFormat},
                                   {"version", kVersion},
                                   {"dtype", "bf16"},
                                   {"channels", first.channel_names()},
                                   {"height", shape.height},
                                   {"width", shape.width},
                                   {"source", first.describe()},
                                   {"splits", counts}};
  write_atomically(root / kPackedManifest, [&](const fs::path& temporary) {
    std::ofstream file(temporary);
    file << manifest.dump(1) << "\n";
    file.close();
    if (!file)
      throw IoError(fmt::format("cannot write {}: {}", quoted(temporary), std::strerror(errno)));
  });
  return report;
}

PackedSamples::PackedSamples(const fs::path& root, std::string_view split)
    : root_(root), split_(split) {
  check_split_name("packed", split);
  const auto manifest = read_manifest(root);
  const auto channels = manifest.value("channels", nlohmann::json::array());
  const int height = manifest.value("height", 0), width = manifest.value("width", 0);
  if (!channels.is_array() || channels.empty() || height <= 0 || width <= 0)
    throw InvalidArgument(
        fmt::format("{} gives no usable sample shape", quoted(root / kPackedManifest)));
  for (const auto& name : channels) channel_names_.push_back(name.get<std::string>());
  shape_ = {static_cast<int>(channel_names_.size()), height, width};
  source_ = manifest.value("source", "");
  const auto counts = manifest.value("splits", nlohmann::json::object());
  if (!counts.contains(split_))
    throw InvalidArgument(
        fmt::format("the packed dataset {} has no {} split", quoted(root), split_));
  files_ = split_files("packed", root / split_, kPackedExtension);
  if (files_.size() != counts[split_].get<std::size_t>())
    throw InvalidArgument(fmt::format("{} holds {} packed samples; {} says {}",
                                      quoted(root / split_), files_.size(),
                                      quoted(root / kPackedManifest), counts[split_].dump()));
}

std::string PackedSamples::describe() const {
  return fmt::format("packed bf16 {} split of {}: {} samples of {} (from {})", split_,
                     quoted(root_), files_.size(), to_string(shape_), source_);
}

void PackedSamples::load(std::size_t index, std::span<float> fields_chw,
                         std::span<std::int32_t> labels_hw) const {
  check_load_arguments(index, fields_chw, labels_hw);
  read_sample(index, fields_chw, {}, labels_hw);
}

void PackedSamples::load_stored(std::size_t index, std::span<std::byte> fields_chw,
                                std::span<std::int32_t> labels_hw) const {
  check_stored_arguments(index, fields_chw, labels_hw);
  read_sample(index, {}, fields_chw, labels_hw);
}

void PackedSamples::read_sample(std::size_t index, std::span<float> widened,
                                std::span<std::byte> stored_out,
                                std::span<std::int32_t> labels_hw) const {
  const fs::path& source = files_[index];
  // A named struct, not a structured binding: clang before 16 (the sanitizer builds) cannot
  // capture one in a lambda.
  const FileLocation::Found located = location_.of(source);
  const auto bad = [&](const std::string& reason) {
    throw BadSample(index, source.string(), reason + located.note);
  };
  const FileDescriptor fd(located.path);
  if (fd.get() < 0) bad(fmt::format("cannot be opened: {}", std::strerror(errno)));
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) bad(fmt::format("cannot be read: {}", std::strerror(errno)));
  const std::uint64_t expected = sample_file_bytes(shape_);
  if (static_cast<std::uint64_t>(status.st_size) != expected)
    bad(fmt::format("has {} bytes; a packed sample of {} has {}", status.st_size, to_string(shape_),
                    expected));
  Header header{};
  std::string problem = read_exactly(fd.get(), &header, sizeof header, 0);
  if (!problem.empty()) bad(problem);
  if (header.magic != kPackedMagic || header.version != kVersion || header.dtype != kBf16 ||
      header.channels != static_cast<std::uint32_t>(shape_.channels) ||
      header.height != static_cast<std::uint32_t>(shape_.height) ||
      header.width != static_cast<std::uint32_t>(shape_.width))
    bad(fmt::format("is not a packed bf16 sample of {} (its header says {}x{}x{}, version {})",
                    to_string(shape_), header.channels, header.height, header.width,
                    header.version));
  const std::size_t n = shape_.field_elements(), pixels = labels_hw.size();
  unsigned non_finite = 0;
  const auto check_words = [&](const std::uint16_t* words, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
      non_finite |= static_cast<unsigned>((words[i] & 0x7f80u) == 0x7f80u);
  };
  const std::uint16_t* stored_words = nullptr;
  // Read in pieces that stay in the core's cache and checked (and widened) from there: the
  // memory sees the file's bytes once, and the fp32 values once.
  constexpr std::size_t kPiece = std::size_t{128} << 10;  // values: 256 KiB of bf16
  if (!stored_out.empty()) {
    // As stored: straight into the caller's memory (page-locked, for a device to copy from).
    stored_words = reinterpret_cast<const std::uint16_t*>(stored_out.data());
    for (std::size_t at = 0; at < n; at += kPiece) {
      const std::size_t count = std::min(kPiece, n - at);
      problem =
          read_exactly(fd.get(), stored_out.data() + 2 * at, 2 * count, sizeof header + 2 * at);
      if (!problem.empty()) bad(problem);
      check_words(stored_words + at, count);
    }
  } else {
    thread_local std::vector<std::uint16_t> stored;
    stored.resize(kPiece);
    for (std::size_t at = 0; at < n; at += kPiece) {
      const std::size_t count = std::min(kPiece, n - at);
      problem = read_exactly(fd.get(), stored.data(), 2 * count, sizeof header + 2 * at);
      if (!problem.empty()) bad(problem);
      check_words(stored.data(), count);
      for (std::size_t i = 0; i < count; ++i)
        widened[at + i] = std::bit_cast<float>(static_cast<std::uint32_t>(stored[i]) << 16);
    }
  }
  if (non_finite != 0) {
    const auto value = [&](std::size_t i) {
      return stored_words != nullptr
                 ? std::bit_cast<float>(static_cast<std::uint32_t>(stored_words[i]) << 16)
                 : widened[i];
    };
    std::size_t at = 0;
    while (std::isfinite(value(at))) ++at;
    const std::size_t plane = static_cast<std::size_t>(shape_.height) * shape_.width;
    bad(fmt::format("has a non-finite field ({}) in channel {} at row {}, column {}", value(at),
                    at / plane, at % plane / shape_.width, at % shape_.width));
  }
  thread_local std::vector<std::int8_t> stored_labels;
  stored_labels.resize(pixels);
  problem = read_exactly(fd.get(), stored_labels.data(), pixels, sizeof header + 2 * n);
  if (!problem.empty()) bad(problem);
  unsigned out_of_range = 0;
  for (std::size_t i = 0; i < pixels; ++i) {
    out_of_range |= static_cast<unsigned>(stored_labels[i] < 0 || stored_labels[i] >= kNumClasses);
    labels_hw[i] = stored_labels[i];
  }
  if (out_of_range != 0) {
    const auto at = static_cast<std::size_t>(
        std::find_if(labels_hw.begin(), labels_hw.end(),
                     [](std::int32_t v) { return v < 0 || v >= kNumClasses; }) -
        labels_hw.begin());
    bad(fmt::format("has label {} at row {}, column {}; classes are 0, 1 and 2", labels_hw[at],
                    at / shape_.width, at % shape_.width));
  }
}

}  // namespace hardy::core
