#include "hardy/checkpoint/model_file.hpp"

#include <fmt/format.h>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/version.hpp"
#include "hdf5_writer.hpp"
#include "posix_file.hpp"

namespace hardy::checkpoint {

namespace {

// Model files, like checkpoints, hold 4-D tensors in (N, C, H, W) order whatever the backend's.
core::Layout canonical_layout(const core::Tensor& tensor) {
  return tensor.rank() == 4 ? core::Layout::nchw : core::Layout::flat;
}

std::vector<std::pair<std::string, core::Tensor*>> model_tensors(core::Model& model) {
  std::vector<std::pair<std::string, core::Tensor*>> tensors;
  for (auto* p : model.parameters()) tensors.emplace_back(p->name, &p->value);
  for (auto& entry : model.buffers()) tensors.push_back(entry);
  return tensors;
}

}  // namespace

void save_model(core::Model& model, const std::filesystem::path& path) {
  // Written like a checkpoint (detail::write_hdf5_file), so a full disk is a clean IoError here
  // too, and every dataset carries its checksum.
  std::vector<NamedTensor> tensors;
  for (auto& [name, tensor] : model_tensors(model)) {
    core::Tensor host =
        core::Tensor::host(tensor->dims(), core::DType::f32, canonical_layout(*tensor));
    model.backend().copy(*tensor, host);
    tensors.push_back({name, tensor->dims(), {host.f32().begin(), host.f32().end()}});
  }
  std::vector<detail::Field> fields;
  for (const NamedTensor& tensor : tensors) {
    detail::Field field = detail::tensor_field(kModelGroup, tensor);
    field.checksum = core::xxhash64(field.bytes());
    fields.push_back(std::move(field));
  }
  const detail::RootAttributes root{
      .text = {{"format", "hardy-model"}, {"hardy_version", HARDY_VERSION}},
      .numbers = {{"format_version", kModelFileVersion}}};
  core::write_atomically(path, [&](const std::filesystem::path& temporary) {
    detail::write_hdf5_file(fields, root, temporary);
  });
}

void load_model(core::Model& model, const std::filesystem::path& path) {
  namespace h5 = core::h5;
  if (!std::filesystem::exists(path))
    throw InvalidArgument(fmt::format("model file {} does not exist", path.string()));
  const h5::Exclusive exclusive;
  h5::Handle file = h5::open_file(path);
  if (!h5::exists(file.id(), "model"))
    throw InvalidArgument(
        fmt::format("{} holds no /model group; is it a hardy model or checkpoint?", path.string()));
  h5::Handle group = h5::open_group(file.id(), "model");
  for (auto& [name, tensor] : model_tensors(model)) {
    if (!h5::exists(group.id(), name))
      throw InvalidArgument(
          fmt::format("{} has no tensor /model/{}; was it written for another model configuration?",
                      path.string(), name));
    h5::Handle dataset = h5::open_dataset(group.id(), name);
    const auto dims = h5::dataset_dims(dataset.id());
    if (!std::equal(dims.begin(), dims.end(), tensor->dims().begin(), tensor->dims().end()))
      throw InvalidArgument(fmt::format("{}: /model/{} has shape [{}], the model expects {}",
                                        path.string(), name, fmt::join(dims, ","),
                                        tensor->describe()));
    core::Tensor host =
        core::Tensor::host(tensor->dims(), core::DType::f32, canonical_layout(*tensor));
    h5::read_dataset<float>(group.id(), name, host.f32());
    model.backend().copy(host, *tensor);
  }
}

}  // namespace hardy::checkpoint
