#include "command_line.hpp"

#include <fmt/format.h>

#include <iostream>

#include "hardy/core/support/error.hpp"

namespace hardy::jobs {

bool parse_command_line(const std::vector<std::string>& args,
                        const boost::program_options::options_description& options,
                        const CommandLine& command, boost::program_options::variables_map& vm,
                        std::string_view help_epilogue) {
  namespace po = boost::program_options;
  try {
    po::command_line_parser parser(args);
    parser.options(options);
    if (command.positional != nullptr) parser.positional(*command.positional);
    po::store(parser.run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(fmt::format("{} (see {} --help)", e.what(), command.command));
  }
  if (!vm.count("help")) return true;
  std::cout << command.usage << "\n" << options << "\n" << help_epilogue;
  return false;
}

}  // namespace hardy::jobs
