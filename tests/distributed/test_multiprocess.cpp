// test_multiprocess.cpp - real processes as ranks: testprog_dist_worker started three times with the
// variables torchrun/ddprun, Slurm or Open MPI would set, on loopback; and a rank with the wrong run token is
// refused.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "runtime/distributed/socket_io.h"

extern char** environ;

namespace {

using Env = std::map<std::string, std::string>;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

int free_port() {
  auto s = ddp::dist::net::listen_on("127.0.0.1", 0);
  return ddp::dist::net::local_port(s);
}

// Starts one worker per entry with the current environment plus its overrides; waits at most 60 s in all.
std::vector<Result> run_workers(const std::vector<Env>& envs) {
  const std::string prog = std::string(DDP_BIN_DIR) + "/testprog_dist_worker";
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (size_t i = 0; i < envs.size(); ++i) {
    Env merged;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      std::string k = kv.substr(0, eq);
      // Launcher variables of the test's own environment must not leak into the workers.
      if (k == "RANK" || k == "WORLD_SIZE" || k.rfind("SLURM_", 0) == 0 || k.rfind("OMPI_", 0) == 0) continue;
      merged[k] = kv.substr(eq + 1);
    }
    for (auto& [k, v] : envs[i]) merged[k] = v;
    std::vector<std::string> strings;
    for (auto& [k, v] : merged) strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    logs.push_back(::testing::TempDir() + "dist_worker_" + std::to_string(getpid()) + "_" +
                   std::to_string(i));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char* argv[] = {const_cast<char*>(prog.c_str()), nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, prog.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "cannot start " << prog;
    pids.push_back(rc == 0 ? pid : -1);
  }
  std::vector<Result> results(envs.size());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] < 0) continue;
    int status = 0;
    while (waitpid(pids[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &status, 0);
        ADD_FAILURE() << "worker " << i << " hung and was killed";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream in(logs[i]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[i].output = ss.str();
    std::remove(logs[i].c_str());
  }
  return results;
}

}  // namespace

TEST(MultiProcess, TorchrunVariables) {
  const std::string port = std::to_string(free_port());
  std::vector<Env> envs;
  for (int r = 0; r < 3; ++r)
    envs.push_back({{"RANK", std::to_string(r)},
                    {"WORLD_SIZE", "3"},
                    {"LOCAL_RANK", std::to_string(r)},
                    {"LOCAL_WORLD_SIZE", "3"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port},
                    {"DDP_RUN_TOKEN", "t0k3n"},
                    {"DDP_COLLECTIVE_TIMEOUT_S", "30"}});
  auto results = run_workers(envs);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << results[r].output;
    EXPECT_NE(results[r].output.find("rank " + std::to_string(r) + " of 3 (torchrun/ddprun): sum 6 ok"),
              std::string::npos)
        << results[r].output;
  }
}

TEST(MultiProcess, SlurmAndOpenMpiVariables) {
  const std::string port = std::to_string(free_port());
  std::vector<Env> slurm;
  for (int r = 0; r < 2; ++r)
    slurm.push_back({{"SLURM_PROCID", std::to_string(r)},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_LOCALID", std::to_string(r)},
                     {"SLURM_NTASKS_PER_NODE", "2"},
                     {"SLURM_JOB_NODELIST", "localhost"},
                     {"MASTER_PORT", port},
                     {"DDP_COLLECTIVE_TIMEOUT_S", "30"}});
  auto results = run_workers(slurm);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(results[r].output.find("(slurm): sum 3 ok"), std::string::npos) << results[r].output;

  const std::string port2 = std::to_string(free_port());
  std::vector<Env> mpi;
  for (int r = 0; r < 2; ++r)
    mpi.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"MASTER_PORT", port2},
                   {"DDP_COLLECTIVE_TIMEOUT_S", "30"}});
  results = run_workers(mpi);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(results[r].output.find("(mpirun): sum 3 ok"), std::string::npos) << results[r].output;
}

TEST(MultiProcess, WrongRunTokenIsRefusedAndNobodyHangs) {
  const std::string port = std::to_string(free_port());
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r)
    envs.push_back({{"RANK", std::to_string(r)},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port},
                    {"DDP_RUN_TOKEN", r == 1 ? "forged" : "right"},
                    {"DDP_COLLECTIVE_TIMEOUT_S", "2"}});
  auto results = run_workers(envs);
  EXPECT_NE(results[1].exit_code, 0);
  EXPECT_NE(results[1].output.find("wrong run token"), std::string::npos) << results[1].output;
  EXPECT_NE(results[0].exit_code, 0) << results[0].output;  // rank 0 times out waiting for rank 1
}
