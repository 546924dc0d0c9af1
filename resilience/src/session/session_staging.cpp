#include "session/session_staging.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <numeric>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/data/sample_cache.hpp"
#include "hardy/core/data/sample_files.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/support/process_info.hpp"
#include "session/loop_state.hpp"

namespace hardy::resilience {

SessionStaging::SessionStaging(const TrainingConfig& config, const Membership& membership,
                               const FaultDomains& domains, core::EventLog& events)
    : config_(config), membership_(membership), domains_(domains), events_(events) {}

void SessionStaging::start(core::SampleSource& storage, const std::string& launch) {
  if (config_.stage_to.empty()) return;
  auto* dataset = dynamic_cast<core::SampleFiles*>(&core::uncached(storage));
  if (dataset == nullptr)
    throw InvalidArgument(fmt::format(
        "--stage-to needs a dataset of one file per sample (the DeepCAM, ClimateNet or CosmoFlow "
        "layout, or packed); {} is not",
        storage.describe()));
  staging_ = std::make_shared<NodeStaging>(config_.stage_to, config_.data.dataset, dataset->files(),
                                           membership_.host(), launch, config_.stage_threads);
  restage(/*wait=*/true, "job start");
  // From now on loads read a node's own copies; files it does not hold come from the source.
  read_through(*dataset, staging_);
}

void SessionStaging::restage(bool wait, const std::string& reason) {
  if (!staging_) return;
  const auto started = Clock::now();
  // Homes go to nodes (in --ranks-per-node terms), named by host, so that they stay put across
  // relaunches on the same hosts; the lowest rank of each node copies.
  std::vector<std::string> nodes;
  for (int r = 0; r < membership_.comm().size(); ++r) nodes.push_back(membership_.node_name_of(r));
  const bool copier = std::find(nodes.begin(), nodes.end(),
                                nodes[static_cast<std::size_t>(membership_.comm().rank())]) -
                          nodes.begin() ==
                      membership_.comm().rank();
  const bool show_progress = membership_.lead() && wait;
  NodeStagingPlan plan;
  std::string failure;
  try {
    plan = staging_->plan(
        nodes, membership_.comm().rank(), copier, wait, [&](const core::StageProgress& p) {
          if (!show_progress) return;
          std::cout << fmt::format(
                           "hardy: staging to {}: {}/{} files of this node, {:.2f} GB copied, "
                           "{:.2f} GB/s\n",
                           staging_->directory().string(), p.files_done, p.files_total,
                           static_cast<double>(p.bytes_copied) / 1e9,
                           p.seconds > 0 ? static_cast<double>(p.bytes_copied) / p.seconds / 1e9
                                         : 0.0)
                    << std::flush;
        });
  } catch (const core::UnsafeDirectory& e) {
    // Another user could change that tree: nothing is written there, and nothing read from it
    // (locate() hands out only copies this job made or verified).
    failure = e.what();
    events_.emit("staging_refused", {{"host", membership_.host()},
                                     {"directory", config_.stage_to.string()},
                                     {"reason", failure}});
    std::cerr << fmt::format(
        "hardy: refusing the staging tree {} on {}, reading from the source instead: {}\n",
        config_.stage_to.string(), membership_.host(), failure);
  } catch (const IoError& e) {
    // A full or missing local disk costs speed, not the job: what is not staged is read from
    // the source.
    failure = e.what();
    std::cerr << fmt::format("hardy: staging on {} failed, reading from the source instead: {}\n",
                             membership_.host(), failure);
  }
  if (!wait) {
    // Each node fetches in the background what moved to it; until then its ranks read those
    // files from the source.
    events_.emit("data_restaging", {{"reason", reason},
                                    {"files_moved", plan.moved},
                                    {"world_size", membership_.comm().size()},
                                    {"directory", staging_->directory().string()}});
    return;
  }
  if (comm::allreduce(membership_.comm(), failure.empty() ? 0 : 1, comm::ReduceOp::max) == 1)
    events_.emit("data_staging_failed", {{"reason", reason},
                                         {"lead_error", failure},
                                         {"directory", staging_->directory().string()}});
  // Every node's figures to the lead (the copies above were each node's own).
  const auto& report = staging_->last_report();
  const auto copied = membership_.comm().allgather(static_cast<std::int64_t>(report.copied));
  const auto current = membership_.comm().allgather(static_cast<std::int64_t>(report.current));
  const auto bytes = membership_.comm().allgather(static_cast<std::int64_t>(report.bytes_copied));
  const auto homed =
      membership_.comm().allgather(static_cast<std::int64_t>(copier ? plan.homed_here : 0));
  const auto sum = [](const std::vector<std::int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::int64_t{0});
  };
  const double seconds = core::seconds_since(started);
  nlohmann::json per_node = nlohmann::json::array();
  for (int r = 0; r < membership_.comm().size(); ++r)
    if (homed[static_cast<std::size_t>(r)] > 0)
      per_node.push_back({{"node", nodes[static_cast<std::size_t>(r)]},
                          {"files", homed[static_cast<std::size_t>(r)]},
                          {"copied", copied[static_cast<std::size_t>(r)]},
                          {"bytes", bytes[static_cast<std::size_t>(r)]}});
  events_.emit("data_staged", {{"reason", reason},
                               {"directory", staging_->directory().string()},
                               {"files", sum(homed)},
                               {"copied", sum(copied)},
                               {"already_current", sum(current)},
                               {"bytes", sum(bytes)},
                               {"seconds", seconds},
                               {"gb_per_s", static_cast<double>(sum(bytes)) / 1e9 / seconds},
                               {"nodes", per_node}});
  if (membership_.lead())
    std::cout << fmt::format(
        "hardy: staged {} files on {} node(s) in {:.1f} s: {} copied ({:.2f} GB, {:.2f} GB/s "
        "in all), {} already current\n",
        sum(homed), per_node.size(), seconds, sum(copied), static_cast<double>(sum(bytes)) / 1e9,
        static_cast<double>(sum(bytes)) / 1e9 / seconds, sum(current));
}

std::vector<std::size_t> SessionStaging::local_samples(const core::GlobalBatch& batch) const {
  const std::span<const double> weights =
      weights_.size() == static_cast<std::size_t>(membership_.comm().size())
          ? std::span<const double>(weights_)
          : std::span<const double>();  // set for another membership: even shares
  if (staging_) {
    // With fault domains each domain stages the whole dataset over its own nodes (as MLPerf HPC
    // DeepCAM's instances do), so a lost domain moves no other domain's files; its slice of the
    // batch is placed among its own ranks. Without domains the slice is the whole batch.
    const core::Shard slice = domains_.my_domain_slice(batch.samples.size());
    const std::span<const std::size_t> part(batch.samples.data() + slice.begin, slice.size());
    std::vector<std::size_t> mine;
    for (std::size_t position : staging_->local_positions(part, membership_.comm().rank(), weights))
      mine.push_back(part[position]);
    return mine;
  }
  const auto shard = domains_.my_slice(batch.samples.size(), weights);
  const auto first = batch.samples.begin() + static_cast<std::ptrdiff_t>(shard.begin);
  return {first, first + static_cast<std::ptrdiff_t>(shard.size())};
}

}  // namespace hardy::resilience
