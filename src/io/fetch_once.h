// fetch_once(): one process per machine produces a file or folder in a shared
// local location (the download cache, a restored checkpoint) while every
// other process that asks for it at the same time waits and then uses it.
//
//   fetch_once("/cache/remote/ab12/cd34/train", [&](const std::string& tmp) {
//       download every object into the folder tmp;
//   });
//
// Invariants:
//   - `target` only ever appears by rename(2) of a complete temporary
//     ("<target>.part"), so a reader never sees half of it. Nothing else may
//     create `target`.
//   - At most one process fills at a time: an exclusive flock(2) on
//     "<target>.lock". A holder that dies (SIGKILL, OOM) loses the lock with
//     its file descriptors, and the next waiter takes over; a ".part" left
//     behind is removed by whoever holds the lock next, never published.
//   - The lock file is removed by its holder before it lets go; a waiter that
//     then holds a lock on the removed file sees that (inode check) and locks
//     the current one instead, so removal never lets two processes in.
//   - A fill that throws removes its ".part" and lets the exception through;
//     the next caller tries again.
//
// Works for threads of one process too (each call opens its own descriptor).
// Across machines sharing a network file system it is as good as that file
// system's flock.
#pragma once

#include <functional>
#include <string>

namespace loom {

struct FetchOnceOptions {
    // Whether a present target is usable; one that is not (a folder someone
    // copied in half way) is removed and produced again. Default: present is
    // complete.
    std::function<bool(const std::string& target)> is_complete;
    // After this long waiting for another process, one line on stderr names
    // it, so a slow download is not mistaken for a hang.
    double notice_after_s = 30;
};

// Makes `target` exist, calling fill(tmp) at most once among all concurrent
// callers; fill writes the whole file or folder at path `tmp` (absent when
// called). Returns true when this call filled it, false when it was there or
// another process produced it meanwhile. Errors name the target.
bool fetch_once(const std::string& target, const std::function<void(const std::string& tmp)>& fill,
                const FetchOnceOptions& options = {});

}  // namespace loom
