#pragma once
// What core/src/compute/backend.cpp needs for make_backend("cuda"); the class itself is public
// (hardy/core/compute/cuda_backend.hpp) because the NCCL communicator joins its stream.
#include "hardy/core/compute/cuda_backend.hpp"
