#include "hardy/core/support/event_log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

double unix_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string iso_time(double unix_seconds) {
  const auto whole = static_cast<std::time_t>(unix_seconds);
  const int millis = static_cast<int>((unix_seconds - static_cast<double>(whole)) * 1000.0);
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", buffer, millis);
}

JsonLines::JsonLines(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr)
    throw IoError(
        fmt::format("cannot open {} for appending: {}", path.string(), std::strerror(errno)));
}

JsonLines::~JsonLines() {
  if (file_) std::fclose(file_);
}

JsonLines::JsonLines(JsonLines&& other) noexcept
    : path_(std::move(other.path_)), file_(other.file_) {
  other.file_ = nullptr;
}

JsonLines& JsonLines::operator=(JsonLines&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = other.file_;
    other.file_ = nullptr;
  }
  return *this;
}

void JsonLines::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line =
      record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw IoError(fmt::format("cannot write to {}: {}", path_.string(), std::strerror(errno)));
}

void EventLog::add_context(const std::string& key, nlohmann::json value) {
  if (!is_event_context_field(key))
    throw Error(fmt::format("'{}' is not a context field of event_schema.hpp's envelope", key));
  context_[key] = std::move(value);
}

void EventLog::emit(const std::string& event, nlohmann::json fields) {
  std::string problem = event_schema_problem(kinds_, event, fields);
#if HARDY_STRICT_EVENTS
  if (!problem.empty()) throw Error(problem);
#endif
  if (!lines_.enabled()) return;
  const double now = unix_time();
  nlohmann::json record = {{"time", iso_time(now)}, {"unix_time", now}, {"event", event}};
  for (const auto& [key, value] : context_.items()) record[key] = value;
  if (!problem.empty()) record["schema_problem"] = std::move(problem);
  for (auto& [key, value] : fields.items()) record[key] = std::move(value);
  lines_.write(record);
}

std::vector<nlohmann::json> last_json_records(const std::filesystem::path& path, std::size_t count,
                                              std::size_t window) {
  std::vector<nlohmann::json> records;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file || count == 0) return records;
  const std::streamoff size = file.tellg();
  const std::streamoff tail = std::min<std::streamoff>(size, static_cast<std::streamoff>(window));
  std::string text(static_cast<std::size_t>(tail), '\0');
  file.seekg(size - tail);
  file.read(text.data(), tail);
  std::size_t end = text.size();
  while (end > 0 && records.size() < count) {
    const std::size_t begin = text.rfind('\n', end - 1);
    const std::size_t from = begin == std::string::npos ? 0 : begin + 1;
    // The window's first line may be cut at its start: it parses as nothing, and is passed over.
    auto record = nlohmann::json::parse(text.substr(from, end - from), nullptr, false);
    if (!record.is_discarded() && record.is_object()) records.push_back(std::move(record));
    if (begin == std::string::npos) break;
    end = begin;
  }
  std::reverse(records.begin(), records.end());
  return records;
}

std::optional<nlohmann::json> last_json_record(const std::filesystem::path& path) {
  auto records = last_json_records(path, 1);
  if (records.empty()) return std::nullopt;
  return std::move(records.back());
}

}  // namespace hardy::core
