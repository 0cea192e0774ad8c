// local_world.cpp - threads as ranks over a loopback store, with one Gloo (or shm/hier) group per thread.
#include "runtime/distributed/local_world.h"

#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/gloo_group.h"
#include "runtime/distributed/shm/hier_group.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store_server.h"

namespace ddp::dist {

void run_threads(int world_size, const std::function<void(int, ProcessGroup&, Store&)>& fn,
                 const ProcessGroupOptions& options) {
  run_threads(world_size, fn, options, "gloo");
}

void run_threads(int world_size, const std::function<void(int, ProcessGroup&, Store&)>& fn,
                 const ProcessGroupOptions& options, const std::string& backend) {
  DDP_CHECK(backend == "gloo" || backend == "shm" || backend == "hier", "run_threads: backend '", backend,
            "' is unknown: expected gloo, shm or hier");
  DDP_CHECK(world_size >= 1, "run_threads: world size ", world_size, " must be at least 1");
  const std::string token = "local-world";
  StoreServer server("127.0.0.1", 0, token);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<Store>("127.0.0.1", server.port(), token, options.timeout);
        ProcessGroupOptions opts = options;
        if (opts.name.empty()) opts.name = "local";
        std::unique_ptr<ProcessGroup> pg;
        if (backend == "shm") {
          pg = std::make_unique<ShmProcessGroup>(store->clone(), r, world_size, opts);
        } else if (backend == "hier") {
          std::vector<int> hosts(world_size);
          for (int q = 0; q < world_size; ++q) hosts[q] = q % 2;
          pg = std::make_unique<HierProcessGroup>(store->clone(), r, world_size, opts, "127.0.0.1", hosts);
        } else {
          pg = std::make_unique<GlooProcessGroup>(store->clone(), r, world_size, opts, "127.0.0.1");
        }
        fn(r, *pg, *store);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void run_threads(int world_size, const std::function<void(int, ProcessGroup&)>& fn,
                 const ProcessGroupOptions& options) {
  run_threads(
      world_size, [&fn](int r, ProcessGroup& pg, Store&) { fn(r, pg); }, options);
}

void run_threads(int world_size, const std::function<void(int, ProcessGroup&)>& fn,
                 const ProcessGroupOptions& options, const std::string& backend) {
  run_threads(
      world_size, [&fn](int r, ProcessGroup& pg, Store&) { fn(r, pg); }, options, backend);
}

void run_threads(int world_size, const std::function<void(int, ProcessGroup&)>& fn) {
  ProcessGroupOptions options;
  if (!std::getenv("DDP_COLLECTIVE_TIMEOUT_S")) options.timeout = std::chrono::seconds(60);
  run_threads(world_size, fn, options);
}

}  // namespace ddp::dist
