// supervisor.h - ddprun's process supervisor: starts one worker per local rank, forwards their output
// line by line, stops everyone when one fails, restarts or summarises.
//
// Process model (Linux):
// - Each worker runs in its own process group (so ddprun can signal a worker and everything it started)
//   with PR_SET_PDEATHSIG=SIGKILL, so a ddprun killed with SIGKILL takes its workers with it.
// - Worker stdin is /dev/null; stdout and stderr are pipes read by ddprun, which writes each whole line
//   prefixed "[rank N] " with one write() (and to LOG_DIR/attempt_<k>/rank_<r>.log with --log-dir).
// - A worker that exits non-zero or dies on a signal is the root cause; the others get SIGTERM, then
//   SIGKILL after the grace period. With restarts left, all workers start again with
//   TORCHELASTIC_RESTART_COUNT + 1; else the failure table is printed and ddprun exits with the root
//   cause's code (128 + signal for a signal).
// - SIGINT / SIGTERM / SIGHUP sent to ddprun are forwarded to every worker's process group (a second one
//   sends SIGKILL); ddprun then exits with 128 + that signal, without restarting.
// - Once an attempt's workers have all exited (normally, with an error, or killed), ddprun unlinks the
//   shared-memory segments still in /dev/shm under their pids (shm_segment.h: a worker killed while setting
//   up a shm group leaves its segment), before restarting or exiting.
#pragma once

#include "runtime/launch/launch_config.h"

namespace ddp::launch {

// Runs the workers of `config` to completion (restarts included) and returns ddprun's exit code.
// Uses signalfd and fork: call it from a single-threaded process.
int run_workers(const LaunchConfig& config);

}  // namespace ddp::launch
