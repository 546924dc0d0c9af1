#include "supervisor/appended_records.hpp"

#include <fstream>

namespace hardy::resilience {

AppendedRecords::AppendedRecords(std::filesystem::path file, std::uintmax_t offset)
    : file_(std::move(file)), offset_(offset) {}

std::vector<nlohmann::json> AppendedRecords::read(bool* replaced) {
  if (replaced != nullptr) *replaced = false;
  std::vector<nlohmann::json> records;
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(file_, error);
  if (error || size == offset_) return records;
  if (size < offset_) {
    offset_ = 0;
    partial_.clear();
    if (replaced != nullptr) *replaced = true;
  }
  std::ifstream in(file_, std::ios::binary);
  if (!in) return records;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string added(static_cast<std::size_t>(size - offset_), '\0');
  in.read(added.data(), static_cast<std::streamsize>(added.size()));
  added.resize(static_cast<std::size_t>(in.gcount()));
  offset_ += added.size();
  partial_ += added;
  std::size_t begin = 0;
  for (std::size_t end; (end = partial_.find('\n', begin)) != std::string::npos; begin = end + 1) {
    auto record =
        nlohmann::json::parse(partial_.begin() + static_cast<std::ptrdiff_t>(begin),
                              partial_.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    if (!record.is_discarded() && record.is_object()) records.push_back(std::move(record));
  }
  partial_.erase(0, begin);
  return records;
}

}  // namespace hardy::resilience
