#include "hardy/comm/agreement.hpp"

#include <exception>
#include <string>

namespace hardy::comm {

namespace {

// The agreed message travels with its kind in front: 'B' bad input, 'E' anything else.
constexpr char kBadInput = 'B';
constexpr char kOtherError = 'E';

}  // namespace

void agree_on_outcome(Communicator& comm, bool runs_here, const std::function<void()>& step) {
  std::string failure;  // kind + message; empty when the step succeeded or did not run here
  if (runs_here) {
    try {
      step();
    } catch (const InvalidArgument& e) {
      failure = kBadInput + std::string(e.what());
    } catch (const std::exception& e) {
      failure = kOtherError + std::string(e.what());
    }
  }
  const std::int64_t none = comm.size();
  const auto first_failed = allreduce(
      comm, failure.empty() ? none : static_cast<std::int64_t>(comm.rank()), ReduceOp::min);
  if (first_failed == none) return;
  const std::string agreed = broadcast_text(comm, failure, static_cast<int>(first_failed));
  const std::string message = agreed.substr(1);
  if (agreed.front() == kBadInput) throw Agreed<InvalidArgument>(message);
  throw Agreed<Error>(message);
}

}  // namespace hardy::comm
