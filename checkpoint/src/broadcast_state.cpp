#include "hardy/checkpoint/broadcast_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "state_stream.hpp"

namespace hardy::checkpoint {

namespace {

// MPI counts are ints: stay well below 2 GiB per broadcast.
constexpr std::size_t kChunkBytes = std::size_t{256} << 20;

void broadcast_in_chunks(comm::Communicator& comm, std::span<std::byte> bytes, int root) {
  for (std::size_t offset = 0; offset < bytes.size(); offset += kChunkBytes)
    comm.broadcast(bytes.subspan(offset, std::min(kChunkBytes, bytes.size() - offset)), root);
}

}  // namespace

std::vector<std::byte> serialize(const TrainingState& state) {
  const std::vector<detail::Field> fields = detail::fields_of(state, detail::Checksums::skip);
  std::vector<std::byte> out;
  out.reserve(static_cast<std::size_t>(detail::stream_size(fields)));
  detail::write_stream(fields, [&](std::span<const std::byte> piece) {
    out.insert(out.end(), piece.begin(), piece.end());
  });
  return out;
}

TrainingState deserialize(std::span<const std::byte> bytes) {
  return detail::read_stream(bytes, "the serialized state");
}

void broadcast_state(comm::Communicator& comm, TrainingState& state, int root) {
  if (comm.size() == 1) return;
  const bool is_root = comm.rank() == root;
  std::vector<std::byte> bytes;
  // Root's size and digest go first, so that the others can allocate and later compare.
  std::uint64_t header[2] = {0, 0};
  if (is_root) {
    bytes = serialize(state);
    header[0] = bytes.size();
    header[1] = core::xxhash64(bytes);
  }
  comm.broadcast(std::as_writable_bytes(std::span(header)), root);
  if (!is_root) bytes.resize(static_cast<std::size_t>(header[0]));
  broadcast_in_chunks(comm, bytes, root);
  const std::int64_t mismatches =
      comm::allreduce(comm, core::xxhash64(bytes) != header[1] ? 1 : 0, comm::ReduceOp::sum);
  if (mismatches != 0)
    throw Error(fmt::format(
        "broadcast_state: {} of {} ranks received a training state whose digest differs from "
        "rank {}'s; the state was not restored",
        mismatches, comm.size(), root));
  if (!is_root) state = deserialize(bytes);
}

}  // namespace hardy::checkpoint
