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
    po::options_description parsed;
    parsed.add(options);
    if (command.hidden != nullptr) parsed.add(*command.hidden);
    po::command_line_parser parser(args);
    parser.options(parsed);
    if (command.positional != nullptr) parser.positional(*command.positional);
    po::store(parser.run(), vm);
    if (command.notify) po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(fmt::format("{} (see {} --help)", e.what(), command.command));
  }
  if (!vm.count("help")) return true;
  std::cout << command.usage << "\n" << options << "\n" << help_epilogue;
  return false;
}

const std::vector<CommandTable>& command_tables() {
  static const std::vector<CommandTable> tables = {
      {"train", train_options},
      {"run", run_options},
      {"simulate", simulate_options},
      {"eval", eval_options},
      {"data generate", data_generate_options},
      {"ckpt list", ckpt_list_options},
      {"ckpt inspect", ckpt_inspect_options},
      {"ckpt verify", ckpt_verify_options},
      {"ckpt diff", ckpt_diff_options},
      {"submit", submit_options},
      {"status", status_options},
      {"cancel", cancel_options},
      {"report", report_options},
      {"completion", completion_options},
  };
  return tables;
}

}  // namespace hardy::jobs
