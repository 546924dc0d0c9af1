#pragma once
// What every `hardy` command does with its command line: parse it against its options, turn a
// bad option into InvalidArgument (exit status 2) naming it and the command's --help, and print
// the usage text and the option table for --help.
//
// Each command declares its option table once, in a function below; the command parses with it,
// --help prints it, and `hardy completion bash` lists its options from the same table.
#include <boost/program_options.hpp>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hardy::jobs {

struct CommandLine {
  std::string_view command;  // "hardy eval", for "(see hardy eval --help)"
  std::string_view usage;    // printed above the option table for --help
  const boost::program_options::positional_options_description* positional = nullptr;
  // Parsed too but not printed by --help (the positional arguments' own names).
  const boost::program_options::options_description* hidden = nullptr;
  // false: the caller calls notify() itself (hardy train first merges its --config file).
  bool notify = true;
};

// Parses args into vm. Returns false when --help was asked for (the usage and options are
// printed then, with `help_epilogue` after them), true otherwise. `options` must declare --help.
// Boost.Program_options 1.74 loops forever formatting an error about text that holds one of
// its own message placeholders ("%value%", ...), so such text is refused before it reaches the
// parser: InvalidArgument naming `where`.
void reject_option_placeholders(std::string_view text, std::string_view where);

bool parse_command_line(const std::vector<std::string>& args,
                        const boost::program_options::options_description& options,
                        const CommandLine& command, boost::program_options::variables_map& vm,
                        std::string_view help_epilogue = {});

// The splits a data command's --split names: train, validation or test, or `all` of them that
// `root` holds as directories. InvalidArgument for any other value.
std::vector<std::string> chosen_splits(const std::filesystem::path& root, const std::string& split);

// The option tables, one per command (each declares --help).
boost::program_options::options_description train_options();          // train_options.cpp
boost::program_options::options_description run_options();            // run_command.cpp
boost::program_options::options_description simulate_options();       // simulate_command.cpp
boost::program_options::options_description eval_options();           // eval_command.cpp
boost::program_options::options_description data_generate_options();  // data_command.cpp
boost::program_options::options_description data_stage_options();     // stage_command.cpp
boost::program_options::options_description data_stats_options();     // data_command.cpp
boost::program_options::options_description data_pack_options();      // pack_command.cpp
boost::program_options::options_description ckpt_list_options();      // ckpt_command.cpp
boost::program_options::options_description ckpt_inspect_options();
boost::program_options::options_description ckpt_verify_options();
boost::program_options::options_description ckpt_diff_options();
boost::program_options::options_description ckpt_convert_options();
boost::program_options::options_description submit_options();      // submit_command.cpp
boost::program_options::options_description status_options();      // status_command.cpp
boost::program_options::options_description cancel_options();      // cancel_command.cpp
boost::program_options::options_description clean_options();       // clean_command.cpp
boost::program_options::options_description report_options();      // report_command.cpp
boost::program_options::options_description export_options();      // export_command.cpp
boost::program_options::options_description completion_options();  // completion_command.cpp
boost::program_options::options_description events_options();      // events_command.cpp

// Every command with its option table, in the order `hardy --help` lists them; a command with
// subcommands has one entry per subcommand ("ckpt inspect").
// hardy train's default for a string `option`, read from its option table, so that a command
// that must agree with it (--snapshot-dir) never differs.
std::string train_default(const std::string& option);

struct CommandTable {
  std::string name;  // "eval", "ckpt inspect"
  boost::program_options::options_description (*options)();
};
const std::vector<CommandTable>& command_tables();

}  // namespace hardy::jobs
