// The checkpoint reader and verifier (checkpoint_file.hpp), and `hardy ckpt inspect` on what it
// accepts. Each input is a list of edits to a valid checkpoint, made through HDF5 itself so that
// the file stays well-formed HDF5 and the findings are hardy's (HDF5's own parser is not hardy's
// to fuzz): flip stored bytes, change a checksum attribute, the manifest or the format version,
// delete a dataset, replace one with another shape or type (claims of huge shapes included),
// truncate the file, or rewrite a scalar consistently (data, checksum attribute and manifest
// together, as a writer with other ideas would).
//
// What must hold: the unedited checkpoint is accepted; a checkpoint whose checksummed content
// changed (while the manifest stayed as written) is never accepted; what is accepted hashes to
// the checksums it lists; a rejection is one of hardy's errors with a message; nothing allocates
// for a shape the file does not hold.
#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/jobs/commands.hpp"

namespace {

using hardy::fuzz::FuzzInput;
namespace checkpoint = hardy::checkpoint;

checkpoint::TrainingState seed_state() {
  checkpoint::TrainingState state;
  state.model.push_back({"stem.conv.weight", {2, 3, 1, 1}, {1, -2, 3, -4, 5, -6}});
  state.model.push_back({"stem.norm.bias", {2}, {0.5f, -0.5f}});
  state.optimizer.push_back({"momentum/stem.conv.weight", {2, 3, 1, 1}, {0, 0, 0, 1, 1, 1}});
  state.optimizer_kind = "sgd";
  state.optimizer_steps = 7;
  state.step = 7;
  state.epoch = 1;
  state.sampler = {.seed = 5, .epoch = 1, .cursor = 3};
  state.rng_seed = 5;
  state.lr_schedule.total_steps = 100;
  state.loss = 0.75;
  state.config_ini = "steps = 100\n";
  state.world_size = 2;
  state.hosts = {"node1", "node2"};
  return state;
}

struct Seed {
  std::filesystem::path path;
  std::string bytes;
  std::vector<checkpoint::DatasetInfo> datasets;
};

const Seed& seed() {
  static const Seed value = [] {
    Seed s;
    s.path = hardy::fuzz::scratch_directory() / "seed.h5";
    checkpoint::write_checkpoint_file(seed_state(), s.path);
    s.datasets = checkpoint::read_checkpoint_file(s.path).datasets;
    std::ifstream in(s.path, std::ios::binary);
    s.bytes.assign(std::istreambuf_iterator<char>(in), {});
    return s;
  }();
  return value;
}

std::string read_string_attribute(hid_t object, const char* name) {
  const hid_t attribute = H5Aopen(object, name, H5P_DEFAULT);
  const hid_t type = H5Aget_type(attribute);
  std::string value;
  if (H5Tis_variable_str(type) > 0) {
    char* text = nullptr;
    H5Aread(attribute, type, &text);
    value = text ? text : "";
    H5free_memory(text);
  } else {
    value.resize(H5Tget_size(type));
    H5Aread(attribute, type, value.data());
    value.resize(std::strlen(value.c_str()));
  }
  H5Tclose(type);
  H5Aclose(attribute);
  return value;
}

void write_u64_attribute(hid_t object, const char* name, std::uint64_t value) {
  hardy::fuzz::write_scalar_attribute(object, name, H5T_NATIVE_UINT64, value);
}

// The stored bytes of a dataset, in its own type; empty when the file does not hold them all (a
// huge shape an earlier edit put there: the harness must not allocate for it either).
std::vector<std::uint8_t> read_bytes(hid_t dataset, hid_t type) {
  const hid_t space = H5Dget_space(dataset);
  const hssize_t elements = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  const auto size = static_cast<std::uint64_t>(std::max<hssize_t>(0, elements)) * H5Tget_size(type);
  if (size > H5Dget_storage_size(dataset)) return {};
  std::vector<std::uint8_t> bytes(size);
  if (!bytes.empty()) H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  return bytes;
}

// The seed checkpoint, open for reading while the process runs.
hid_t seed_file() {
  static const hid_t file = H5Fopen(seed().path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  return file;
}

// A dataset's stored bytes, empty when it is gone.
std::vector<std::uint8_t> stored_bytes(hid_t file, const std::string& path) {
  const hid_t dataset = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (dataset < 0) return {};
  const hid_t type = H5Dget_type(dataset);
  auto bytes = read_bytes(dataset, type);
  H5Tclose(type);
  H5Dclose(dataset);
  return bytes;
}

struct Edits {
  bool content_changed = false;   // checksummed content differs from what the manifest records
  bool manifest_changed = false;  // then nothing can be promised about acceptance
  std::set<std::string> flipped;  // datasets whose bytes were flipped: changed unless flipped back
};

void edit(hid_t file, FuzzInput& input, Edits& edits) {
  const auto& datasets = seed().datasets;
  const auto& target = datasets[input.pick(0, datasets.size() - 1)];
  const char* path = target.path.c_str();
  const auto kind = input.pick(0, 6);
  if (hardy::fuzz::verbose()) std::fprintf(stderr, "edit %d of %s\n", static_cast<int>(kind), path);
  switch (kind) {
    case 0: {  // flip stored bytes, checksums untouched
      const hid_t dataset = H5Dopen2(file, path, H5P_DEFAULT);
      if (dataset < 0) return;
      const hid_t type = H5Dget_type(dataset);
      auto bytes = read_bytes(dataset, type);
      if (!bytes.empty()) {
        const std::uint8_t flip = input.byte() | 1;
        bytes[input.pick(0, bytes.size() - 1)] ^= flip;
        H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
        edits.flipped.insert(target.path);
      }
      H5Tclose(type);
      H5Dclose(dataset);
      return;
    }
    case 1: {  // a dataset's checksum attribute
      const hid_t dataset = H5Dopen2(file, path, H5P_DEFAULT);
      if (dataset < 0) return;
      const std::uint64_t value = input.u64();
      write_u64_attribute(dataset, "checksum", value);
      edits.content_changed |= value != target.checksum;
      H5Dclose(dataset);
      return;
    }
    case 2: {  // the manifest: replaced, or one character changed
      std::string manifest = read_string_attribute(file, "manifest");
      if (input.byte() & 1)
        manifest = input.text(255);
      else if (!manifest.empty())
        manifest[input.pick(0, manifest.size() - 1)] = static_cast<char>(input.byte());
      hardy::fuzz::write_string_attribute(file, "manifest", manifest);
      edits.manifest_changed = true;
      return;
    }
    case 3: {  // the format version
      const int version = static_cast<int>(input.u64());
      hardy::fuzz::write_scalar_attribute(file, "format_version", H5T_NATIVE_INT, version);
      edits.content_changed |= version != checkpoint::kFormatVersion;
      return;
    }
    case 4:  // a dataset deleted
      H5Ldelete(file, path, H5P_DEFAULT);
      edits.content_changed = true;
      return;
    case 5: {  // a dataset replaced by one of another shape or type (unwritten: HDF5 stores
               // nothing)
      H5Ldelete(file, path, H5P_DEFAULT);
      const int rank = static_cast<int>(input.pick(0, 4));
      std::vector<hsize_t> dims(rank);
      for (auto& d : dims)
        d = input.byte() < 128 ? input.pick(0, 8) : hsize_t{1} << input.pick(20, 40);
      static const hid_t* const kTypes[] = {&H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g,
                                            &H5T_NATIVE_INT64_g, &H5T_NATIVE_UINT64_g,
                                            &H5T_NATIVE_INT32_g};
      const hid_t type = *kTypes[input.pick(0, std::size(kTypes) - 1)];
      const hid_t space = H5Screate_simple(rank, dims.data(), nullptr);
      const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_alloc_time(properties, H5D_ALLOC_TIME_LATE);
      const hid_t dataset =
          H5Dcreate2(file, path, type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
      if (dataset >= 0) {
        write_u64_attribute(dataset, "checksum", target.checksum);
        H5Dclose(dataset);
      }
      H5Pclose(properties);
      H5Sclose(space);
      edits.content_changed = true;
      return;
    }
    case 6: {  // a scalar rewritten consistently: new bytes, their checksum, the manifest's entry
      if (!target.shape.empty() || target.path.starts_with("/model") ||
          target.path.starts_with("/optimizer"))
        return;
      const hid_t dataset = H5Dopen2(file, path, H5P_DEFAULT);
      if (dataset < 0) return;
      const hid_t type = H5Dget_type(dataset);
      auto bytes = read_bytes(dataset, type);
      if (bytes.empty()) {  // nothing stored to rewrite
        H5Tclose(type);
        H5Dclose(dataset);
        return;
      }
      if (H5Tget_class(type) == H5T_STRING) {
        for (auto& b : bytes) b = input.byte();
      } else {
        const std::uint64_t value = input.u64();
        std::memcpy(bytes.data(), &value, std::min(bytes.size(), sizeof value));
      }
      H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
      const std::uint64_t checksum = hardy::core::xxhash64(std::as_bytes(std::span(bytes)));
      write_u64_attribute(dataset, "checksum", checksum);
      auto manifest =
          nlohmann::json::parse(read_string_attribute(file, "manifest"), nullptr, false);
      if (manifest.is_object() && manifest.contains("datasets") && manifest["datasets"].is_array())
        for (auto& entry : manifest["datasets"])
          if (entry.is_object() && entry.value("path", "") == target.path)
            entry["checksum"] = fmt::format("{:016x}", checksum);
      hardy::fuzz::write_string_attribute(file, "manifest",
                                          manifest.is_discarded() ? "" : manifest.dump());
      H5Tclose(type);
      H5Dclose(dataset);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  static const bool quiet = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return std::freopen("/dev/null", "w", stdout) != nullptr;  // ckpt inspect prints
  }();
  (void)quiet;
  FuzzInput input(data, size);
  const auto path = fuzz::scratch_directory() / "ckpt-000007.h5";
  fuzz::write_file(path, seed().bytes);
  Edits edits;
  const int count = static_cast<int>(input.pick(0, 4));
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  for (int k = 0; k < count; ++k) edit(file, input, edits);
  for (const auto& flipped : edits.flipped)  // two flips of one byte undo each other
    edits.content_changed |= stored_bytes(file, flipped) != stored_bytes(seed_file(), flipped);
  haddr_t used = 0;  // the end of what HDF5 uses of the file: bytes past it are slack
  H5Fget_eoa(file, &used);
  H5Fclose(file);
  if (count > 0 && input.byte() >= 240) {  // cut short, as a crash mid-write would
    const auto keep = input.pick(0, std::filesystem::file_size(path) - 1);
    std::filesystem::resize_file(path, keep);
    edits.content_changed |= keep < used;
    if (fuzz::verbose())
      std::fprintf(stderr, "cut to %ju bytes of %ju used\n", std::uintmax_t{keep},
                   std::uintmax_t{used});
  }

  std::optional<checkpoint::CheckpointContents> contents;
  const bool accepted = fuzz::accepts([&] { contents = checkpoint::read_checkpoint_file(path); });
  if (count == 0 && !accepted) fuzz::broken_promise("rejected the unedited checkpoint");
  if (!accepted) return 0;
  if (edits.content_changed && !edits.manifest_changed)
    fuzz::broken_promise("accepted a checkpoint whose checksummed content was changed");
  for (const auto& group : {std::pair{"/model/", &contents->state.model},
                            std::pair{"/optimizer/", &contents->state.optimizer}})
    for (const auto& tensor : *group.second) {
      const std::string path = group.first + tensor.name;
      const auto listed = std::find_if(contents->datasets.begin(), contents->datasets.end(),
                                       [&](const auto& d) { return d.path == path; });
      if (listed == contents->datasets.end() ||
          core::xxhash64(std::as_bytes(std::span(tensor.values))) != listed->checksum)
        fuzz::broken_promise("an accepted tensor does not hash to the checksum its manifest lists");
    }
  fuzz::accepts([&] { jobs::ckpt_command({"inspect", path.string(), "--json"}); });
  fuzz::accepts([&] { jobs::ckpt_command({"inspect", path.string()}); });
  return 0;
}
