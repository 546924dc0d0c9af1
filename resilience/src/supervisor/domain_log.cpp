#include "supervisor/domain_log.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "hardy/core/support/event_schema.hpp"
#include "hardy/core/support/json_fields.hpp"

namespace hardy::resilience {

DomainLog::DomainLog(std::filesystem::path file, int domains)
    : file_(std::move(file)), latest_(static_cast<std::size_t>(domains)) {}

void DomainLog::poll() {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(file_, error);
  if (error || size == offset_) return;
  if (size < offset_) {  // replaced: read it from its start
    offset_ = 0;
    partial_.clear();
    latest_.assign(latest_.size(), Latest{});
  }
  std::ifstream in(file_, std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string added(static_cast<std::size_t>(size - offset_), '\0');
  in.read(added.data(), static_cast<std::streamsize>(added.size()));
  added.resize(static_cast<std::size_t>(in.gcount()));
  offset_ += added.size();
  partial_ += added;
  std::size_t begin = 0;
  for (std::size_t end; (end = partial_.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const auto record =
        nlohmann::json::parse(partial_.begin() + static_cast<std::ptrdiff_t>(begin),
                              partial_.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    if (record.is_discarded() || !record.is_object()) continue;
    const auto domain = core::read_field<long>(record, "domain");
    const auto event = core::read_field<std::string>(record, "event");
    if (!domain || !event || *domain < 0 || *domain >= static_cast<long>(latest_.size())) continue;
    const double time = core::read_field<double>(record, "unix_time").value_or(0);
    Latest& latest = latest_[static_cast<std::size_t>(*domain)];
    if (*event == core::event_kind("job_started") || *event == core::event_kind("domain_started"))
      latest.started = std::max(latest.started, time);
    else if ((*event == core::event_kind("job_finished") ||
              *event == core::event_kind("domain_finished")) &&
             core::read_field<std::string>(record, "status") == "completed")
      latest.finished = std::max(latest.finished, time);
    else if (*event == core::event_kind("domain_joined"))
      latest.joined = std::max(latest.joined, time);
  }
  partial_.erase(0, begin);
}

std::optional<double> DomainLog::started(int index, double since) {
  poll();
  const double at = latest_.at(static_cast<std::size_t>(index)).started;
  return at >= since ? std::optional<double>(at) : std::nullopt;
}

bool DomainLog::finished(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).finished >= since;
}

bool DomainLog::joined(int index, double since) {
  poll();
  return latest_.at(static_cast<std::size_t>(index)).joined >= since;
}

}  // namespace hardy::resilience
