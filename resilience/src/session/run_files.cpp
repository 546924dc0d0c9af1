#include "session/run_files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/json_fields.hpp"

namespace hardy::resilience {

RunFiles::RunFiles(const TrainingConfig& config, const Membership& membership)
    : config_(config), membership_(membership) {}

void RunFiles::prepare() {
  std::error_code error;
  std::filesystem::create_directories(config_.run_dir / "checkpoints", error);
  if (error)  // the user's choice of directory: relaunching would fail the same way
    throw InvalidArgument(fmt::format("--run-dir {}: cannot create {}: {}",
                                      config_.run_dir.string(),
                                      (config_.run_dir / "checkpoints").string(), error.message()));
  if (!RunDirectoryLock::holds(config_.run_dir, config_.run_lock_token)) {
    run_lock_ = std::make_unique<RunDirectoryLock>(config_.run_dir, "hardy train");
    if (run_lock_->caveat()) std::cerr << "hardy train: warning: " << *run_lock_->caveat() << "\n";
  }
  if (!open_if_lead()) return;
  core::write_atomically(config_.run_dir / "config.ini",
                         [&](const std::filesystem::path& temporary) {
                           std::ofstream file(temporary);
                           file << config_.config_ini;
                           file.close();
                           if (!file)
                             throw IoError(fmt::format("cannot write {}", temporary.string()));
                         });
}

bool RunFiles::open_if_lead() {
  if (!membership_.lead()) return false;
  if (!events_.enabled()) {
    events_ = core::EventLog(config_.run_dir / "events.jsonl", event_kinds());
    // Every domain's leader writes events: each record says whose it is.
    if (config_.domain >= 0) events_.add_context("domain", config_.domain);
  }
  if (!membership_.writes_run_files()) return false;
  if (shared_open_) return true;
  metrics_ = core::JsonLines(config_.run_dir / "metrics.jsonl");
  if (config_.audit_samples) audit_ = core::JsonLines(config_.run_dir / "samples.jsonl");
  shared_open_ = true;
  return true;
}

void RunFiles::close_shared() {
  metrics_ = core::JsonLines();
  audit_ = core::JsonLines();
  shared_open_ = false;
}

void RunFiles::keep_audit_line(long step, const core::GlobalBatch& batch) {
  committed_audit_ = {{"step", step}, {"epoch", batch.epochs.front()}, {"samples", batch.samples}};
  const auto boundary = std::find_if(batch.epochs.begin(), batch.epochs.end(),
                                     [&](std::int64_t e) { return e != batch.epochs.front(); });
  if (boundary != batch.epochs.end())
    committed_audit_["next_epoch_from"] = boundary - batch.epochs.begin();
}

void RunFiles::keep_metrics_line(nlohmann::json line) { committed_metrics_ = std::move(line); }

void RunFiles::log_committed_step_if_missing(long step) {
  // Rank 0 logs a step after the step's agreement (and its in-memory and node-local copies).
  // Dying in between, it leaves a step that every survivor committed, and restored from memory,
  // but that neither metrics.jsonl nor the audit shows. Its successor holds the same lines.
  const auto missing = [&](const nlohmann::json& line, const core::JsonLines& log) {
    return log.enabled() && line.is_object() && line.value("step", -1L) == step &&
           core::read_field<long>(core::last_json_record(log.path()).value_or(nullptr), "step")
                   .value_or(-1) < step;
  };
  if (missing(committed_audit_, audit_)) audit_.write(committed_audit_);
  if (missing(committed_metrics_, metrics_)) metrics_.write(committed_metrics_);
}

void RunFiles::mark_synced() {
  synced_metrics_ = committed_metrics_;
  synced_audit_ = committed_audit_;
}

void RunFiles::back_to_synced(long step) {
  if (synced_metrics_.value("step", -1L) != step) return;
  committed_metrics_ = synced_metrics_;
  committed_audit_ = synced_audit_;
}

std::string RunFiles::committed_lines(bool synced) const {
  return nlohmann::json{{"metrics", synced ? synced_metrics_ : committed_metrics_},
                        {"audit", synced ? synced_audit_ : committed_audit_}}
      .dump();
}

void RunFiles::adopt_lines(const std::string& text, const std::string& restored_from) {
  // A peer's lines of a later step than this domain's own (a joiner has none).
  const auto lines = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!lines.is_object()) return;
  const auto step_of = [](const nlohmann::json& line) {
    return line.is_object() ? line.value("step", -1L) : -1L;
  };
  if (step_of(lines["metrics"]) > step_of(committed_metrics_)) {
    committed_metrics_ = lines["metrics"];
    if (!restored_from.empty()) committed_metrics_["restored_from"] = restored_from;
  }
  if (step_of(lines["audit"]) > step_of(committed_audit_)) committed_audit_ = lines["audit"];
}

}  // namespace hardy::resilience
