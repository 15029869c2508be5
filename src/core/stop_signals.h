// Graceful stop requests: SIGTERM (spot interruption, pod eviction, Slurm
// preemption), SIGINT (Ctrl-C) and SIGUSR1 (Slurm's --signal=USR1@T warning)
// are taken by one watcher thread; the training loop polls stop_requested()
// at step boundaries, and every rank agrees on the step to stop after.
//
// Why no signal handler: a handler runs on whichever thread the kernel picks,
// on that thread's stack. oneDNN 2.x's JIT f32 GEMM kernels point rsp into a
// heap buffer while they run (oneDNN issue 4845, fixed in 3.11), so a handler
// frame pushed there overwrites heap memory: "corrupted size vs. prev_size"
// a few calls later. stop_signals_install() blocks the signals in the calling
// thread before any other thread exists, so every thread (OpenMP, MPI, the
// loader) inherits the block, and a watcher thread receives them with
// sigwait(). Blocked signals also never interrupt a system call with EINTR.
//
// A second SIGINT ends the process at once (the impatient Ctrl-C); repeated
// SIGTERM/SIGUSR1 are noted and ignored, so a checkpoint is never cut short.
// Outside a stop-aware phase (stop_signals_accept(false)) a signal ends the
// process the default way, as if nothing were installed.
#pragma once

namespace loom {

// Exit status of a run that stopped on a signal after writing its checkpoint:
// EX_TEMPFAIL ("try again"), so Kubernetes Jobs, retry loops and schedulers
// never take a preempted run for a finished one. Running the same job file
// again continues from the checkpoint.
inline constexpr int k_exit_stopped_by_signal = 75;

// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread and starts the
// watcher. Call first in main-like code, before any thread starts. Idempotent.
void stop_signals_install();

// While true, signals request a stop; while false (the default) the first
// signal ends the process the default way.
void stop_signals_accept(bool on);

// The first signal received while accepting, or 0.
int stop_requested();

// Tests and fault injection: request a stop as if `sig` had arrived (0 clears).
void stop_request(int sig);

}  // namespace loom
