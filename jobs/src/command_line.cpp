#include "command_line.hpp"

#include <fmt/format.h>

#include <iostream>

#include "hardy/core/support/error.hpp"

namespace hardy::jobs {

void reject_option_placeholders(std::string_view text, std::string_view where) {
  for (const std::string_view token :
       {"%canonical_option%", "%value%", "%prefix_option%", "%option%", "%original_token%"})
    if (text.find(token) != std::string_view::npos)
      throw InvalidArgument(fmt::format(
          "{} contains '{}', which hardy does not accept in an option or value (its option "
          "parser, Boost.Program_options, hangs when it reports an error about such text)",
          where, token));
}

bool parse_command_line(const std::vector<std::string>& args,
                        const boost::program_options::options_description& options,
                        const CommandLine& command, boost::program_options::variables_map& vm,
                        std::string_view help_epilogue) {
  namespace po = boost::program_options;
  for (const auto& arg : args) reject_option_placeholders(arg, fmt::format("argument '{}'", arg));
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

std::string train_default(const std::string& option) {
  boost::any value;
  train_options().find(option, false).semantic()->apply_default(value);
  return boost::any_cast<std::string>(value);
}

std::vector<std::string> chosen_splits(const std::filesystem::path& root,
                                       const std::string& split) {
  std::vector<std::string> splits;
  if (split == "all") {
    for (const char* name : {"train", "validation", "test"})
      if (std::filesystem::is_directory(root / name)) splits.emplace_back(name);
  } else if (split == "train" || split == "validation" || split == "test") {
    splits.push_back(split);
  } else {
    throw InvalidArgument(
        fmt::format("--split must be train, validation, test or all, not '{}'", split));
  }
  return splits;
}

const std::vector<CommandTable>& command_tables() {
  static const std::vector<CommandTable> tables = {
      {"train", train_options},
      {"run", run_options},
      {"simulate", simulate_options},
      {"eval", eval_options},
      {"data generate", data_generate_options},
      {"data stage", data_stage_options},
      {"data stats", data_stats_options},
      {"data pack", data_pack_options},
      {"ckpt list", ckpt_list_options},
      {"ckpt inspect", ckpt_inspect_options},
      {"ckpt verify", ckpt_verify_options},
      {"ckpt diff", ckpt_diff_options},
      {"ckpt convert", ckpt_convert_options},
      {"submit", submit_options},
      {"status", status_options},
      {"cancel", cancel_options},
      {"clean", clean_options},
      {"report", report_options},
      {"export", export_options},
      {"completion", completion_options},
      {"events", events_options},
  };
  return tables;
}

}  // namespace hardy::jobs
