#include "hardy/comm/gloo/communicator.hpp"

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <cstring>

#include "broken_sockets.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::comm {

namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context, std::string name)
      : context_(std::move(context)), name_(std::move(name)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  void allreduce_sum(std::span<float> data) override {
    allreduce_with(data, static_cast<Reduce>(&gloo::sum<float>), "allreduce (float sum)");
  }
  void allreduce_sum(std::span<double> data) override {
    allreduce_with(data, static_cast<Reduce>(&gloo::sum<double>), "allreduce (double sum)");
  }
  void allreduce(std::span<std::int64_t> data, ReduceOp op) override {
    const Reduce reduce = op == ReduceOp::sum   ? static_cast<Reduce>(&gloo::sum<std::int64_t>)
                          : op == ReduceOp::min ? static_cast<Reduce>(&gloo::min<std::int64_t>)
                                                : static_cast<Reduce>(&gloo::max<std::int64_t>);
    allreduce_with(data, reduce, "allreduce (int64)");
  }
  std::vector<std::int64_t> allgather(std::int64_t value) override {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size()));
    guarded("allgather", [&] {
      gloo::AllgatherOptions options(context_);
      options.setInput(&value, 1);
      options.setOutput(all.data(), all.size());
      options.setTag(next_tag());
      gloo::allgather(options);
    });
    return all;
  }
  std::unique_ptr<Request> iallreduce_sum(std::span<float> data) override {
    allreduce_sum(data);  // gloo's collectives block; the caller waits on a completed request
    return completed_request();
  }
  void broadcast(std::span<std::byte> data, int root) override {
    if (size() == 1 || data.empty()) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions options(context_);
      options.setOutput(reinterpret_cast<std::uint8_t*>(data.data()), data.size());
      options.setRoot(root);
      options.setTag(next_tag());
      gloo::broadcast(options);
    });
  }
  void barrier() override {
    guarded("barrier", [&] {
      gloo::BarrierOptions options(context_);
      options.setTag(next_tag());
      gloo::barrier(options);
    });
  }
  std::vector<std::string> hostnames() override {
    constexpr std::size_t kNameBytes = 256;  // every rank sends this many: names padded with NULs
    std::string mine = core::host_name();
    mine.resize(kNameBytes, '\0');
    std::vector<std::string> all(static_cast<std::size_t>(size()));
    std::vector<std::byte> buffer(kNameBytes);
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) std::memcpy(buffer.data(), mine.data(), buffer.size());
      broadcast(buffer, r);
      all[static_cast<std::size_t>(r)] = std::string(reinterpret_cast<const char*>(buffer.data()));
    }
    return all;
  }

  bool fault_tolerant() const override { return false; }
  void revoke() override { throw Error("a gloo group cannot be revoked; connect a new one"); }
  int agree(int) override { throw Error("a gloo group has no fault-tolerant agreement"); }
  std::vector<int> failed_ranks() override { return {}; }
  Survivors shrink() override { throw Error("a gloo group cannot shrink; connect a new one"); }
  std::unique_ptr<Communicator> split(int, int) override {
    throw Error("a gloo group cannot be split; connect one per part");
  }

 private:
  using Reduce = void (*)(void*, const void*, const void*, size_t);

  template <typename T>
  void allreduce_with(std::span<T> data, Reduce reduce, const char* what) {
    if (size() == 1 || data.empty()) return;
    guarded(what, [&] {
      gloo::AllreduceOptions options(context_);
      options.setOutput(data.data(), data.size());
      options.setReduceFunction(reduce);
      options.setTag(next_tag());
      // bcube (recursive halving/doubling; for a size that does not factor, a direct
      // reduce-scatter and allgather) takes 2 log2(P) dependent steps where the ring takes
      // 2 (P - 1), and every chunk is still reduced by one member only, so all get the same bits.
      // Fault domains' leaders, 4 domains of 2 emulated nodes: +10.5% and +18.3% over one job
      // per step against the ring's +21.2% and +23.8% (bench/cluster/domain_bench.py, alternating).
      options.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      gloo::allreduce(options);
    });
  }

  template <typename Body>
  void guarded(const char* what, Body&& body) {
    if (broken_)
      throw GroupFailure(
          fmt::format("{}: group {} failed earlier; connect a new one", what, name_));
    try {
      body();
    } catch (const gloo::Exception& e) {
      broken_ = true;
      close_connections();
      throw GroupFailure(
          fmt::format("{} in group {} (rank {} of {}): {}", what, name_, rank(), size(), e.what()));
    }
  }

  // A failed operation leaves the live members mid-way through theirs: until this member's
  // connections close, gloo's event-loop thread goes on reading what they send for it, into
  // receives the unwound operation no longer has. One such message trips an assertion of
  // gloo's on that thread, where nothing catches it, and the process aborts (a fault domain's
  // leader was lost so, beside the domain that really failed). Closed at once (with a reset),
  // the connections stop that, and the live members fail their operation too instead of
  // waiting out the group's timeout.
  void close_connections() noexcept {
    try {
      context_->closeConnections();
    } catch (const gloo::Exception&) {  // an unusable socket: the group is broken either way
    }
  }

  // Operations run one at a time, so one tag would do; distinct tags keep a late message of an
  // abandoned operation from matching the next one.
  std::uint32_t next_tag() { return ++tag_; }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::string name_;
  std::uint32_t tag_ = 0;
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<Communicator> connect_gloo_group(RendezvousStore& store,
                                                 const GlooGroupOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    throw InvalidArgument(fmt::format("gloo group {}: rank {} is outside a group of {}",
                                      options.prefix, options.rank, options.size));
  gloo::transport::tcp::attr attr;
  if (!options.address.empty()) {
    attr.hostname = options.address;
  } else {
    attr.hostname = core::host_name();
  }
  // gloo sends with writev: without this, one lost domain took its neighbour's leader with it.
  // The EPIPE that gloo reports instead becomes a GroupFailure.
  survive_broken_sockets("gloo group");
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.connect_timeout);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, store.gloo_store());
    context->connectFullMesh(prefixed, device);
    context->setTimeout(options.timeout);
    return std::make_unique<GlooCommunicator>(std::move(context), options.prefix);
  } catch (const gloo::Exception& e) {
    throw GroupFailure(fmt::format("cannot connect gloo group {} as rank {} of {} on {}: {}",
                                   options.prefix, options.rank, options.size, attr.hostname,
                                   e.what()));
  }
}

}  // namespace hardy::comm
