#pragma once
// The run directory's files as this rank sees them: the event log (every domain's leader writes
// one), and the files one rank of the job writes (membership.hpp's writes_run_files): the
// lock, config.ini, metrics.jsonl and samples.jsonl. Every rank keeps the lines of the last
// committed step, so that whoever writes the files next (a new rank 0 after a shrink, a domain
// taking over) can log a step its predecessor committed but died before logging.
#include <filesystem>
#include <memory>
#include <string>

#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/run_lock.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"

namespace hardy::resilience {

class RunFiles {
 public:
  // Nothing is opened yet: see prepare().
  RunFiles(const TrainingConfig& config, const Membership& membership);

  core::EventLog& events() { return events_; }
  // The lead: creates the run directory (InvalidArgument when it cannot), takes its lock unless
  // `hardy run` holds it for this launch, opens the logs and writes config.ini.
  void prepare();
  // When this rank becomes rank 0 (the events), and the writer of the run directory's files
  // (metrics, audit): again whenever that may have changed. Returns whether it writes them.
  bool open_if_lead();
  // Another domain writes the run directory's files from now on.
  void close_shared();
  bool shared_open() const { return shared_open_; }

  // ---- the committed step's lines, kept by every rank ----
  void keep_audit_line(long step, const core::GlobalBatch& batch);
  void keep_metrics_line(nlohmann::json line);
  void write_audit_line() { audit_.write(committed_audit_); }
  void write_metrics_line() { metrics_.write(committed_metrics_); }
  // A new writer of the files: the committed step's lines when its predecessor died between the
  // step's agreement and logging it.
  void log_committed_step_if_missing(long step);

  // ---- fault domains that meet every N-th step (--domain-sync-every) ----
  // The committed lines are those of a step where the domains met.
  void mark_synced();
  // Back at the last meeting, `step`: its lines become the committed ones again.
  void back_to_synced(long step);
  // The lines of the committed step (or, `synced`, of the last meeting) as one string, and a
  // peer's (fault_domains.hpp) or a restored state's taken where they are of a later step than
  // this rank's; a metrics line from a state says so (`restored_from`: where it was restored
  // from; its times are the ones it had when the state was copied).
  std::string committed_lines(bool synced) const;
  void adopt_lines(const std::string& text, const std::string& restored_from = {});

 private:
  const TrainingConfig& config_;
  const Membership& membership_;
  // The lead's lock of the run directory, when no `hardy run` holds it for this launch.
  std::unique_ptr<RunDirectoryLock> run_lock_;
  core::EventLog events_{event_kinds()};  // disabled until this rank leads
  core::JsonLines metrics_, audit_;
  bool shared_open_ = false;  // this rank writes the run directory's files
  nlohmann::json committed_metrics_, committed_audit_;
  // The same lines of the last step the domains met at (--domain-sync-every above 1): a rewind
  // goes back to that step, whose lines a new owner of the run files writes if they are missing.
  nlohmann::json synced_metrics_, synced_audit_;
};

}  // namespace hardy::resilience
