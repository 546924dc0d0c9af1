#include "hardy/core/support/modules.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <vector>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

namespace {

std::vector<std::filesystem::path> module_directories() {
  std::vector<std::filesystem::path> directories;
  if (const char* chosen = std::getenv("HARDY_MODULE_DIR"); chosen != nullptr && *chosen != '\0') {
    directories.emplace_back(chosen);
    return directories;  // the user's choice stands alone: no other copy is loaded behind it
  }
  std::error_code error;
  const auto executable = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) directories.push_back(executable.parent_path() / HARDY_MODULES_FROM_BIN);
  directories.emplace_back(HARDY_BUILD_MODULE_DIR);
  return directories;
}

}  // namespace

void* module_symbol(const std::string& file_name, const char* symbol, const std::string& what) {
  static std::mutex mutex;
  static std::map<std::string, void*> loaded;  // kept for the process's life: code runs from them
  const std::lock_guard lock(mutex);
  void*& handle = loaded[file_name];
  if (handle == nullptr) {
    std::vector<std::string> tried;
    for (const auto& directory : module_directories()) {
      const auto path = directory.lexically_normal() / file_name;
      std::error_code error;
      if (!std::filesystem::is_regular_file(path, error)) {
        tried.push_back(fmt::format("{} (no such file)", path.string()));
        continue;
      }
      // RTLD_GLOBAL: the NCCL module links the CUDA backend's, which must be this same copy.
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (handle != nullptr) break;
      const char* reason = ::dlerror();
      tried.push_back(fmt::format("{} ({})", path.string(), reason ? reason : "dlopen failed"));
    }
    if (handle == nullptr)
      throw Error(fmt::format("{} is in the module {}, which did not load: {}", what, file_name,
                              fmt::join(tried, "; ")));
  }
  ::dlerror();
  void* address = ::dlsym(handle, symbol);
  if (address == nullptr)
    throw Error(fmt::format("{}: the module {} has no {} (a module of another hardy build?)", what,
                            file_name, symbol));
  return address;
}

}  // namespace hardy::core
