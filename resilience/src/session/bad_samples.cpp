#include "session/bad_samples.hpp"

#include <fmt/format.h>

#include <span>

#include "hardy/comm/agreement.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

namespace {

// Every rank's bad samples of a step (collective; every rank gets all of them, as JSON records:
// sample, file, reason, rank, step).
std::vector<nlohmann::json> gather(comm::Communicator& comm,
                                   const std::vector<core::SkippedSample>& mine, long this_step) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& s : mine)
    records.push_back({{"sample", s.index},
                       {"file", s.file},
                       {"reason", s.reason},
                       {"rank", comm.rank()},
                       {"step", this_step}});
  std::string text = mine.empty() ? std::string() : records.dump();
  const auto lengths = comm.allgather(static_cast<std::int64_t>(text.size()));
  std::vector<nlohmann::json> all;
  for (int r = 0; r < comm.size(); ++r) {
    const auto length = static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]);
    if (length == 0) continue;
    std::string theirs = r == comm.rank() ? text : std::string(length, '\0');
    comm.broadcast(std::as_writable_bytes(std::span(theirs.data(), theirs.size())), r);
    for (auto& record : nlohmann::json::parse(theirs)) all.push_back(std::move(record));
  }
  return all;
}

}  // namespace

BadSamples::BadSamples(core::BadSamplePolicy policy, core::EventLog& events)
    : policy_(policy), events_(events) {}

void BadSamples::report(comm::Communicator& communicator,
                        const std::vector<core::SkippedSample>& mine, long step) {
  const auto bad = gather(communicator, mine, step);
  if (policy_ == core::BadSamplePolicy::fail && !bad.empty())
    throw comm::Agreed<InvalidArgument>(  // every rank learned of the sample above
        fmt::format("{}: {} (step {}; --bad-samples skip would leave such samples out)",
                    bad.front()["file"].get<std::string>(),
                    bad.front()["reason"].get<std::string>(), step));
  for (auto record : bad)
    if (skipped_.insert(record["sample"].get<std::size_t>()).second)
      events_.emit("sample_skipped", std::move(record));
}

}  // namespace hardy::resilience
