// dist_worker.cpp - one rank of a multi-process test: reads the launcher environment, joins the world through
// init_distributed (rank 0 hosts the store), runs an allreduce and an allgather and checks them.
// `dist_worker [backend]` (default gloo) also prints "backend <name>" of the group it got.
// Exit 0 when the results are right; 1 with the error on stderr otherwise.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/distributed/init.h"

int main(int argc, char** argv) {
  using namespace ddp::dist;
  try {
    DistEnv env = init_from_env();
    DistContext ctx = init_distributed(env, argc > 1 ? argv[1] : "gloo");
    ProcessGroup& pg = *ctx.group;
    std::printf("backend %s\n", pg.backend_name().c_str());
    int64_t sum = pg.rank() + 1;
    pg.allreduce(ddp::dist::comm_buffer(&sum, 1))->wait();
    std::vector<int32_t> all(pg.size(), -1);
    int32_t mine = pg.rank() * 10;
    pg.allgather(comm_buffer(&mine, 1), comm_buffer(all.data(), pg.size()))->wait();
    const int64_t want = int64_t{pg.size()} * (pg.size() + 1) / 2;
    bool ok = sum == want;
    for (int r = 0; r < pg.size(); ++r) ok = ok && all[r] == r * 10;
    pg.barrier()->wait();
    std::printf("rank %d of %d (%s): sum %lld %s\n", pg.rank(), pg.size(), env.launcher.c_str(),
                static_cast<long long>(sum), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_worker: %s\n", e.what());
    return 1;
  }
}
