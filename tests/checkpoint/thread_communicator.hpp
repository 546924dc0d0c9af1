#pragma once
// An in-process Communicator: every rank is a thread of the test, and the collectives that
// broadcast_state uses (broadcast, allreduce_sum, barrier) go through shared memory. Lets the
// unit tests run a restore over several ranks without MPI, and damage what one rank receives.
#include <barrier>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/error.hpp"

namespace hardy::checkpoint::testing {

class ThreadWorld {
 public:
  explicit ThreadWorld(int size)
      : size_(size), barrier_(size), slots_(static_cast<std::size_t>(size)) {}
  int size() const { return size_; }
  void wait() { barrier_.arrive_and_wait(); }
  void*& slot(int rank) { return slots_[static_cast<std::size_t>(rank)]; }
  // Runs body(rank) on one thread per rank; rethrows nothing, returns each rank's exception.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& body) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < size_; ++rank)
      threads.emplace_back([&, rank] {
        try {
          body(rank);
        } catch (...) {
          errors[static_cast<std::size_t>(rank)] = std::current_exception();
        }
      });
    for (std::thread& thread : threads) thread.join();
    return errors;
  }

 private:
  int size_;
  std::barrier<> barrier_;
  std::vector<void*> slots_;
};

class ThreadCommunicator final : public comm::Communicator {
 public:
  // on_receive(bytes) runs on non-root ranks after each broadcast: tests damage data there.
  ThreadCommunicator(ThreadWorld& world, int rank,
                     std::function<void(std::span<std::byte>)> on_receive = {})
      : world_(world), rank_(rank), on_receive_(std::move(on_receive)) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }

  void allreduce_sum(std::span<float> data) override { sum(data); }
  void allreduce_sum(std::span<double> data) override { sum(data); }
  std::unique_ptr<comm::Request> iallreduce_sum(std::span<float>) override {
    throw Error("ThreadCommunicator: no non-blocking collectives");
  }
  void broadcast(std::span<std::byte> data, int root) override {
    world_.slot(rank_) = data.data();
    world_.wait();
    if (rank_ != root) {
      std::memcpy(data.data(), world_.slot(root), data.size());
      if (on_receive_) on_receive_(data);
    }
    world_.wait();
  }
  void barrier() override { world_.wait(); }
  std::vector<std::string> hostnames() override {
    std::vector<std::string> names;
    for (int r = 0; r < size(); ++r) names.push_back("thread-" + std::to_string(r));
    return names;
  }
  bool fault_tolerant() const override { return false; }
  void revoke() override { throw Error("ThreadCommunicator: not fault tolerant"); }
  int agree(int flag) override {
    std::vector<double> all{static_cast<double>(flag == 0 ? 0 : 1)};
    sum(std::span<double>(all));
    return all[0] == size() ? flag : 0;
  }
  std::vector<int> failed_ranks() override { return {}; }
  std::unique_ptr<Communicator> shrink() override {
    throw Error("ThreadCommunicator: not fault tolerant");
  }

 private:
  template <class T>
  void sum(std::span<T> data) {
    world_.slot(rank_) = data.data();
    world_.wait();
    std::vector<T> total(data.size(), T{0});
    for (int r = 0; r < size(); ++r) {
      const T* other = static_cast<const T*>(world_.slot(r));
      for (std::size_t i = 0; i < data.size(); ++i) total[i] += other[i];
    }
    world_.wait();  // everyone has read every slot before anyone overwrites its own
    std::copy(total.begin(), total.end(), data.begin());
  }

  ThreadWorld& world_;
  int rank_;
  std::function<void(std::span<std::byte>)> on_receive_;
};

}  // namespace hardy::checkpoint::testing
