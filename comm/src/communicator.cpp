// The helpers that every Communicator gets from its collectives.
#include "hardy/comm/communicator.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <thread>

#include "hardy/comm/self_communicator.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::comm {

std::int64_t allreduce(Communicator& comm, std::int64_t value, ReduceOp op) {
  comm.allreduce(std::span(&value, 1), op);
  return value;
}

bool all_equal(Communicator& comm, std::int64_t value) {
  // ~x = -x - 1 reverses the order of all 64-bit values without overflow, so the minimum of ~x
  // is ~(the maximum of x): both bounds from one reduction.
  std::int64_t bounds[2] = {value, ~value};
  comm.allreduce(std::span(bounds), ReduceOp::min);
  return bounds[0] == value && ~bounds[1] == value;
}

std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  const bool sender = comm.rank() == root;
  const auto length = static_cast<std::size_t>(
      allreduce(comm, sender ? static_cast<std::int64_t>(text.size()) : 0, ReduceOp::max));
  std::string received = sender ? text : std::string(length, '\0');
  comm.broadcast(std::as_writable_bytes(std::span(received.data(), received.size())), root);
  return received;
}

std::vector<int> ranks_lost(const std::vector<int>& old_ranks, int old_size) {
  std::vector<int> lost;
  for (int r = 0; r < old_size; ++r)
    if (!std::binary_search(old_ranks.begin(), old_ranks.end(), r)) lost.push_back(r);
  return lost;
}

namespace {

class CompletedRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
  bool done() const override { return true; }
};

}  // namespace

std::unique_ptr<Request> completed_request() { return std::make_unique<CompletedRequest>(); }

std::unique_ptr<Request> Communicator::ireduce_sum(std::span<float> data, int) {
  return iallreduce_sum(data);
}

std::unique_ptr<Request> Communicator::ibroadcast(std::span<std::byte> data, int root) {
  broadcast(data, root);
  return completed_request();
}

std::unique_ptr<Request> Communicator::iallgather_blocks(std::span<const std::byte> mine,
                                                         std::span<std::byte> all) {
  if (all.size() != mine.size() * static_cast<std::size_t>(size()))
    throw InvalidArgument(fmt::format("allgather: {} bytes cannot hold {} blocks of {}", all.size(),
                                      size(), mine.size()));
  for (int r = 0; r < size(); ++r) {
    const auto block = all.subspan(static_cast<std::size_t>(r) * mine.size(), mine.size());
    if (r == rank()) std::copy(mine.begin(), mine.end(), block.begin());
    broadcast(block, r);
  }
  return completed_request();
}

void wait_yielding(Request& request, std::chrono::microseconds pause) {
  while (!request.test()) std::this_thread::sleep_for(pause);
}

std::unique_ptr<Request> SelfCommunicator::iallreduce_sum(std::span<float>) {
  return completed_request();
}

void SelfCommunicator::broadcast(std::span<std::byte>, int root) {
  if (root != 0)
    throw InvalidArgument("broadcast: root " + std::to_string(root) +
                          " is not a rank of a one-rank communicator");
}

std::vector<std::string> SelfCommunicator::hostnames() { return {core::host_name()}; }

void SelfCommunicator::revoke() {
  throw Error("revoke: a one-rank communicator has no fault tolerance");
}

std::unique_ptr<Communicator> SelfCommunicator::split(int color, int /*key*/) {
  if (color < 0) return nullptr;
  return std::make_unique<SelfCommunicator>();
}

Survivors SelfCommunicator::shrink() {
  throw Error("shrink: a one-rank communicator has no fault tolerance");
}

}  // namespace hardy::comm
