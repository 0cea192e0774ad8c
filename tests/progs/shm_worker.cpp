// shm_worker.cpp - one rank of the shared-memory failure tests: connects to the test's store
// (shm_worker <port> <token> <rank> <world> <mode>) and builds a shm group, then by mode:
//   "die":   rank 1 kills itself (SIGKILL) in the middle of a 16 MiB all-reduce; the others report the error
//            they got (stderr) and exit 3 when it came, 0 when the collective unexpectedly succeeded;
//   "setup": create the group and exit at once without destroying it (_exit), as a crash after setup would;
//   "die-inplace": on a registered buffer (allocate_comm_buffer), so the all-reduce runs in place: after an
//            in-place warm-up (each prints "in place: N", N: in-place all-reduces so far) rank 1 issues the
//            next one and kills itself; the others issue theirs once it is dead (its pid no longer
//            alive: issuing is asynchronous, and a rank 1 still running could finish its part), and report as
//            in "die";
//   "setup-buffers": create the group and one registered buffer, never use it, and wait to be killed (the
//            test SIGKILLs it once it saw the buffer's name; exits 5 after 60 s).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/shm/shm_sync.h"
#include "runtime/distributed/store.h"

int main(int argc, char** argv) {
  using namespace ddp::dist;
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: shm_worker <port> <token> <rank> <world> <die|setup|die-inplace|setup-buffers>\n");
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
    if (mode == "setup-buffers") {
      CommBuffer b = pg.allocate_comm_buffer(1 << 20, ddp::DType::F32, ddp::Device::cpu());
      if (!b.data) return 4;
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 5;
    }
    std::vector<float> plain(size_t{4} << 20, 1.0f);  // 16 MiB: 16 chunk steps
    CommBuffer big = comm_buffer(plain.data(), static_cast<int64_t>(plain.size()));
    if (mode == "die-inplace") {
      big = pg.allocate_comm_buffer(static_cast<int64_t>(plain.size()), ddp::DType::F32, ddp::Device::cpu());
      if (!big.data) return 4;
      std::fill_n(static_cast<float*>(big.data), plain.size(), 1.0f);
      pg.allreduce(big)->wait();  // warm-up, in place: every peer maps every buffer
      std::printf("rank %d in place: %llu\n", rank, static_cast<unsigned long long>(pg.direct_allreduces()));
      std::fflush(stdout);
    } else {
      pg.allreduce(comm_buffer(plain.data(), 16))->wait();
    }
    store->set("warm/" + std::to_string(rank), "1");
    if (rank == 1) {
      if (mode == "die-inplace") {
        // Our in-place all-reduce is issued (stamped, then waiting for the peers) and we die; the others
        // enter only once this process is gone, so the collective can never complete, whatever the scheduling.
        auto w = pg.allreduce(big);
        store->set("issued/1", std::to_string(::getpid()));
        ::raise(SIGKILL);
      }
      // Everyone is in the big all-reduce (waiting on our parts) when we die in the middle of it: 1 ms in,
      // well before its 16 chunk steps can be done (3 ranks at the ~3 GB/s bench_allreduce measured: ~5.6 ms).
      auto w = pg.allreduce(big);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ::raise(SIGKILL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (mode == "die-inplace") {
        const pid_t dying = static_cast<pid_t>(std::stol(store->get("issued/1", std::chrono::seconds(30))));
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (shm::pid_alive(dying) && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      pg.allreduce(big)->wait();
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
