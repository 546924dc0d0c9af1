// hardy's dataset layout (core/data/dataset.hpp) as a user's files may hold it: any shapes,
// types, attributes and index.json. The target writes such a directory with HDF5 itself (the
// fuzzer drives the choices, so every file is well-formed HDF5 and the findings are hardy's, not
// HDF5's parser's), then opens it and loads samples into buffers of the shape the reader
// reports, as the trainer does. A shape that claims more than the file holds must be refused
// before anything is allocated: libFuzzer's -malloc_limit_mb turns such an allocation into a
// finding.
#include <hdf5.h>

#include <cstdint>
#include <vector>

#include "fuzz_hdf5.hpp"
#include "fuzz_support.hpp"
#include "hardy/core/data/dataset.hpp"

namespace {

using hardy::fuzz::claimed_extent;
using hardy::fuzz::FuzzInput;

// The types a dataset may have.
const hid_t* const kTypes[] = {&H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g, &H5T_NATIVE_INT32_g,
                               &H5T_NATIVE_UINT8_g, &H5T_NATIVE_INT64_g};

// A dataset of the fuzzer's rank, extents and type, chunked one row per chunk as hardy writes
// them; small ones are filled with the fuzzer's bytes, large ones stay unwritten (HDF5 then
// stores nothing and reads its fill value).
void add_dataset(hid_t file, const char* name, FuzzInput& input, int usual_rank) {
  const int rank = input.byte() < 220 ? usual_rank : static_cast<int>(input.pick(0, 5));
  std::vector<hsize_t> dims(rank), chunk(rank);
  hsize_t elements = 1;
  bool overflow = false;
  for (int d = 0; d < rank; ++d) {
    dims[d] = claimed_extent(input);
    chunk[d] = d == 0 ? 1 : std::max<hsize_t>(1, std::min<hsize_t>(dims[d], 64));
    overflow |= dims[d] != 0 && elements > (hsize_t{1} << 62) / dims[d];
    elements *= dims[d];
  }
  const hid_t type = hardy::fuzz::pick_type(input, kTypes);
  const hid_t space = H5Screate_simple(rank, dims.data(), nullptr);
  const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
  if (rank > 0 && !overflow) H5Pset_chunk(properties, rank, chunk.data());
  const hid_t dataset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, properties, H5P_DEFAULT);
  if (dataset >= 0 && !overflow && elements <= 4096) {
    std::vector<std::uint8_t> bytes(elements * H5Tget_size(type));
    for (auto& b : bytes) b = input.byte();
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  }
  if (dataset >= 0) H5Dclose(dataset);
  H5Pclose(properties);
  H5Sclose(space);
}

void write_file(const std::filesystem::path& path, FuzzInput& input) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const std::uint8_t attributes = input.byte();
  if (attributes & 1)
    hardy::fuzz::write_string_attribute(file, "format",
                                        attributes & 2 ? "hardy-climate" : input.text(16));
  if (attributes & 4) {
    const std::int64_t version = attributes & 8 ? 1 : static_cast<std::int64_t>(input.u64());
    hardy::fuzz::write_scalar_attribute(file, "format_version", H5T_NATIVE_INT64, version);
  }
  if (!(attributes & 16)) add_dataset(file, "fields", input, 4);
  if (!(attributes & 32)) add_dataset(file, "labels", input, 3);
  H5Fclose(file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  fuzz::silence_hdf5_errors();
  FuzzInput input(data, size);
  const auto dir = fuzz::scratch_directory() / "dataset";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int files = static_cast<int>(input.pick(1, 3));
  for (int k = 0; k < files; ++k)
    write_file(dir / ("climate-0000" + std::to_string(k) + ".h5"), input);
  if (input.byte() & 1) fuzz::write_file(dir / "index.json", input.text(255));

  fuzz::accepts([&] {
    const core::Hdf5Dataset dataset(dir);
    const core::SampleShape shape = dataset.shape();
    if (dataset.size() == 0) return;
    // What the trainer allocates for one sample.
    std::vector<float> fields(static_cast<std::size_t>(shape.channels) * shape.height *
                              shape.width);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(shape.height) * shape.width);
    for (std::size_t index : {std::size_t{0}, dataset.size() - 1})
      dataset.load(index, fields, labels);
  });
  return 0;
}
