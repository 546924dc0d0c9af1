#pragma once
// Restoring a data-parallel job: rank 0 reads the checkpoint, every rank needs the state. The
// state travels as one serialized byte string, so the receivers need no file system access and
// the job may have any number of ranks, not only the number that saved it.
#include <cstddef>
#include <span>
#include <vector>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/comm/communicator.hpp"

namespace hardy::checkpoint {

// Collective over comm. Root's `state` (read from disk) is serialized and broadcast in chunks;
// every other rank's `state` is replaced by it. Every rank then hashes the bytes it holds and
// compares with root's hash; if any rank differs, every rank throws hardy::Error saying how many
// differ (and no rank's state is replaced). comm::ProcessFailure passes through.
void broadcast_state(comm::Communicator& comm, TrainingState& state, int root);

// The serialization broadcast_state uses (the same datasets as a checkpoint file, as bytes).
std::vector<std::byte> serialize(const TrainingState& state);
// Throws CorruptCheckpoint (checkpoint_file.hpp) when the bytes are not a serialized state.
TrainingState deserialize(std::span<const std::byte> bytes);

}  // namespace hardy::checkpoint
