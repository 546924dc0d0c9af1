#pragma once
// Everything the checkpoint library offers, for the training loop and the command line:
//   training_state.hpp       TrainingState, capture(), apply()
//   checkpoint_file.hpp      write_checkpoint_file(), read_checkpoint(), CorruptCheckpoint
//   checkpoint_directory.hpp checkpoints/ with `latest`, retention, find_latest_valid()
//   checkpoint_writer.hpp    CheckpointWriter (asynchronous, skip or wait when busy)
//   broadcast_state.hpp      broadcast_state() for restoring every rank from rank 0's file
//   node_local_snapshots.hpp the node-local tier: each node's copy of the last committed step
//   stale_snapshots.hpp      removing what crashed runs left in the node-local tier
//   model_file.hpp           save_model(), load_model()
//   scalar_fields.hpp        scalar_fields(): the one list of a checkpoint's /train and /job
//   datasets
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/checkpoint_writer.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/checkpoint/snapshot_file.hpp"
#include "hardy/checkpoint/stale_snapshots.hpp"
#include "hardy/checkpoint/training_state.hpp"
