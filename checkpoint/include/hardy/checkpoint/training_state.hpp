#pragma once
// TrainingState is a host-side snapshot of everything a checkpoint holds: the model's parameters
// and normalization statistics, the optimizer's state, the training loop's position (step,
// epoch, sampler, learning-rate schedule, loss scale) and a description of the job that wrote
// it. It owns plain host memory, so a background thread can write it while training goes on, and
// it can be broadcast to ranks that hold no file (see broadcast_state.hpp).
//
// capture() fills the tensors; the caller fills the loop's scalars (it alone knows them):
//
//   checkpoint::TrainingState state = checkpoint::capture(model, *optimizer);  // the stall
//   state.step = step;  state.epoch = ...;  state.sampler = sampler.state();  state.loss = ...;
//   state.config_ini = spec.config_ini;  state.world_size = comm.size();  state.hosts = hosts;
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/lr_schedule.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/core/version.hpp"

namespace hardy::checkpoint {

// One f32 tensor copied to the host. 4-D tensors are in (N, C, H, W) order, convolution weights
// (O, I, KH, KW) as in PyTorch, whatever layout the backend keeps them in; others are flat.
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> dims;
  std::vector<float> values;

  std::int64_t numel() const;
  bool operator==(const NamedTensor&) const = default;
};

struct TrainingState {
  // /model: parameters (model order) then normalization buffers, named by layer path.
  std::vector<NamedTensor> model;
  // /optimizer: "<kind-of-state>/<parameter name>" as Optimizer::state_tensors() names them.
  std::vector<NamedTensor> optimizer;
  std::string optimizer_kind;  // "sgd", "lars", "adam"
  long optimizer_steps = 0;    // Optimizer::steps_taken(); Adam's bias correction needs it

  // /train: where the loop stands after `step` completed optimizer steps.
  long step = 0;
  long epoch = 0;                  // epoch of the last batch trained on
  core::SamplerState sampler;      // resuming continues at sampler.cursor of sampler.epoch
  std::uint64_t rng_seed = 0;      // the job's seed: the loop has no random state beyond it
  core::LrSchedule lr_schedule;    // the rate is lr_schedule.at(step): the step is its state
  float loss_scale = 1.0f;         // mixed-precision loss scale (1 when not in use)
  long loss_scale_good_steps = 0;  // steps since the scale last changed
  double loss = 0;                 // loss of the last step

  // /job: who wrote the checkpoint.
  std::string config_ini;  // the effective configuration, as in the run's config.ini
  int world_size = 1;
  std::string hardy_version = HARDY_VERSION;
  std::vector<std::string> hosts;  // by rank
  double unix_time = 0;            // when the state was captured
  // Which run wrote it and for what (resilience/run_identity.hpp); empty in checkpoints written
  // before hardy recorded them.
  std::string run_id;
  std::string config_hash;
  // The precision the writer trained in ("f32", "bf16", "fp16"; empty in older checkpoints).
  // Informational: the tensors are f32 in every precision, so a state restores into any.
  std::string precision;
  // The step's lines of the run directory's logs, as JSON {"metrics": ..., "audit": ...}
  // (either may be null), so that a job restoring this state can log a step whose writer died
  // before it did (empty: not recorded, as in older checkpoints).
  std::string committed_lines;
};

// Copies every model tensor and every optimizer state tensor into host memory (this copy is what
// stalls training), and sets optimizer_kind, optimizer_steps, hardy_version and unix_time. The
// optimizer's state is created first if it has none yet, so a checkpoint taken before the first
// step still restores into any later job.
TrainingState capture(core::Model& model, core::Optimizer& optimizer);
// The same into an existing state, reusing its buffers when names and sizes match (no allocation
// for a snapshot taken every step); the state's scalars are left as they are.
void capture_into(core::Model& model, core::Optimizer& optimizer, TrainingState& state);

// The tensors capture_into copies, where they live: for a writer with memory of its own to fill
// (a node-local snapshot's mapped slot), which copies them there itself and so saves the copy
// into a TrainingState. Valid while the model and optimizer are; nothing may change them while
// they are being copied.
struct TensorSource {
  std::string name;
  const core::Tensor* tensor = nullptr;
};
struct StateSources {
  core::Backend* backend = nullptr;
  std::vector<TensorSource> model;      // parameters (model order) then normalization buffers
  std::vector<TensorSource> optimizer;  // as Optimizer::state_tensors() names them
};
// The model's and optimizer's tensors (the optimizer's state created first, as capture does).
StateSources state_sources(core::Model& model, core::Optimizer& optimizer);
// Copies the sources' tensors into the state's lists, reusing their buffers when names and sizes
// match, and waits for the copies; the scalars are left as they are.
void capture_tensors_into(const StateSources& sources, TrainingState& state);
// capture_into without the tensors: sets optimizer_kind, optimizer_steps, hardy_version and
// unix_time; the tensor lists are left as they are.
void capture_scalars_into(const core::Optimizer& optimizer, TrainingState& state);
// Copies one live tensor into host memory in the checkpoint's layout ((N, C, H, W) for 4-D
// tensors, flat otherwise), whatever layout the backend keeps it in; `into` holds numel()
// floats. A device backend may copy asynchronously: synchronize before reading `into`.
void copy_to_host(core::Backend& backend, const core::Tensor& tensor, std::span<float> into);

// Copies the state's tensors into the model and the optimizer (creating the optimizer's state
// first) and sets the optimizer's step count. Checks everything before copying anything: throws
// InvalidArgument naming the tensor when one is missing, extra, or has another shape, and naming
// both kinds when the optimizer kinds differ; the model and optimizer are then unchanged.
// The loop's scalars (step, sampler, ...) are the caller's to restore.
void apply(const TrainingState& state, core::Model& model, core::Optimizer& optimizer);

// Bytes of tensor data in a state (model and optimizer).
std::uint64_t tensor_bytes(const TrainingState& state);

}  // namespace hardy::checkpoint
