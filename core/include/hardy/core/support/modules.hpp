#pragma once
// Modules: parts of hardy that a build has but a run loads only when it uses them, the CUDA
// backend (libhardy_core_cuda.so) and the NCCL transport (libhardy_comm_nccl.so). Linked into the
// executable, cuDNN, cuBLAS and NCCL cost every rank ~80 ms of CPU at its start (cuBLASLt's
// relocations alone), on CPU nodes too, where a relaunch starts every rank of the job at once;
// and a node without CUDA's libraries could not start hardy at all.
#include <string>

namespace hardy::core {

// The address of `symbol` in the module file `file_name`, loaded once per process and kept.
// Looked for in $HARDY_MODULE_DIR when set, else in ../<libdir>/hardy beside the executable (an
// installed hardy, and this build tree's bin/hardy), else in the build tree's lib/hardy. `what`
// names the feature for the error: Error naming each place tried and the loader's reason (a
// library the module needs that this node lacks, say).
void* module_symbol(const std::string& file_name, const char* symbol, const std::string& what);

}  // namespace hardy::core
