#include "in_process_world.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::testing {

namespace {

// One collective, agreement or shrink, as the ranks of a communicator meet in it.
struct Operation {
  std::string kind;  // what the first rank to arrive called; the others must call the same
  std::map<int, std::vector<std::byte>> contributions;  // by rank in the communicator
  std::vector<int> unaware;                             // world ranks that ignore a death in it
  std::string mismatch;  // set when two ranks called different things
  bool complete = false;
  std::vector<int> died_in_it;  // contributors already dead when the last contribution came
  std::vector<std::byte> result;
  int agreed = 0;
  struct Group* shrunk = nullptr;
};

struct Group {
  int id = 0;
  std::vector<int> members;  // world ranks, by rank in this communicator
  bool revoked = false;
  std::map<long, Operation> collectives, agreements;  // by sequence number
  std::map<std::pair<long, int>, Group*> splits;      // by split's sequence number and color
};

template <class T>
std::vector<std::byte> bytes_of(std::span<const T> values) {
  std::vector<std::byte> bytes(values.size_bytes());
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <class T>
void reduce_into(std::vector<std::byte>& total, const std::vector<std::byte>& more,
                 comm::ReduceOp op) {
  auto* out = reinterpret_cast<T*>(total.data());
  const auto* in = reinterpret_cast<const T*>(more.data());
  for (std::size_t i = 0; i < total.size() / sizeof(T); ++i)
    out[i] = op == comm::ReduceOp::sum   ? out[i] + in[i]
             : op == comm::ReduceOp::min ? std::min(out[i], in[i])
                                         : std::max(out[i], in[i]);
}

}  // namespace

struct InProcessWorld::Shared {
  int size;
  int ranks_per_node;
  bool fault_tolerant;
  std::chrono::milliseconds* timeout;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::vector<bool> dead;
  std::vector<long> calls;
  std::vector<PlannedDeath> plans;
  std::vector<long> plan_calls;  // calls counted for each plan
  std::vector<std::unique_ptr<Group>> groups;
  std::function<void(int, std::span<std::byte>)> on_broadcast;

  Group* new_group(std::vector<int> members) {
    groups.push_back(std::make_unique<Group>());
    groups.back()->id = static_cast<int>(groups.size()) - 1;
    groups.back()->members = std::move(members);
    return groups.back().get();
  }

  void die(int world_rank) {
    dead[static_cast<std::size_t>(world_rank)] = true;
    changed.notify_all();
  }

  // Counts the call and carries out a death planned at it. Returns the plan when the victim is
  // to contribute first (the caller then dies after depositing).
  std::optional<PlannedDeath> enter(int me, const std::string& kind) {
    if (dead[static_cast<std::size_t>(me)]) throw RankDied{me};
    ++calls[static_cast<std::size_t>(me)];
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const PlannedDeath& plan = plans[i];
      if (plan.victim != me || kind.rfind(plan.kind, 0) != 0) continue;
      if (++plan_calls[i] != plan.at_call) continue;
      if (plan.after_contributing) return plan;
      die(me);
      throw RankDied{me};
    }
    return std::nullopt;
  }

  std::unique_lock<std::mutex> lock() const { return std::unique_lock(mutex); }

  [[noreturn]] void deadlock(int me, const Group& group, const std::string& what, long seq,
                             const Operation& op) {
    std::vector<int> waiting_for;
    for (std::size_t r = 0; r < group.members.size(); ++r)
      if (!op.contributions.count(static_cast<int>(r)) &&
          !dead[static_cast<std::size_t>(group.members[r])])
        waiting_for.push_back(group.members[r]);
    throw Error(
        fmt::format("in-process world: rank {} waited {} ms in {} #{} on communicator {} "
                    "for world ranks {}: a protocol deadlock",
                    me, timeout->count(), what, seq, group.id, waiting_for));
  }
};

namespace {

using Shared = InProcessWorld::Shared;

class InProcessCommunicator final : public comm::Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Shared> shared, Group* group, int world_rank)
      : shared_(std::move(shared)), group_(group), me_(world_rank) {
    const auto& m = group_->members;
    rank_ = static_cast<int>(std::find(m.begin(), m.end(), me_) - m.begin());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->members.size()); }

  void allreduce_sum(std::span<float> data) override { reduce(data, comm::ReduceOp::sum, "f32"); }
  void allreduce_sum(std::span<double> data) override { reduce(data, comm::ReduceOp::sum, "f64"); }
  void allreduce(std::span<std::int64_t> data, comm::ReduceOp op) override {
    reduce(data, op, "i64");
  }
  std::vector<std::int64_t> allgather(std::int64_t value) override {
    const auto result =
        collective("allgather i64", bytes_of(std::span<const std::int64_t>(&value, 1)));
    std::vector<std::int64_t> all(result.size() / sizeof(std::int64_t));
    std::memcpy(all.data(), result.data(), result.size());
    return all;
  }
  std::unique_ptr<comm::Request> iallreduce_sum(std::span<float> data) override;
  void broadcast(std::span<std::byte> data, int root) override {
    if (root < 0 || root >= size()) throw Error(fmt::format("broadcast: no root {}", root));
    auto mine =
        rank_ == root ? std::vector<std::byte>(data.begin(), data.end()) : std::vector<std::byte>{};
    const auto result = collective(fmt::format("broadcast of {} bytes from {}", data.size(), root),
                                   std::move(mine));
    if (rank_ == root) return;
    std::memcpy(data.data(), result.data(), data.size());
    auto lock = shared_->lock();
    auto hook = shared_->on_broadcast;
    lock.unlock();
    if (hook) hook(me_, data);
  }
  void barrier() override { collective("barrier", {}); }
  std::unique_ptr<comm::Communicator> split(int color, int key) override {
    const std::int64_t mine[2] = {color, key};
    const long seq = deposit("split", bytes_of(std::span<const std::int64_t>(mine, 2)));
    const auto result = *finish(seq, "split", true);
    if (color < 0) return nullptr;
    std::vector<std::int64_t> all(result.size() / sizeof(std::int64_t));
    std::memcpy(all.data(), result.data(), result.size());
    std::vector<std::pair<std::int64_t, int>> joining;  // (key, rank here)
    for (std::size_t r = 0; r < all.size() / 2; ++r)
      if (all[2 * r] == color) joining.emplace_back(all[2 * r + 1], static_cast<int>(r));
    std::sort(joining.begin(), joining.end());
    std::vector<int> members;
    for (const auto& [k, r] : joining)
      members.push_back(group_->members[static_cast<std::size_t>(r)]);
    auto lock = shared_->lock();
    Group*& made = group_->splits[{seq, color}];
    if (made == nullptr) made = shared_->new_group(std::move(members));
    return std::make_unique<InProcessCommunicator>(shared_, made, me_);
  }
  std::vector<std::string> hostnames() override {
    const auto nodes = allgather(me_ / shared_->ranks_per_node);
    std::vector<std::string> names;
    for (auto node : nodes) names.push_back(fmt::format("node{}", node));
    return names;
  }

  bool fault_tolerant() const override { return shared_->fault_tolerant; }
  void revoke() override {
    require_fault_tolerance("revoke");
    auto lock = shared_->lock();
    group_->revoked = true;
    shared_->changed.notify_all();
  }
  int agree(int flag) override {
    if (!shared_->fault_tolerant) {  // a plain collective, as MpiCommunicator's allreduce
      int result = ~0;
      for (std::int64_t value : allgather(flag)) result &= static_cast<int>(value);
      return result;
    }
    return agreement("agree", flag).agreed;
  }
  std::vector<int> failed_ranks() override {
    auto lock = shared_->lock();
    std::vector<int> failed;
    for (std::size_t r = 0; r < group_->members.size(); ++r)
      if (shared_->dead[static_cast<std::size_t>(group_->members[r])])
        failed.push_back(static_cast<int>(r));
    return failed;
  }
  comm::Survivors shrink() override {
    require_fault_tolerance("shrink");
    Group* shrunk = agreement("shrink", 0).shrunk;
    comm::Survivors survivors{std::make_unique<InProcessCommunicator>(shared_, shrunk, me_), {}};
    for (int member : shrunk->members) {
      const auto& old = group_->members;
      survivors.old_ranks.push_back(
          static_cast<int>(std::find(old.begin(), old.end(), member) - old.begin()));
    }
    return survivors;
  }

  // Deposits this rank's contribution to the next collective slot; returns its sequence number.
  long deposit(const std::string& kind, std::vector<std::byte> mine) {
    auto lock = shared_->lock();
    const auto dying = shared_->enter(me_, kind);
    const long seq = ++collective_seq_;
    if (group_->revoked) throw comm::ProcessFailure(kind + ": the communicator was revoked");
    Operation& op = group_->collectives[seq];
    match(op, kind, seq, "collective");
    op.contributions[rank_] = std::move(mine);
    if (dying) {
      op.unaware = dying->unaware;
      shared_->die(me_);
      throw RankDied{me_};
    }
    shared_->changed.notify_all();
    return seq;
  }

  // Waits for collective `seq` to end: its result, or ProcessFailure. With `block` false,
  // returns nullopt while it is still pending.
  std::optional<std::vector<std::byte>> finish(long seq, const std::string& kind, bool block) {
    auto lock = shared_->lock();
    Operation& op = group_->collectives[seq];
    const auto deadline = std::chrono::steady_clock::now() + *shared_->timeout;
    for (;;) {
      if (shared_->dead[static_cast<std::size_t>(me_)]) throw RankDied{me_};
      if (!op.mismatch.empty()) throw Error(op.mismatch);
      std::vector<int> dead_missing, dead_contributors;
      bool all_in = true;
      for (std::size_t r = 0; r < group_->members.size(); ++r) {
        const bool in = op.contributions.count(static_cast<int>(r)) > 0;
        const bool dead = shared_->dead[static_cast<std::size_t>(group_->members[r])];
        all_in = all_in && in;
        if (dead) (in ? dead_contributors : dead_missing).push_back(static_cast<int>(r));
      }
      if (all_in && !op.complete) {
        op.died_in_it = dead_contributors;
        combine(op);
      }
      if (op.complete) {
        const auto& unaware = op.unaware;
        if (!op.died_in_it.empty() &&
            std::find(unaware.begin(), unaware.end(), me_) == unaware.end())
          throw comm::ProcessFailure(
              fmt::format("{}: peer(s) {} died during it", kind, op.died_in_it), op.died_in_it);
        return op.result;
      }
      if (!dead_missing.empty())
        throw comm::ProcessFailure(fmt::format("{}: peer(s) {} failed", kind, dead_missing),
                                   dead_missing);
      if (group_->revoked) throw comm::ProcessFailure(kind + ": the communicator was revoked");
      if (!block) return std::nullopt;
      if (shared_->changed.wait_until(lock, deadline) == std::cv_status::timeout)
        shared_->deadlock(me_, *group_, kind, seq, op);
    }
  }

 private:
  template <class T>
  void reduce(std::span<T> data, comm::ReduceOp op, const char* type) {
    const char* name = op == comm::ReduceOp::sum   ? "sum"
                       : op == comm::ReduceOp::min ? "min"
                                                   : "max";
    const auto result = collective(fmt::format("allreduce {} {} x{}", type, name, data.size()),
                                   bytes_of(std::span<const T>(data)));
    std::memcpy(data.data(), result.data(), data.size_bytes());
  }

  std::vector<std::byte> collective(const std::string& kind, std::vector<std::byte> mine) {
    const long seq = deposit(kind, std::move(mine));
    return *finish(seq, kind, true);
  }

  void match(Operation& op, const std::string& kind, long seq, const char* slot) {
    if (op.kind.empty()) op.kind = kind;
    if (op.kind == kind && op.mismatch.empty()) return;
    if (op.mismatch.empty())
      op.mismatch = fmt::format(
          "in-process world: mismatched {} #{} on communicator {}: rank {} "
          "called {} where another rank called {}",
          slot, seq, group_->id, me_, kind, op.kind);
    shared_->changed.notify_all();
    throw Error(op.mismatch);
  }

  void combine(Operation& op) {
    op.complete = true;
    const std::string& kind = op.kind;
    if (kind.rfind("broadcast", 0) == 0) {
      for (auto& [rank, bytes] : op.contributions)
        if (!bytes.empty() || op.result.empty()) op.result = bytes;
      return;
    }
    if (kind == "barrier") return;
    if (kind == "allgather i64" || kind == "split") {
      for (auto& [rank, bytes] : op.contributions)
        op.result.insert(op.result.end(), bytes.begin(), bytes.end());
      return;
    }
    const comm::ReduceOp reduce_op = kind.find(" min ") != std::string::npos ? comm::ReduceOp::min
                                     : kind.find(" max ") != std::string::npos
                                         ? comm::ReduceOp::max
                                         : comm::ReduceOp::sum;
    op.result = op.contributions.begin()->second;
    for (auto it = std::next(op.contributions.begin()); it != op.contributions.end(); ++it) {
      if (kind.find("f32") != std::string::npos)
        reduce_into<float>(op.result, it->second, reduce_op);
      else if (kind.find("f64") != std::string::npos)
        reduce_into<double>(op.result, it->second, reduce_op);
      else
        reduce_into<std::int64_t>(op.result, it->second, reduce_op);
    }
  }

  // agree() and shrink(): among the living, whatever the revocation state.
  Operation& agreement(const std::string& kind, int flag) {
    auto lock = shared_->lock();
    const auto dying = shared_->enter(me_, kind);
    const long seq = ++agreement_seq_;
    Operation& op = group_->agreements[seq];
    match(op, kind, seq, "agreement");
    op.agreed = flag;
    op.contributions[rank_] = bytes_of(std::span<const int>(&flag, 1));
    if (dying) {
      shared_->die(me_);
      throw RankDied{me_};
    }
    shared_->changed.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + *shared_->timeout;
    for (;;) {
      if (!op.mismatch.empty()) throw Error(op.mismatch);
      if (op.complete) return op;
      bool all_in = true;
      for (std::size_t r = 0; r < group_->members.size(); ++r)
        all_in = all_in && (op.contributions.count(static_cast<int>(r)) ||
                            shared_->dead[static_cast<std::size_t>(group_->members[r])]);
      if (all_in) {
        op.complete = true;
        int result = ~0;
        std::vector<int> living;
        for (std::size_t r = 0; r < group_->members.size(); ++r) {
          const int member = group_->members[r];
          if (shared_->dead[static_cast<std::size_t>(member)]) continue;
          living.push_back(member);
          int value = 0;
          std::memcpy(&value, op.contributions[static_cast<int>(r)].data(), sizeof value);
          result &= value;
        }
        op.agreed = result;
        if (kind == "shrink") op.shrunk = shared_->new_group(living);
        shared_->changed.notify_all();
        return op;
      }
      if (shared_->changed.wait_until(lock, deadline) == std::cv_status::timeout)
        shared_->deadlock(me_, *group_, kind, seq, op);
    }
  }

  void require_fault_tolerance(const char* what) const {
    if (!shared_->fault_tolerant)
      throw Error(fmt::format("{}: this in-process world is not fault tolerant", what));
  }

  std::shared_ptr<Shared> shared_;
  Group* group_;
  int me_;
  int rank_ = 0;
  long collective_seq_ = 0, agreement_seq_ = 0;
};

class InProcessRequest final : public comm::Request {
 public:
  InProcessRequest(InProcessCommunicator& comm, long seq, std::string kind, std::span<float> data)
      : comm_(comm), seq_(seq), kind_(std::move(kind)), data_(data) {}
  void wait() override { complete(comm_.finish(seq_, kind_, true)); }
  bool test() override {
    if (!done_) complete(comm_.finish(seq_, kind_, false));
    return done_;
  }
  bool done() const override { return done_; }

 private:
  void complete(std::optional<std::vector<std::byte>> result) {
    if (done_ || !result) return;
    std::memcpy(data_.data(), result->data(), data_.size_bytes());
    done_ = true;
  }
  InProcessCommunicator& comm_;
  long seq_;
  std::string kind_;
  std::span<float> data_;
  bool done_ = false;
};

std::unique_ptr<comm::Request> InProcessCommunicator::iallreduce_sum(std::span<float> data) {
  const std::string kind = fmt::format("allreduce f32 sum x{}", data.size());
  const long seq = deposit(kind, bytes_of(std::span<const float>(data)));
  return std::make_unique<InProcessRequest>(*this, seq, kind, data);
}

}  // namespace

InProcessWorld::InProcessWorld(int size, int ranks_per_node, bool fault_tolerant)
    : shared_(std::make_shared<Shared>()) {
  shared_->size = size;
  shared_->ranks_per_node = std::max(1, ranks_per_node);
  shared_->fault_tolerant = fault_tolerant;
  shared_->timeout = &deadlock_timeout;
  shared_->dead.assign(static_cast<std::size_t>(size), false);
  shared_->calls.assign(static_cast<std::size_t>(size), 0);
  std::vector<int> everyone(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) everyone[static_cast<std::size_t>(r)] = r;
  shared_->new_group(everyone);
}

InProcessWorld::~InProcessWorld() = default;

int InProcessWorld::size() const { return shared_->size; }

void InProcessWorld::plan(PlannedDeath death) {
  auto lock = shared_->lock();
  shared_->plans.push_back(std::move(death));
  shared_->plan_calls.push_back(0);
}

void InProcessWorld::on_broadcast_received(std::function<void(int, std::span<std::byte>)> hook) {
  auto lock = shared_->lock();
  shared_->on_broadcast = std::move(hook);
}

long InProcessWorld::calls(int world_rank) const {
  auto lock = shared_->lock();
  return shared_->calls[static_cast<std::size_t>(world_rank)];
}

std::vector<std::exception_ptr> InProcessWorld::run(
    const std::function<void(std::unique_ptr<comm::Communicator>)>& body) {
  std::vector<std::exception_ptr> outcomes(static_cast<std::size_t>(shared_->size));
  std::vector<std::thread> threads;
  Group* world = shared_->groups.front().get();
  for (int rank = 0; rank < shared_->size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        body(std::make_unique<InProcessCommunicator>(shared_, world, rank));
      } catch (...) {
        outcomes[static_cast<std::size_t>(rank)] = std::current_exception();
      }
      auto lock = shared_->lock();
      shared_->die(rank);  // gone, for anyone still waiting on it
    });
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

bool died(const std::exception_ptr& outcome) {
  if (!outcome) return false;
  try {
    std::rethrow_exception(outcome);
  } catch (const RankDied&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string describe(const std::exception_ptr& outcome) {
  if (!outcome) return "";
  try {
    std::rethrow_exception(outcome);
  } catch (const RankDied&) {
    return "died";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace hardy::testing
