#include "hardy/core/data/sample_files.hpp"

#include <fmt/format.h>

namespace hardy::core {

void FileLocation::set(SampleFiles::FileLocator locator) {
  auto shared =
      locator ? std::make_shared<const SampleFiles::FileLocator>(std::move(locator)) : nullptr;
  const std::lock_guard lock(mutex_);
  locator_ = std::move(shared);
}

FileLocation::Found FileLocation::of(const std::filesystem::path& source) const {
  std::shared_ptr<const SampleFiles::FileLocator> locator;
  {
    const std::lock_guard lock(mutex_);
    locator = locator_;
  }
  Found found{locator ? (*locator)(source) : source, {}};
  if (found.path != source) found.note = fmt::format(" (read from '{}')", found.path.string());
  return found;
}

}  // namespace hardy::core
