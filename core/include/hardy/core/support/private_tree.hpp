#pragma once
// Node-local trees that only their user can touch. /dev/shm and /tmp are shared by every user of
// a node, so a directory hardy keeps state in there (node-local snapshots, staged data) must be
// one that no other user could have created, replaced, linked elsewhere or written into:
//
//   - the ancestors of the tree's root (/, /dev, /dev/shm) are directories owned by root or by
//     this user, and any of them that others may write into has the sticky bit (so nobody else
//     can rename or delete what this user keeps there); a symbolic link among them is allowed
//     when root or this user owns it;
//   - the root and every directory below it that hardy uses is a real directory (never a
//     symbolic link), owned by this user, and neither group- nor world-writable. Missing ones
//     are created with mode 0700.
//
// The walk goes from "/" with openat(O_NOFOLLOW) one component at a time, so what is checked is
// what is used; once a tree passes, paths into it are safe to use by name, because nobody but
// this user (or root) can change any component of it. Files in such a tree are created with
// create_exclusive_file(path, 0600).
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

// A tree that fails the checks: the message names the component and what is wrong with it
// ("/dev/shm/hardy-1000 is owned by uid 1001, not by this user (uid 1000)"). An IoError, so
// that code which only means to carry on without the tier can catch that.
class UnsafeDirectory : public IoError {
 public:
  using IoError::IoError;
};

// The default root of hardy's node-local trees: /dev/shm/hardy-<uid> (node memory, private to
// the user by name and by the checks above). docs/resilience.md says why not $XDG_RUNTIME_DIR.
std::filesystem::path default_node_local_root();

// Checks the tree `root`/`below` as the header says, creating what is missing when `create`
// (otherwise a missing component ends the walk: returns false). Returns true when the whole
// tree exists and passed. Throws UnsafeDirectory for a tree that fails a check, IoError when a
// directory cannot be created or opened for another reason (read-only, full, no permission).
// `below` is relative; an empty one checks the root alone.
bool check_private_tree(const std::filesystem::path& root, const std::filesystem::path& below,
                        bool create);

// Creates `path` (in a checked tree) for writing: O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode
// `mode`. A file or link already there is unlinked first (a stale temporary of a killed writer,
// or a planted link: unlink removes the link itself, never its target); should one appear again
// between the two calls, the open fails instead of following it. Returns the descriptor; throws
// IoError naming the file.
int create_exclusive_file(const std::filesystem::path& path, mode_t mode);

// A small file written whole through create_exclusive_file (mode 0600 unless told), synced and
// closed; IoError naming the file when any of it fails.
void write_private_file(const std::filesystem::path& path, std::string_view text,
                        mode_t mode = 0600);

}  // namespace hardy::core
