#include "hardy/core/data/cosmoflow.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <tuple>

#include "file_reads.hpp"
#include "hardy/core/data/dataset.hpp"  // kMaxSampleBytes
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "sample_window.hpp"

namespace hardy::core {
namespace fs = std::filesystem;

// pread hands back the file's bytes as they are: little-endian int16 and float32 in memory too.
static_assert(std::endian::native == std::endian::little,
              "the CosmoFlow reader reads little-endian samples straight into memory");

namespace {

constexpr std::string_view kDataSuffix = "_data.npy", kLabelSuffix = "_label.npy";

std::string quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

bool is_hdf5_name(const fs::path& path) {
  return path.extension() == ".h5" || path.extension() == ".hdf5";
}
bool is_numpy_data_name(const fs::path& path) {
  return path.filename().string().ends_with(kDataSuffix);
}

fs::path label_file_of(const fs::path& data_file) {
  std::string name = data_file.filename().string();
  name.replace(name.size() - kDataSuffix.size(), kDataSuffix.size(), kLabelSuffix);
  return data_file.parent_path() / name;
}

// The largest edge whose sample (4 channels of edge^3 floats) hardy reads.
std::uint64_t max_edge() {
  std::uint64_t edge = 1;
  while (static_cast<std::uint64_t>(kCosmologyChannels) * (edge + 1) * (edge + 1) * (edge + 1) *
             sizeof(float) <=
         kMaxSampleBytes)
    ++edge;
  return edge;
}

// Checks a claimed x shape: (E, E, E, 4) with E the first file's edge (`edge`), or with edge 0
// any cube within the sample limit. Returns E; throws InvalidArgument (without the file's name).
int checked_edge(const std::vector<std::uint64_t>& dims, int edge, std::string_view what) {
  const std::string expected = edge ? fmt::format("({0}, {0}, {0}, {1})", edge, kCosmologyChannels)
                                    : fmt::format("(E, E, E, {}), a cube", kCosmologyChannels);
  if (dims.size() != 4 || dims[3] != kCosmologyChannels || dims[0] != dims[1] ||
      dims[1] != dims[2] || dims[0] == 0)
    throw InvalidArgument(
        fmt::format("has {} of shape ({}); expected {}", what, fmt::join(dims, ", "), expected));
  if (dims[0] > max_edge())
    throw InvalidArgument(fmt::format(
        "has {} of shape ({}): samples of {}^3 voxels; hardy reads samples of up to {} GiB "
        "(an edge of up to {})",
        what, fmt::join(dims, ", "), dims[0], kMaxSampleBytes >> 30, max_edge()));
  if (edge && dims[0] != static_cast<std::uint64_t>(edge))
    throw InvalidArgument(fmt::format("has {} of shape ({}); the split's first file has {}", what,
                                      fmt::join(dims, ", "), expected));
  return static_cast<int>(dims[0]);
}

// The sample files of a split and their variant. Throws InvalidArgument.
std::pair<std::vector<fs::path>, CosmoFlowVariant> list_split(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error))
    throw InvalidArgument(fmt::format("CosmoFlow split directory {} does not exist", quoted(dir)));
  std::vector<fs::path> hdf5, numpy;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (!entry.is_regular_file(error)) continue;
    if (is_hdf5_name(entry.path())) hdf5.push_back(entry.path());
    if (is_numpy_data_name(entry.path())) numpy.push_back(entry.path());
  }
  if (error) throw InvalidArgument(fmt::format("cannot list {}: {}", quoted(dir), error.message()));
  if (!hdf5.empty() && !numpy.empty())
    throw InvalidArgument(fmt::format(
        "{} holds both HDF5 samples ({}) and NumPy samples ({}); a CosmoFlow split holds one kind",
        quoted(dir), hdf5.front().filename().string(), numpy.front().filename().string()));
  if (hdf5.empty() && numpy.empty())
    throw InvalidArgument(fmt::format(
        "{} holds no CosmoFlow samples (NAME.h5 or NAME.hdf5 with x and y, or NAME_data.npy "
        "with NAME_label.npy)",
        quoted(dir)));
  const CosmoFlowVariant variant = hdf5.empty() ? CosmoFlowVariant::numpy : CosmoFlowVariant::hdf5;
  auto files = variant == CosmoFlowVariant::numpy ? std::move(numpy) : std::move(hdf5);
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return {std::move(files), variant};
}

// ---- .npy headers ----

// A cursor over the Python dictionary literal of a .npy header.
class DictReader {
 public:
  explicit DictReader(std::string_view text) : text_(text) {}
  void skip_space() {
    while (!text_.empty() && std::isspace(static_cast<unsigned char>(text_.front())))
      text_.remove_prefix(1);
  }
  bool take(char c) {
    skip_space();
    if (text_.empty() || text_.front() != c) return false;
    text_.remove_prefix(1);
    return true;
  }
  void expect(char c, std::string_view where) {
    if (!take(c))
      throw InvalidArgument(
          fmt::format("has a header that is not NumPy's: expected '{}' {}", c, where));
  }
  std::string string_literal() {
    skip_space();
    if (text_.empty() || (text_.front() != '\'' && text_.front() != '"'))
      throw InvalidArgument("has a header that is not NumPy's: expected a quoted string");
    const char quote = text_.front();
    const std::size_t end = text_.find(quote, 1);
    if (end == std::string_view::npos)
      throw InvalidArgument("has a header that is not NumPy's: an unterminated string");
    std::string value(text_.substr(1, end - 1));
    text_.remove_prefix(end + 1);
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (text_.starts_with(word)) {
        text_.remove_prefix(std::string_view(word).size());
        return value;
      }
    throw InvalidArgument("has a header that is not NumPy's: fortran_order is not True or False");
  }
  std::vector<std::uint64_t> tuple() {
    expect('(', "to start the shape");
    std::vector<std::uint64_t> values;
    while (!take(')')) {
      skip_space();
      std::uint64_t value = 0;
      std::size_t digits = 0;
      while (digits < text_.size() && std::isdigit(static_cast<unsigned char>(text_[digits]))) {
        if (value > (std::uint64_t{1} << 40))
          throw InvalidArgument("has a header claiming an extent too large to be real");
        value = value * 10 + static_cast<std::uint64_t>(text_[digits] - '0');
        ++digits;
      }
      if (digits == 0 || values.size() >= 32)
        throw InvalidArgument("has a header that is not NumPy's: a shape that is not integers");
      text_.remove_prefix(digits);
      values.push_back(value);
      if (!take(',')) {
        expect(')', "to end the shape");
        break;
      }
    }
    return values;
  }
  bool at_end() {
    skip_space();
    return text_.empty();
  }

 private:
  std::string_view text_;
};

// The header of a sample's .npy file with `descr` and shape checked by `check_shape`; the file
// must hold exactly the data the header promises. Throws InvalidArgument (without the name).
template <class CheckShape>
NpyHeader read_npy(int fd, std::uint64_t file_bytes, std::string_view descr,
                   std::size_t element_bytes, CheckShape&& check_shape) {
  std::string head(
      static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes, 12 + kMaxNpyHeaderBytes)), '\0');
  if (std::string problem = read_exactly(fd, head.data(), head.size(), 0); !problem.empty())
    throw InvalidArgument(problem);
  NpyHeader header = parse_npy_header(head);
  if (header.descr != descr)
    throw InvalidArgument(fmt::format(
        "holds elements of type '{}'; the CosmoFlow reader reads '{}' (little-endian {})",
        header.descr, descr, descr == "<i2" ? "int16" : "float32"));
  if (header.fortran_order)
    throw InvalidArgument("is stored in Fortran order; the CosmoFlow reader reads C order");
  check_shape(header.shape);  // bounds the product below
  std::uint64_t bytes = element_bytes;
  for (std::uint64_t extent : header.shape) bytes *= extent;
  if (file_bytes < header.data_offset + bytes)
    throw InvalidArgument(
        fmt::format("is truncated: its data needs bytes [{}, {}) but the file has {}",
                    header.data_offset, header.data_offset + bytes, file_bytes));
  if (file_bytes > header.data_offset + bytes)
    throw InvalidArgument(fmt::format("has {} bytes after the {} bytes of data its header promises",
                                      file_bytes - header.data_offset - bytes, bytes));
  return header;
}

std::uint64_t file_size_of(const fs::path& path) {
  std::error_code error;
  const std::uint64_t bytes = fs::file_size(path, error);
  if (error) throw InvalidArgument(fmt::format("cannot be read: {}", error.message()));
  return bytes;
}

// ---- HDF5 ----

// Whether an HDF5 dataset's type is a 16-bit signed integer (either byte order: HDF5 converts).
std::string hdf5_type_problem(h5::Id dataset, bool integer16) {
  h5::Handle type{H5Dget_type(dataset), "H5Dget_type", "a CosmoFlow dataset"};
  const H5T_class_t type_class = H5Tget_class(type.id());
  if (integer16)
    return type_class == H5T_INTEGER && H5Tget_size(type.id()) == 2 &&
                   H5Tget_sign(type.id()) == H5T_SGN_2
               ? std::string()
               : "x of a type other than int16 (16-bit signed integers)";
  return type_class == H5T_FLOAT ? std::string() : "y of a type other than floating point";
}

}  // namespace

std::string_view to_string(CosmoFlowVariant variant) {
  return variant == CosmoFlowVariant::hdf5 ? "HDF5" : "NumPy";
}

bool is_cosmoflow_layout(const fs::path& root) {
  std::error_code error;
  if (fs::exists(root / "stats.h5", error) || !fs::is_directory(root / "train", error))
    return false;
  for (const fs::directory_entry& entry : fs::directory_iterator(root / "train", error))
    if (is_hdf5_name(entry.path()) || is_numpy_data_name(entry.path())) return true;
  return false;
}

NpyHeader parse_npy_header(std::string_view bytes) {
  constexpr std::string_view kMagic = "\x93NUMPY";
  if (!bytes.starts_with(kMagic) || bytes.size() < 10)
    throw InvalidArgument("is not a NumPy .npy file (no \\x93NUMPY magic)");
  const auto byte = [&](std::size_t i) {
    return static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i]));
  };
  const std::uint64_t major = byte(6);
  std::uint64_t length = 0, prefix = 0;
  if (major == 1) {
    length = byte(8) | byte(9) << 8;
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw InvalidArgument("is truncated inside its .npy header");
    length = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    prefix = 12;
  } else {
    throw InvalidArgument(fmt::format(
        "is a .npy file of format version {}.{}; hardy reads versions 1 to 3", major, byte(7)));
  }
  if (length > kMaxNpyHeaderBytes)
    throw InvalidArgument(fmt::format("has a .npy header of {} bytes; NumPy's are at most {}",
                                      length, kMaxNpyHeaderBytes));
  if (bytes.size() < prefix + length) throw InvalidArgument("is truncated inside its .npy header");

  NpyHeader header;
  header.data_offset = prefix + length;
  DictReader dict(bytes.substr(prefix, length));
  bool seen_descr = false, seen_order = false, seen_shape = false;
  dict.expect('{', "at the start of the header");
  while (!dict.take('}')) {
    const std::string key = dict.string_literal();
    dict.expect(':', "after a key");
    bool* seen = nullptr;
    if (key == "descr") {
      header.descr = dict.string_literal();
      seen = &seen_descr;
    } else if (key == "fortran_order") {
      header.fortran_order = dict.boolean();
      seen = &seen_order;
    } else if (key == "shape") {
      header.shape = dict.tuple();
      seen = &seen_shape;
    } else {
      throw InvalidArgument(fmt::format(
          "has a header with key '{}'; NumPy's has descr, fortran_order and shape", key));
    }
    if (*seen) throw InvalidArgument(fmt::format("has a header with key '{}' twice", key));
    *seen = true;
    if (!dict.take(',')) {
      dict.expect('}', "at the end of the header");
      break;
    }
  }
  if (!dict.at_end())
    throw InvalidArgument("has a header that is not NumPy's: bytes after the dictionary");
  if (!seen_descr || !seen_order || !seen_shape)
    throw InvalidArgument("has a header without descr, fortran_order or shape; it is not NumPy's");
  return header;
}

struct CosmoFlowDataset::FileLayout {
  std::string bad_reason;  // empty: the file is good
  int edge = 0;
  bool contiguous = true;  // x is read with pread at x_offset; else through HDF5
  std::uint64_t x_offset = 0;
  std::array<float, kCosmologyTargets> targets{};
};

CosmoFlowDataset::CosmoFlowDataset(const fs::path& root, std::string_view split)
    : root_(root), split_(split) {
  check_split_name("CosmoFlow", split_);
  std::tie(files_, variant_) = list_split(root / split_);
  FileLayout first;
  try {
    first = inspect(0, 0);
  } catch (const Error& error) {
    throw InvalidArgument(fmt::format("{}: {}", quoted(files_[0]), error.what()));
  }
  inspected_.reset(files_.size(), first);
  shape_ = {.channels = kCosmologyChannels,
            .height = first.edge,
            .width = first.edge,
            .depth = first.edge,
            .targets = kCosmologyTargets};
}

CosmoFlowDataset::~CosmoFlowDataset() = default;

// Checks sample `index`'s file(s) at their source and reads its targets. edge: the first file's,
// or 0 to learn it. Throws InvalidArgument (or IoError from HDF5) without the file's name.
CosmoFlowDataset::FileLayout CosmoFlowDataset::inspect(std::size_t index, int edge) const {
  const fs::path& path = files_[index];
  const std::uint64_t file_bytes = file_size_of(path);
  FileLayout layout;
  const auto check_finite = [&] {
    for (std::size_t t = 0; t < layout.targets.size(); ++t)
      if (!std::isfinite(layout.targets[t]))
        throw InvalidArgument(
            fmt::format("has a non-finite target {} ({}) in y", t, layout.targets[t]));
  };
  if (variant_ == CosmoFlowVariant::numpy) {
    const FileDescriptor fd(path);
    if (fd.get() < 0)
      throw InvalidArgument(fmt::format("cannot be opened: {}", std::strerror(errno)));
    const NpyHeader header = read_npy(
        fd.get(), file_bytes, "<i2", sizeof(std::int16_t),
        [&](const std::vector<std::uint64_t>& shape) { edge = checked_edge(shape, edge, "data"); });
    layout.x_offset = header.data_offset;
    const fs::path label_path = label_file_of(path);
    std::error_code error;
    if (!fs::is_regular_file(label_path, error))
      throw InvalidArgument(fmt::format("has no label file {} beside it", quoted(label_path)));
    const FileDescriptor label_fd(label_path);
    std::uint64_t label_bytes = 0;
    try {
      label_bytes = file_size_of(label_path);
      if (label_fd.get() < 0)
        throw InvalidArgument(fmt::format("cannot be opened: {}", std::strerror(errno)));
      const NpyHeader label = read_npy(
          label_fd.get(), label_bytes, "<f4", sizeof(float),
          [](const std::vector<std::uint64_t>& shape) {
            if (shape != std::vector<std::uint64_t>{kCosmologyTargets})
              throw InvalidArgument(fmt::format("has targets of shape ({}); expected ({},)",
                                                fmt::join(shape, ", "), kCosmologyTargets));
          });
      if (std::string problem = read_exactly(label_fd.get(), layout.targets.data(),
                                             sizeof(layout.targets), label.data_offset);
          !problem.empty())
        throw InvalidArgument(problem);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(
          fmt::format("has a bad label file {}: it {}", quoted(label_path), error.what()));
    }
    layout.edge = edge;
    check_finite();
    return layout;
  }

  const h5::Exclusive exclusive;  // on loader threads, beside the writers' HDF5 calls
  if (!h5::is_hdf5_file(path)) throw InvalidArgument("is not an HDF5 file");
  h5::Handle file = h5::open_file(path);
  for (const char* name : {"x", "y"})
    if (!h5::exists(file.id(), name))
      throw InvalidArgument(fmt::format(
          "has no dataset {}; a CosmoFlow sample holds x int16 (D, H, W, 4) and y float (4)",
          name));
  h5::Handle x = h5::open_dataset(file.id(), "x");
  edge = checked_edge(h5::dataset_dims(x.id()), edge, "x");
  if (std::string problem = hdf5_type_problem(x.id(), true); !problem.empty())
    throw InvalidArgument("has " + problem);
  h5::Handle y = h5::open_dataset(file.id(), "y");
  const std::vector<h5::Extent> y_dims = h5::dataset_dims(y.id());
  if (y_dims != std::vector<h5::Extent>{kCosmologyTargets})
    throw InvalidArgument(fmt::format("has y of shape ({}); expected ({})", fmt::join(y_dims, ", "),
                                      kCosmologyTargets));
  if (std::string problem = hdf5_type_problem(y.id(), false); !problem.empty())
    throw InvalidArgument("has " + problem);
  h5::read_dataset<float>(file.id(), "y", std::span(layout.targets));

  // A contiguous, unfiltered little-endian x is read later with pread, without HDF5.
  const std::uint64_t x_bytes =
      static_cast<std::uint64_t>(edge) * edge * edge * kCosmologyChannels * sizeof(std::int16_t);
  h5::Handle type{H5Dget_type(x.id()), "H5Dget_type", "x"};
  h5::Handle properties{H5Dget_create_plist(x.id()), "H5Dget_create_plist", "x"};
  const bool little_endian = H5Tget_order(type.id()) == H5T_ORDER_LE;
  const bool plain = H5Pget_layout(properties.id()) == H5D_CONTIGUOUS &&
                     h5::check(H5Pget_nfilters(properties.id()), "H5Pget_nfilters", "x") == 0;
  const h5::StoredData stored = h5::stored_data(x.id());
  if (!stored.filtered && stored.bytes < x_bytes)
    throw InvalidArgument(
        fmt::format("stores only {} of the {} bytes of x: it was never completely written",
                    stored.bytes, x_bytes));
  layout.contiguous = plain && little_endian;
  if (layout.contiguous) {
    const haddr_t offset = H5Dget_offset(x.id());
    h5::take_error_stack();  // H5Dget_offset leaves one behind for data never written
    if (offset == HADDR_UNDEF)
      throw InvalidArgument("stores none of the bytes of x: it was never written");
    if (offset > file_bytes || file_bytes - offset < x_bytes)
      throw InvalidArgument(fmt::format("is truncated: x needs bytes [{}, {}) but the file has {}",
                                        offset, offset + x_bytes, file_bytes));
    layout.x_offset = offset;
  }
  layout.edge = edge;
  check_finite();
  return layout;
}

CosmoFlowDataset::FileLayout CosmoFlowDataset::layout_of(std::size_t index) const {
  // NumPy files are inspected in parallel; HDF5 serializes itself through h5::Exclusive.
  return inspected_.get(index, files_[index], [&] { return inspect(index, shape_.depth); });
}

void CosmoFlowDataset::load(std::size_t index, std::span<float> fields_cdhw,
                            std::span<std::int32_t> target_words) const {
  check_load_arguments(index, fields_cdhw, target_words);
  const auto sample = inspected_.read(index, files_[index], layout_of(index), location_);
  const FileLayout& layout = sample.layout;

  const std::size_t voxels = static_cast<std::size_t>(layout.edge) * layout.edge * layout.edge;
  thread_local std::vector<std::int16_t> counts;
  counts.resize(voxels * kCosmologyChannels);
  if (layout.contiguous) {
    const FileDescriptor fd(sample.path());
    if (fd.get() < 0) sample.fail(fmt::format("cannot be opened: {}", std::strerror(errno)));
    if (std::string problem = read_exactly(fd.get(), counts.data(),
                                           counts.size() * sizeof(std::int16_t), layout.x_offset);
        !problem.empty())
      sample.fail(problem);
  } else {
    std::string problem;
    try {
      const h5::Exclusive exclusive;
      h5::Handle file = h5::open_file(sample.path());
      h5::read_dataset<std::int16_t>(file.id(), "x", std::span(counts));
    } catch (const Error& error) {
      problem = fmt::format("cannot read x: {}", error.what());
    }
    if (!problem.empty()) sample.fail(problem);
  }

  const std::int16_t lowest = *std::min_element(counts.begin(), counts.end());
  if (lowest < 0) {
    const std::size_t at = static_cast<std::size_t>(
        std::find_if(counts.begin(), counts.end(), [](std::int16_t c) { return c < 0; }) -
        counts.begin());
    const std::size_t voxel = at / kCosmologyChannels, e = static_cast<std::size_t>(layout.edge);
    sample.fail(fmt::format(
        "has a negative particle count {} in x at ({}, {}, {}, {}); counts are >= 0", counts[at],
        voxel / (e * e), voxel / e % e, voxel % e, at % kCosmologyChannels));
  }
  for (std::size_t voxel = 0; voxel < voxels; ++voxel) {
    const std::int16_t* in = counts.data() + voxel * kCosmologyChannels;
    for (int c = 0; c < kCosmologyChannels; ++c)
      fields_cdhw[c * voxels + voxel] = log1p_count(in[c]);
  }
  for (int t = 0; t < kCosmologyTargets; ++t) target_words[t] = target_word(layout.targets[t]);
}

std::string CosmoFlowDataset::describe() const {
  return fmt::format("CosmoFlow {} split of {}: {} samples of {} ({})", split_, quoted(root_),
                     files_.size(), to_string(shape_), to_string(variant_));
}

std::vector<std::string> CosmoFlowDataset::channel_names() const {
  return {"redshift_3", "redshift_2", "redshift_1", "redshift_0"};
}

// ---- the generator ----

namespace {

// NumPy's .npy format 1.0: magic, version, header length, then the dictionary padded with spaces
// and a newline so that the data starts at a multiple of 64 bytes.
std::string npy_header(std::string_view descr, const std::vector<std::uint64_t>& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}{}), }}",
                                 descr, fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string header = "\x93NUMPY";
  header.push_back('\x01');
  header.push_back('\x00');
  header.push_back(static_cast<char>(dict.size() & 0xff));
  header.push_back(static_cast<char>(dict.size() >> 8));
  return header + dict;
}

void write_bytes(const fs::path& path, std::string_view header, const void* data,
                 std::size_t bytes) {
  write_atomically(path, [&](const fs::path& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.close();
    if (!out) throw IoError(fmt::format("cannot write {}", quoted(temporary)));
  });
}

void write_sample(const fs::path& dir, std::size_t index, CosmoFlowVariant variant, int volume,
                  const std::vector<std::int16_t>& counts, const std::vector<float>& targets) {
  const std::string name = fmt::format("cosmo-{:05d}", index);
  const auto v = static_cast<std::uint64_t>(volume);
  if (variant == CosmoFlowVariant::numpy) {
    write_bytes(dir / (name + std::string(kDataSuffix)),
                npy_header("<i2", {v, v, v, kCosmologyChannels}), counts.data(),
                counts.size() * sizeof(std::int16_t));
    write_bytes(dir / (name + std::string(kLabelSuffix)), npy_header("<f4", {kCosmologyTargets}),
                targets.data(), targets.size() * sizeof(float));
    return;
  }
  write_atomically(dir / (name + ".h5"), [&](const fs::path& temporary) {
    const h5::Exclusive exclusive;
    h5::Handle file = h5::create_file(temporary);
    h5::write_dataset<std::int16_t>(file.id(), "x", counts, {v, v, v, kCosmologyChannels});
    h5::write_dataset<float>(file.id(), "y", targets, {kCosmologyTargets});
    file.close();  // flushes: a full disk shows up here, before the rename
  });
}

}  // namespace

void write_cosmoflow_dataset(const fs::path& root, const CosmoFlowGenerateOptions& options) {
  if (options.train == 0) throw InvalidArgument("a CosmoFlow dataset needs training samples");
  if (options.volume < 4 || static_cast<std::uint64_t>(options.volume) > max_edge())
    throw InvalidArgument(fmt::format(
        "a CosmoFlow volume's edge must be between 4 and {} (hardy's sample limit of {} GiB), "
        "got {}",
        max_edge(), kMaxSampleBytes >> 30, options.volume));
  const std::size_t total = options.train + options.validation;
  std::vector<fs::path> dirs;
  for (const auto& [split, count] :
       {std::pair{"train", options.train}, std::pair{"validation", options.validation}}) {
    const fs::path dir = root / split;
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) throw IoError(fmt::format("cannot create {}: {}", quoted(dir), error.message()));
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
      if (is_hdf5_name(entry.path()) || entry.path().extension() == ".npy")
        throw InvalidArgument(fmt::format(
            "{} already holds {}: write a new CosmoFlow dataset into an empty directory",
            quoted(dir), entry.path().filename().string()));
    for (std::size_t k = 0; k < count; ++k) dirs.push_back(dir);
  }

  const SyntheticCosmology source(options.volume, total, options.seed);
  const std::size_t v = static_cast<std::size_t>(options.volume);
  std::exception_ptr failure;  // the first one; `failed` says so without a race
  std::atomic<bool> failed{false};
  // Samples are made and written in parallel; HDF5 writes serialize through h5::Exclusive.
#pragma omp parallel
  {
    std::vector<std::int16_t> counts(v * v * v * kCosmologyChannels);
    std::vector<float> targets(kCosmologyTargets);
#pragma omp for schedule(dynamic, 1)
    for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(total); ++i) {
      try {
        if (!failed) {
          source.counts(static_cast<std::size_t>(i), counts, targets);
          write_sample(dirs[i], static_cast<std::size_t>(i), options.variant, options.volume,
                       counts, targets);
        }
      } catch (...) {
#pragma omp critical(cosmoflow_failure)
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace hardy::core
