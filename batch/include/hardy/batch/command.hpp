#pragma once
// Running a scheduler's command-line tools (sbatch, scontrol, bsub, bjobs, ...) directly, without
// a shell in between, so that no argument is ever re-parsed.
#include <string>
#include <string_view>
#include <vector>

namespace hardy::batch {

struct CommandResult {
  int status = 0;   // exit status, or 128 + the signal that killed it
  std::string out;  // everything it wrote to stdout
  std::string err;  // and to stderr
};

// Runs argv[0] (searched on PATH) with `input` on its standard input and waits for it. Throws Error
// when the program cannot be started, naming it ("sbatch: not found on PATH").
CommandResult run_command(const std::vector<std::string>& argv, std::string_view input = {});

// The first line of a command's stderr (or stdout when stderr is empty), for error messages.
std::string first_line(const CommandResult& result);

}  // namespace hardy::batch
