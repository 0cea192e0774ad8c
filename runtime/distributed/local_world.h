// local_world.h - a whole world of ranks inside one process, for tests and tools: run_threads() starts a
// store on 127.0.0.1 (free port) and one thread per rank, each with its own Gloo (or shm/hier) group, and
// runs fn on every rank.
#pragma once
#include <functional>
#include <string>

#include "runtime/distributed/process_group.h"
#include "runtime/distributed/store.h"

namespace ddp::dist {

// Runs fn(rank, group) on world_size threads and joins them. If any rank throws, the first exception (by
// rank) is rethrown after all threads finished. The default options use a 60 s collective timeout (so a
// failing test does not hang for 10 minutes) unless DDP_COLLECTIVE_TIMEOUT_S is set.
void run_threads(int world_size, const std::function<void(int rank, ProcessGroup& pg)>& fn);
void run_threads(int world_size, const std::function<void(int rank, ProcessGroup& pg)>& fn,
                 const ProcessGroupOptions& options);
// The same, also handing each rank its own store client.
void run_threads(int world_size, const std::function<void(int rank, ProcessGroup& pg, Store& store)>& fn,
                 const ProcessGroupOptions& options);
// The same with another backend: "gloo" (the default above), "shm", or "hier" (the ranks split into two
// pretend hosts, even and odd ranks, each an shm group, joined by Gloo between rank 0 and rank 1).
void run_threads(int world_size, const std::function<void(int rank, ProcessGroup& pg, Store& store)>& fn,
                 const ProcessGroupOptions& options, const std::string& backend);
void run_threads(int world_size, const std::function<void(int rank, ProcessGroup& pg)>& fn,
                 const ProcessGroupOptions& options, const std::string& backend);

}  // namespace ddp::dist
