// The run directory's logs read back: the supervisor judges each launch from events.jsonl and
// metrics.jsonl (read_launch_events), `hardy status` summarises them. The files are written by
// jobs that may have crashed mid-line, by older or newer hardy versions, or edited by hand, so
// the supervisor must never fail on them (its documented promise: empty fields, not errors) and
// `hardy status` may only refuse with a clear error.
#include <cstdint>
#include <cstdio>

#include "fuzz_support.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/resilience/relaunch_plan.hpp"
#include "run_progress.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hardy;
  static const bool quiet = std::freopen("/dev/null", "w", stdout) != nullptr;  // status prints
  (void)quiet;
  fuzz::FuzzInput input(data, size);
  const std::uintmax_t offset = input.pick(0, 64);
  const int ranks_per_node = static_cast<int>(input.pick(1, 8));
  const int exit_status = static_cast<int>(input.pick(0, 5));
  const std::string both = input.rest();
  const std::size_t split = std::min(both.find('\0'), both.size());

  const auto run_dir = fuzz::scratch_directory() / "run";
  std::filesystem::create_directories(run_dir);
  fuzz::write_file(run_dir / "events.jsonl", std::string_view(both).substr(0, split));
  fuzz::write_file(run_dir / "metrics.jsonl",
                   split < both.size() ? std::string_view(both).substr(split + 1) : "");

  // No exception of any kind: the supervisor decides on whatever it can read.
  const auto events = resilience::read_launch_events(run_dir, offset, 0.0, ranks_per_node);
  resilience::judge_launch(exit_status, events);
  jobs::read_run_progress(run_dir);
  jobs::read_records(run_dir / "events.jsonl");
  jobs::last_record(run_dir / "metrics.jsonl");

  fuzz::accepts([&] { jobs::status_command({run_dir.string(), "--json"}); });
  fuzz::accepts([&] { jobs::status_command({run_dir.string()}); });
  return 0;
}
