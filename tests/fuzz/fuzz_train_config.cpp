// The INI configuration file `hardy train --config FILE` reads (Boost.Program_options), the
// run directory's config.ini that a relaunch reads back, and the list options inside it. A bad
// file must give InvalidArgument naming the problem (exit status 2), never a crash or another
// exception escaping.
#include <cstdint>

#include "fuzz_support.hpp"
#include "hardy/jobs/train_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  fuzz::FuzzInput input(data, size);
  const std::string list = input.text(64);
  const std::string ini = input.rest();
  fuzz::accepts([&] { jobs::parse_int_list(list, "--aspp-rates"); });
  fuzz::accepts([&] { jobs::parse_float_list(list, "--class-weights"); });

  const auto config = fuzz::scratch_directory() / "config.ini";
  fuzz::write_file(config, ini);
  jobs::TrainSpec from_file;
  if (fuzz::accepts([&] { from_file = jobs::load_train_spec(config); })) {
    // An accepted file reads the same through the command line's --config.
    std::optional<jobs::TrainSpec> from_command_line;
    if (!fuzz::accepts([&] {
          from_command_line = jobs::parse_train_spec({"--config", config.string()});
        }))
      fuzz::broken_promise("--config rejects a file load_train_spec accepts");
  }
  return 0;
}
