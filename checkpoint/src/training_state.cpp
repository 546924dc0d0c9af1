#include "hardy/checkpoint/training_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"

namespace hardy::checkpoint {

namespace {

using core::Tensor;

// A Buffer over memory that someone else owns, so that Backend::copy can write straight into a
// NamedTensor's vector instead of into a temporary host tensor that would be copied again.
class BorrowedHostMemory final : public core::Buffer {
 public:
  BorrowedHostMemory(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }
  core::Device device() const override { return core::Device::host; }

 private:
  void* data_;
  std::size_t bytes_;
};

// Checkpoints hold 4-D tensors in (N, C, H, W) order, everything else flat, whatever the
// backend's own layout is, so that a checkpoint restores on any backend.
core::Layout canonical_layout(const std::vector<std::int64_t>& dims) {
  return dims.size() == 4 ? core::Layout::nchw : core::Layout::flat;
}

Tensor host_view(std::span<float> values, const std::vector<std::int64_t>& dims) {
  auto memory = std::make_shared<BorrowedHostMemory>(values.data(), values.size() * sizeof(float));
  return Tensor(dims, core::DType::f32, canonical_layout(dims), std::move(memory));
}

Tensor host_view(NamedTensor& tensor) { return host_view(tensor.values, tensor.dims); }

// A const view: Backend::copy takes its source by const reference.
Tensor host_view(const NamedTensor& tensor) { return host_view(const_cast<NamedTensor&>(tensor)); }

using LiveTensors = std::vector<std::pair<std::string, Tensor*>>;

LiveTensors model_tensors(core::Model& model) {
  LiveTensors tensors;
  for (core::Parameter* p : model.parameters()) tensors.emplace_back(p->name, &p->value);
  for (auto& entry : model.buffers()) tensors.push_back(entry);
  return tensors;
}

LiveTensors optimizer_tensors(core::Model& model, core::Optimizer& optimizer) {
  optimizer.initialize_state(std::span<core::Parameter* const>(model.parameters()));
  return optimizer.state_tensors();
}

void require_f32(const std::string& name, const Tensor& tensor) {
  if (tensor.dtype() != core::DType::f32)
    throw InvalidArgument(fmt::format("tensor '{}' is {}; checkpoints hold f32 tensors only", name,
                                      tensor.describe()));
}

std::vector<TensorSource> sources_of(const LiveTensors& live) {
  std::vector<TensorSource> sources;
  sources.reserve(live.size());
  for (const auto& [name, tensor] : live) {
    require_f32(name, *tensor);
    sources.push_back({name, tensor});
  }
  return sources;
}

void copy_out(core::Backend& backend, const std::vector<TensorSource>& live,
              std::vector<NamedTensor>& out) {
  const bool reusable =
      out.size() == live.size() &&
      std::equal(out.begin(), out.end(), live.begin(), [](const NamedTensor& a, const auto& b) {
        return a.name == b.name && a.dims == b.tensor->dims();
      });
  if (!reusable) {
    out.clear();
    out.reserve(live.size());
    for (const TensorSource& source : live)
      out.push_back({source.name, source.tensor->dims(),
                     std::vector<float>(static_cast<std::size_t>(source.tensor->numel()))});
  }
  for (std::size_t i = 0; i < live.size(); ++i)
    copy_to_host(backend, *live[i].tensor, out[i].values);
}

std::string shape_of(const std::vector<std::int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

// Pairs every live tensor with the saved one of the same name; throws naming the first tensor
// that is missing, unexpected, or of another shape.
std::vector<const NamedTensor*> match(const std::vector<NamedTensor>& saved,
                                      const LiveTensors& live, const char* group) {
  std::map<std::string_view, const NamedTensor*> by_name;
  for (const NamedTensor& tensor : saved) by_name.emplace(tensor.name, &tensor);
  std::vector<const NamedTensor*> matched;
  for (const auto& [name, tensor] : live) {
    const auto found = by_name.find(name);
    if (found == by_name.end())
      throw InvalidArgument(fmt::format(
          "the checkpoint has no tensor /{}/{}; was it written for another model configuration?",
          group, name));
    if (found->second->dims != tensor->dims())
      throw InvalidArgument(
          fmt::format("tensor /{}/{} has shape {} in the checkpoint, but the job's is {}", group,
                      name, shape_of(found->second->dims), shape_of(tensor->dims())));
    require_f32(name, *tensor);
    if (found->second->values.size() != static_cast<std::size_t>(tensor->numel()))
      throw InvalidArgument(fmt::format("tensor /{}/{} holds {} values for shape {}", group, name,
                                        found->second->values.size(), shape_of(tensor->dims())));
    matched.push_back(found->second);
    by_name.erase(found);
  }
  if (!by_name.empty())
    throw InvalidArgument(fmt::format(
        "the checkpoint has tensor /{}/{} that the job does not; was it written for another model "
        "configuration?",
        group, by_name.begin()->first));
  return matched;
}

}  // namespace

std::int64_t NamedTensor::numel() const {
  return std::accumulate(dims.begin(), dims.end(), std::int64_t{1}, std::multiplies<>());
}

StateSources state_sources(core::Model& model, core::Optimizer& optimizer) {
  return {&model.backend(), sources_of(model_tensors(model)),
          sources_of(optimizer_tensors(model, optimizer))};
}

void capture_scalars_into(const core::Optimizer& optimizer, TrainingState& state) {
  state.optimizer_kind = core::to_string(optimizer.config().kind);
  state.optimizer_steps = optimizer.steps_taken();
  state.hardy_version = HARDY_VERSION;
  state.unix_time = core::unix_time();
}

void copy_to_host(core::Backend& backend, const core::Tensor& tensor, std::span<float> into) {
  if (static_cast<std::int64_t>(into.size()) != tensor.numel())
    throw InvalidArgument(
        fmt::format("copy_to_host: {} floats for a tensor of {}", into.size(), tensor.numel()));
  Tensor view = host_view(into, tensor.dims());
  backend.copy(tensor, view);
}

void capture_tensors_into(const StateSources& sources, TrainingState& state) {
  copy_out(*sources.backend, sources.model, state.model);
  copy_out(*sources.backend, sources.optimizer, state.optimizer);
  sources.backend->synchronize();  // a device backend may copy asynchronously
}

void capture_into(core::Model& model, core::Optimizer& optimizer, TrainingState& state) {
  capture_tensors_into(state_sources(model, optimizer), state);
  capture_scalars_into(optimizer, state);
}

TrainingState capture(core::Model& model, core::Optimizer& optimizer) {
  TrainingState state;
  capture_into(model, optimizer, state);
  return state;
}

void apply(const TrainingState& state, core::Model& model, core::Optimizer& optimizer) {
  const std::string kind = core::to_string(optimizer.config().kind);
  if (state.optimizer_kind != kind)
    throw InvalidArgument(
        fmt::format("the checkpoint holds the state of optimizer '{}', but the job uses '{}'",
                    state.optimizer_kind, kind));
  if (state.optimizer_steps < 0)
    throw InvalidArgument(
        fmt::format("the checkpoint's optimizer step count {} is negative", state.optimizer_steps));
  const LiveTensors live_model = model_tensors(model);
  const LiveTensors live_optimizer = optimizer_tensors(model, optimizer);
  const auto saved_model = match(state.model, live_model, "model");
  const auto saved_optimizer = match(state.optimizer, live_optimizer, "optimizer");
  core::Backend& backend = model.backend();
  for (std::size_t i = 0; i < live_model.size(); ++i)
    backend.copy(host_view(*saved_model[i]), *live_model[i].second);
  for (std::size_t i = 0; i < live_optimizer.size(); ++i)
    backend.copy(host_view(*saved_optimizer[i]), *live_optimizer[i].second);
  backend.synchronize();
  optimizer.set_steps_taken(state.optimizer_steps);
}

std::uint64_t tensor_bytes(const TrainingState& state) {
  std::uint64_t bytes = 0;
  for (const auto* group : {&state.model, &state.optimizer})
    for (const NamedTensor& tensor : *group) bytes += tensor.values.size() * sizeof(float);
  return bytes;
}

}  // namespace hardy::checkpoint
