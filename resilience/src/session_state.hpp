#pragma once
// The inside of a TrainingSession, shared by the training loop (training_session.cpp) and the
// recovery protocol (recovery.cpp).
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/comm/cross_rank_sum.hpp"
#include "hardy/comm/gradient_reducer.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/failure_injection.hpp"
#include "hardy/resilience/training_session.hpp"

namespace hardy::resilience {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);

// Raised inside the session when it must stop before its last step (limits reached, preempted).
struct SessionStop {
  int status;
  std::string reason;
};

struct TrainingSession::State {
  State(TrainingConfig config, std::unique_ptr<comm::Communicator> world);
  ~State();

  int run();

  // ---- the training loop (training_session.cpp) ----
  void announce_ranks();
  void resume_if_asked();
  void train_step();
  void commit_step(const std::function<void()>& log_step);
  void take_snapshot();
  void maybe_checkpoint(bool force_sync);
  void check_same_plan(const core::GlobalBatch& batch);
  void verify_replicas(long step);
  void write_metrics(double compute_s, double allreduce_s, double step_s, float lr);
  void open_lead_logs();  // when this rank becomes rank 0
  bool lead() const { return comm->rank() == 0; }
  std::size_t current_global_batch() const;
  float current_lr(long step) const;
  checkpoint::TrainingState capture_state() const;
  void apply_state(const checkpoint::TrainingState& state);
  void store_loop_scalars(checkpoint::TrainingState& state) const;  // step, sampler, loss, ...
  void restore_loop_scalars(const checkpoint::TrainingState& state);
  // Root's `state` (read from a checkpoint or a node-local snapshot) to every rank, applied
  // everywhere; when the gradient reducer moves device tensors (NCCL) they go GPU to GPU and
  // `state` keeps only the loop's scalars afterwards.
  void broadcast_restored(checkpoint::TrainingState& state, int root = 0);

  // ---- the node-local tier (node_snapshots.cpp) ----
  // Whether this rank is the lowest current rank on its host, the one that writes and reads the
  // host's snapshots (changes when the communicator shrinks).
  bool writes_node_snapshots() const;
  // Every --snapshot-every committed steps: hands the committed state to the host's writer and
  // sets last_snapshot_s to the stall. Never throws for a write that fails (snapshot_failed).
  void write_node_snapshot();
  // `--resume latest`: restores every rank from the newest node-local snapshot of any host when
  // it is newer than rank 0's checkpoint at `checkpoint_step` (-1: none). False when none is.
  bool resume_from_node_snapshot(long checkpoint_step, Clock::time_point started);
  // At the end of a job that completed, stopped or was preempted: the host's writer removes them.
  void remove_node_snapshots();
  void report_snapshot_failure(long at_step, const std::string& error);
  // After a resume: the state_restored event (`host` only for a node-local snapshot) and, on the
  // lead, the console line.
  void report_resumed(const std::string& source, const std::filesystem::path& path,
                      const std::string& host, int saved_world_size, Clock::time_point started);

  // ---- recovery (recovery.cpp) ----
  // After a ProcessFailure, or a step that some survivor did not finish: shrink to the
  // survivors, roll back to the last committed step, re-split the batch (recovery_protocol.hpp).
  void recover(const std::string& what);
  void restore_after_failure(double detected_at);
  void write_final_checkpoint(const std::string& reason);

  // ---- watchdog (recovery.cpp) ----
  void start_watchdog();
  void stop_watchdog();
  struct CommunicationScope {  // marks a stretch of communication for the watchdog
    explicit CommunicationScope(State& state, const char* what);
    ~CommunicationScope();
    State& state;
  };

  TrainingConfig config;
  std::unique_ptr<comm::Communicator> comm;
  comm::CommunicatorSum cross_rank;
  int world_rank;  // rank in the job's original world
  int original_world_size;
  std::vector<int> world_rank_of;  // current rank -> original world rank
  std::vector<std::string> hosts;  // by original world rank
  std::vector<long> pids;          // by original world rank

  std::unique_ptr<core::Backend> backend;
  core::DataSources data;
  core::DeepLabV3Plus model;
  std::unique_ptr<core::Optimizer> optimizer;
  core::EpochSampler sampler;
  core::BatchAssembler assembler;
  // fp16: dynamic loss scaling; bf16 and f32: a static scale of 1 (still skips non-finite steps).
  core::LossScaler scaler;
  // The gradient allreduce: MPI buckets for host gradients, NCCL for device ones.
  std::unique_ptr<comm::GradientReducer> reducer;
  std::vector<float> class_weights;
  FailureInjector injector;

  core::EventLog events;
  core::JsonLines metrics, audit;
  std::optional<checkpoint::CheckpointWriter> writer;
  bool lead_logs_open = false;

  long step = 0;  // steps committed
  long last_checkpoint_step = -1;
  double last_loss = 0;
  std::optional<checkpoint::TrainingState> snapshot;  // the last committed step, in memory
  std::optional<checkpoint::NodeLocalSnapshots> node_snapshots;  // on each host's writer rank
  bool node_snapshots_unavailable = false;  // the directory could not be created: tier off
  std::atomic<bool> snapshot_failure_reported{false};  // the writer's thread reports too
  double last_snapshot_s = 0;  // the training thread's stall for this step's node-local copy
  core::GlobalBatch current_batch;
  core::Tensor fields, labels, dlogits;
  Clock::time_point job_start = Clock::now(), last_checkpoint = Clock::now(),
                    last_commit = Clock::now();
  double samples_seen = 0;
  double last_commit_unix = 0;
  int failures = 0;

  std::atomic<double> communication_since{0};  // unix time, 0 when not communicating
  std::atomic<const char*> communication_what{""};
  std::atomic<bool> watchdog_running{false};
  std::thread watchdog;
};

}  // namespace hardy::resilience
