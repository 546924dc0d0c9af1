#pragma once
// JSON-lines logs in the run directory: events.jsonl (what happened: job start and end,
// failures, shrinks, restores, checkpoints) and metrics.jsonl (one line per step). Every layer
// of hardy reports through these, so the writer lives at the bottom of the stack. Each line is
// written whole and flushed at once, so a crash loses at most the line being written.
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hardy/core/support/event_schema.hpp"  // the kinds and fields, for readers too
#include "hardy/core/support/json_fields.hpp"   // for the readers of these logs

namespace hardy::core {

// Seconds since the Unix epoch, with sub-millisecond resolution.
double unix_time();
// ISO-8601 UTC time with milliseconds, e.g. 2026-11-21T10:15:02.123Z.
std::string iso_time(double unix_seconds);

class JsonLines {
 public:
  JsonLines() = default;  // a disabled log: write() does nothing (non-zero ranks)
  explicit JsonLines(const std::filesystem::path& path);  // appends; throws IoError
  ~JsonLines();
  JsonLines(JsonLines&&) noexcept;
  JsonLines& operator=(JsonLines&&) noexcept;
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::mutex mutex_;  // the checkpoint writer thread logs too
};

// events.jsonl: every record gets "time" (ISO-8601), "unix_time" and "event".
//
// emit checks each event against the log's table of kinds (event_schema.hpp; a disabled log too,
// so every rank's calls are checked in tests). A kind or field that the table does not declare, a
// value of the wrong type or a missing required field throws Error in builds with tests
// (HARDY_STRICT_EVENTS: the suite finds the miss); elsewhere the record is written all the same,
// with the problem in "schema_problem", because a log line must not end a training job.
class EventLog {
 public:
  // A disabled log (write() does nothing: ranks other than the lead) that still checks.
  explicit EventLog(EventKinds kinds) : kinds_(kinds) {}
  EventLog(const std::filesystem::path& path, EventKinds kinds) : lines_(path), kinds_(kinds) {}
  void emit(const std::string& event, nlohmann::json fields = nlohmann::json::object());
  bool enabled() const { return lines_.enabled(); }
  // A field every later record carries (a fault domain's index, when several processes write
  // one log); a field of the record itself wins.
  // Throws hardy::Error for a key event_schema.hpp does not declare as a context field.
  void add_context(const std::string& key, nlohmann::json value);

 private:
  JsonLines lines_;
  EventKinds kinds_;
  nlohmann::json context_ = nlohmann::json::object();
};

// Reading a log back: its last complete line that is a JSON object, from the file's last 64 KiB
// (a long job's metrics.jsonl is large); a line cut short by a crash is passed over. nullopt when
// there is none or the file cannot be read.
std::optional<nlohmann::json> last_json_record(const std::filesystem::path& path);
// Its last `count` such lines at most, oldest first, from the file's last `window` bytes.
std::vector<nlohmann::json> last_json_records(const std::filesystem::path& path, std::size_t count,
                                              std::size_t window = std::size_t{1} << 16);

}  // namespace hardy::core
