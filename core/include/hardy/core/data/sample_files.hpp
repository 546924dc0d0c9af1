#pragma once
// A sample source that keeps one file per sample (the DeepCAM and ClimateNet layouts): what
// node-local staging (--stage-to, `hardy data stage`) needs to know of it.
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hardy::core {

class SampleFiles {
 public:
  // Maps a sample's source path to a byte-identical copy (node-local staging).
  using FileLocator = std::function<std::filesystem::path(const std::filesystem::path& source)>;

  virtual ~SampleFiles() = default;
  // The sample files, in sample order.
  virtual const std::vector<std::filesystem::path>& files() const = 0;
  // Where load() reads a sample's bytes from: the locator's copy of its source file; without a
  // locator (the default), the source file itself. May be called while other threads load.
  virtual void set_file_locator(FileLocator locator) = 0;
};

// Where a reader's load() finds a sample's bytes: what set_file_locator() gave it, which may change
// while other threads load (each load takes the locator as it stands).
class FileLocation {
 public:
  void set(SampleFiles::FileLocator locator);
  struct Found {
    std::filesystem::path path;  // the copy, or the source itself
    std::string note;            // for a BadSample's reason: " (read from 'COPY')", or empty
  };
  Found of(const std::filesystem::path& source) const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const SampleFiles::FileLocator> locator_;
};

}  // namespace hardy::core
