#pragma once
// The restore side's rule for a list of saved states, shared by checkpoint directories and
// node-local snapshot slots: the candidates newest first, the first one that reads, validates and
// fits wins, and each one passed over says why.
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hardy/checkpoint/checkpoint_directory.hpp"

namespace hardy::checkpoint::detail {

// `read` throws an Error for a file that does not read or validate; *skipped (when given) gets
// one line per candidate passed over (its error, or why `unfit` refused it).
std::optional<ValidCheckpoint> first_valid(
    std::span<const std::filesystem::path> candidates,
    const std::function<TrainingState(const std::filesystem::path&)>& read,
    const UnfitReason& unfit, std::vector<std::string>* skipped);

}  // namespace hardy::checkpoint::detail
