#pragma once
// A sample source that keeps one file per sample (the DeepCAM and ClimateNet layouts): what
// node-local staging (--stage-to, `hardy data stage`) needs to know of it, where a load reads a
// file from, and what a reader learnt of each file.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/support/error.hpp"

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

// Each sample file's layout, found the first time a load needs it and kept for every thread
// after; a file found bad stays bad, so every later load of it throws at once. `Layout` is a
// reader's description of one file, with a `bad_reason` (empty: the file is good); it may be
// incomplete where this is declared, complete where the members are called.
template <typename Layout>
class InspectedFiles {
 public:
  void reset(std::size_t count, Layout first) {
    const std::lock_guard lock(mutex_);
    layouts_.clear();
    layouts_.resize(count);
    layouts_[0] = std::make_unique<Layout>(std::move(first));
  }

  // The layout of `file` (sample `index`), from `inspect()` the first time, called outside the
  // lock so that files are inspected in parallel (two threads inspecting one file at once reach
  // the same verdict). An Error from it makes the file bad. BadSample for a bad file.
  template <typename Inspect>
  Layout get(std::size_t index, const std::filesystem::path& file, Inspect inspect) const {
    {
      const std::lock_guard lock(mutex_);
      if (const auto& known = layouts_[index]) return checked(index, file, *known);
    }
    Layout inspected;
    try {
      inspected = inspect();
    } catch (const Error& error) {
      inspected.bad_reason = error.what();
    }
    const std::lock_guard lock(mutex_);
    auto& known = layouts_[index];
    if (!known) known = std::make_unique<Layout>(std::move(inspected));
    return checked(index, file, *known);
  }

  // A load found `file` bad after its layout passed: remembered, then BadSample.
  [[noreturn]] void mark_bad(std::size_t index, const std::filesystem::path& file,
                             const std::string& reason) const {
    {
      const std::lock_guard lock(mutex_);
      if (layouts_[index]) layouts_[index]->bad_reason = reason;
    }
    throw BadSample(index, file.string(), reason);
  }

  // What one load of sample `index` reads: the layout of its file `source`, the path it reads
  // (`source`'s node-local copy where `location` has one), and fail(reason), which marks the file
  // bad naming the copy read and throws BadSample.
  struct Read {
    const InspectedFiles& files;
    std::size_t index;
    const std::filesystem::path& source;
    Layout layout;
    FileLocation::Found found;
    const std::filesystem::path& path() const { return found.path; }
    [[noreturn]] void fail(const std::string& reason) const {
      files.mark_bad(index, source, reason + found.note);
    }
  };
  Read read(std::size_t index, const std::filesystem::path& source, Layout layout,
            const FileLocation& location) const {
    return {*this, index, source, std::move(layout), location.of(source)};
  }

 private:
  static const Layout& checked(std::size_t index, const std::filesystem::path& file,
                               const Layout& layout) {
    if (!layout.bad_reason.empty()) throw BadSample(index, file.string(), layout.bad_reason);
    return layout;
  }

  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Layout>> layouts_;
};

// A SampleSource that reads one file (or one file pair) per sample: the DeepCAM, ClimateNet,
// CosmoFlow and packed readers. A reader fills files_ and shape_ in its constructor; its loads
// read each sample from location_.of(files_[index]), which follows set_file_locator(). Loads run
// in parallel unless a reader says otherwise (ClimateNet: HDF5 serializes them).
class FileSampleSource : public SampleSource, public SampleFiles {
 public:
  std::size_t size() const override { return files_.size(); }
  SampleShape shape() const override { return shape_; }
  int load_concurrency() const override { return 1 << 20; }
  const std::vector<std::filesystem::path>& files() const override { return files_; }
  void set_file_locator(FileLocator locator) override { location_.set(std::move(locator)); }

 protected:
  std::vector<std::filesystem::path> files_;
  SampleShape shape_{};
  FileLocation location_;
};

}  // namespace hardy::core
