#pragma once
// What the parts of FaultDomains share (fault_domains.cpp: the step's lifecycle and the leader's
// decision; domain_membership.cpp: generations, regrouping and resync; domain_exchange.cpp: the
// collectives between domains, leader and sharded): time in the store's units, the decision the
// leader broadcasts in its domain, the packing of a step's tensors into one buffer.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <iterator>
#include <span>
#include <vector>

#include "hardy/core/compute/tensor.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience::fault_domains_internal {

using std::chrono::milliseconds;

inline milliseconds to_ms(double seconds) {
  return milliseconds(static_cast<long>(seconds * 1000.0));
}

enum Decision : int { kCommit = 0, kAbandon = 1, kHealed = 2, kRewind = 3 };

// The decision a leader broadcasts in its domain: verdict, loss, skipped, admit pending,
// generation, member count, members, ranks per member, the split's shares per member (all zero:
// by ranks).
struct SharedDecision {
  int verdict = kCommit;
  double loss = 0, skipped = 0;
  bool admit_pending = false;
  std::size_t generation = 0;
  std::vector<int> members, ranks;
  std::vector<double> shares;  // empty: by ranks

  std::vector<double> encode() const {
    std::vector<double> out{static_cast<double>(verdict),
                            loss,
                            skipped,
                            admit_pending ? 1.0 : 0.0,
                            static_cast<double>(generation),
                            static_cast<double>(members.size())};
    for (int m : members) out.push_back(m);
    for (int r : ranks) out.push_back(r);
    for (std::size_t i = 0; i < members.size(); ++i)
      out.push_back(shares.empty() ? 0.0 : shares.at(i));
    return out;
  }
  // The values a decision of a job of `domains` domains needs at most.
  static std::size_t room(std::size_t domains) { return 6 + 3 * domains; }
  static SharedDecision decode(const std::vector<double>& in) {
    SharedDecision d;
    d.verdict = static_cast<int>(in.at(0));
    d.loss = in.at(1);
    d.skipped = in.at(2);
    d.admit_pending = in.at(3) != 0;
    d.generation = static_cast<std::size_t>(in.at(4));
    const auto n = static_cast<std::size_t>(in.at(5));
    for (std::size_t i = 0; i < n; ++i) d.members.push_back(static_cast<int>(in.at(6 + i)));
    for (std::size_t i = 0; i < n; ++i) d.ranks.push_back(static_cast<int>(in.at(6 + n + i)));
    for (std::size_t i = 0; i < n; ++i) d.shares.push_back(in.at(6 + 2 * n + i));
    if (std::ranges::all_of(d.shares, [](double s) { return s == 0; })) d.shares.clear();
    return d;
  }
};

inline std::size_t values_in(std::span<core::Tensor* const> tensors) {
  std::size_t total = 0;
  for (const core::Tensor* tensor : tensors) total += tensor->f32().size();
  return total;
}

// Every tensor in one buffer, so that all of them cross the network in one collective; tensor i
// multiplied by weights[i] when there are weights.
inline std::vector<float> pack(std::span<core::Tensor* const> tensors,
                               std::span<const float> weights) {
  if (!weights.empty() && weights.size() != tensors.size())
    throw Error(
        fmt::format("FaultDomains: {} weights for {} tensors", weights.size(), tensors.size()));
  std::vector<float> flat;
  flat.reserve(values_in(tensors));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto values = tensors[i]->f32();
    const float weight = weights.empty() ? 1.0f : weights[i];
    if (weight == 1.0f) {
      flat.insert(flat.end(), values.begin(), values.end());
      continue;
    }
    for (const float v : values) flat.push_back(v * weight);
  }
  return flat;
}

// The exception being handled, as the outcome of a collective that never started.
inline std::future<void> failure_in_future() {
  std::promise<void> failed;
  failed.set_exception(std::current_exception());
  return failed.get_future();
}

// The members of `from` that `in` lacks (both ascending).
inline std::vector<int> missing_from(const std::vector<int>& from, const std::vector<int>& in) {
  std::vector<int> missing;
  std::ranges::set_difference(from, in, std::back_inserter(missing));
  return missing;
}

}  // namespace hardy::resilience::fault_domains_internal
