// shm_worker.cpp - one rank of the shared-memory failure tests: connects to the test's store
// (shm_worker <port> <token> <rank> <world> <mode>) and builds a shm group, then by mode:
//   "die":   rank 1 kills itself (SIGKILL) in the middle of a 16 MiB all-reduce; the others report the error
//            they got (stderr) and exit 3 when it came, 0 when the collective unexpectedly succeeded;
//   "setup": create the group and exit at once without destroying it (_exit), as a crash after setup would.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store.h"

int main(int argc, char** argv) {
  using namespace ddp::dist;
  if (argc != 6) {
    std::fprintf(stderr, "usage: shm_worker <port> <token> <rank> <world> <die|setup>\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string token = argv[2], mode = argv[5];
  const int rank = std::atoi(argv[3]), world = std::atoi(argv[4]);
  try {
    auto store = std::make_shared<Store>("127.0.0.1", port, token, std::chrono::seconds(30));
    ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(60);
    options.debug_collectives = false;
    options.name = "killtest";
    ShmProcessGroup pg(store, rank, world, options);
    std::printf("rank %d pid %d ready\n", rank, static_cast<int>(::getpid()));
    std::fflush(stdout);
    if (mode == "setup") ::_exit(0);
    std::vector<float> buf(size_t{4} << 20, 1.0f);  // 16 MiB: 16 chunk steps
    pg.allreduce(comm_buffer(buf.data(), 16))->wait();
    store->set("warm/" + std::to_string(rank), "1");
    if (rank == 1) {
      // Everyone is in the big all-reduce (waiting on our parts) when we die in the middle of it.
      auto w = pg.allreduce(comm_buffer(buf.data(), static_cast<int64_t>(buf.size())));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ::raise(SIGKILL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      pg.allreduce(comm_buffer(buf.data(), static_cast<int64_t>(buf.size())))->wait();
    } catch (const std::exception& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "rank %d got after %.3f s: %s\n", rank, s, e.what());
      return 3;
    }
    std::printf("rank %d: the all-reduce succeeded although rank 1 died\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shm_worker rank %d: %s\n", rank, e.what());
    return 1;
  }
}
