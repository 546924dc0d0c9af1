#pragma once
// The Python helpers of the commands that draw, convert or export (tools/*.py: never on the
// training path): where the helper is, and a Python that has the modules it needs.
#include <filesystem>
#include <string>
#include <vector>

namespace hardy::jobs {

// tools/<name> next to an installed hardy (PREFIX/bin/hardy, PREFIX/share/hardy/tools/<name>),
// else in the source tree this hardy was built from. InvalidArgument naming both when neither
// exists.
std::filesystem::path find_helper(const std::string& name);

// The first Python that imports every one of `modules`: $HARDY_PYTHON alone when set, else the
// checkout's .venv (for a hardy run from its build tree), python3 on PATH, and the system's
// /usr/bin/python3 (a PATH python3 of pyenv or conda often lacks matplotlib where the system's
// has it). `install` says how to get them, in the InvalidArgument thrown when none has them.
std::filesystem::path find_python(const std::filesystem::path& helper,
                                  const std::vector<std::string>& modules,
                                  const std::string& install);

// Runs `python helper args...`, passes its output on, and throws Error naming the helper when it
// fails.
void run_helper(const std::filesystem::path& python, const std::filesystem::path& helper,
                const std::vector<std::string>& args);

}  // namespace hardy::jobs
