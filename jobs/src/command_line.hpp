#pragma once
// What every `hardy` command does with its command line: parse it against its options, turn a
// bad option into InvalidArgument (exit status 2) naming it and the command's --help, and print
// the usage text and the option table for --help.
#include <boost/program_options.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::jobs {

struct CommandLine {
  std::string_view command;  // "hardy eval", for "(see hardy eval --help)"
  std::string_view usage;    // printed above the option table for --help
  const boost::program_options::positional_options_description* positional = nullptr;
};

// Parses args into vm. Returns false when --help was asked for (the usage and options are
// printed then, with `help_epilogue` after them), true otherwise. `options` must declare --help.
bool parse_command_line(const std::vector<std::string>& args,
                        const boost::program_options::options_description& options,
                        const CommandLine& command, boost::program_options::variables_map& vm,
                        std::string_view help_epilogue = {});

}  // namespace hardy::jobs
