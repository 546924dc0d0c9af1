#pragma once
// What core/src/backend.cpp needs for make_backend("cuda"); the class itself is public
// (hardy/core/cuda_backend.hpp) because the NCCL communicator joins its stream.
#include "hardy/core/cuda_backend.hpp"
