// Named moments where the fault tests make a real failure happen: a signal
// to this process, a stall, or a hard kill, at the n-th time a phase is
// reached. Timed kills from outside rarely land inside a checkpoint write or
// an upload on a tiny model; these points make every phase reachable.
//
//   LOOM_FAULT=<point>:<hit>:<action>   e.g. checkpoint_write:2:term
//   LOOM_FAULT_RANK=<world rank>        only on that rank (default: every rank)
//
// actions: term | int | usr1 (send that signal to this process, which the
// stop watcher receives like any other), stall<S> (sleep S seconds, long
// enough for a test to kill -9 the process mid-phase), kill (SIGKILL itself).
// Points: data (the loader makes a batch), forward, backward, allreduce
// (gradients are reduced), checkpoint_write (between a checkpoint's files),
// upload (between a checkpoint's uploaded objects).
//
// Without LOOM_FAULT a point costs a static-initialisation check and a branch.
#pragma once

namespace loom {

void fault_point(const char* name);

}  // namespace loom
