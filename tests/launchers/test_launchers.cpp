// test_launchers.cpp - `train` under the launchers people already use (docs/launcher.md), each under both
// PyTorch installations (tests/support/torch_python.h: Debian 12's 1.13 and PyPI's 2.x in the venv of
// tools/setup_torch2.sh): torchrun with its default static rendezvous (the agent hosts PyTorch's TCPStore),
// torchrun --standalone, torchrun --nnodes=1:2 with the c10d rendezvous, the legacy torch.distributed.launch
// through a Python wrapper (which gets --local_rank=N from 1.13, --local-rank=N from 2.x) and with --use_env
// --no_python, and Open MPI's mpirun.
// Each runs 2 ranks for a few steps and must end with exactly the parameters of the same run under
// ddprun (the checkpoints are compared tensor by tensor, bit for bit). Also: torchrun's max-restarts 1 with a
// rank that fails once on purpose (the second attempt must not read the first one's keys in the agent's
// store), and a failing rank whose message torchrun's summary shows from our error file.
// Skipped with the reason when that PyTorch or openmpi-bin is missing (`tools/ddp test` installs them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/distributed/socket_io.h"
#include "tests/support/run_process.h"
#include "tests/support/torch_python.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

const std::string kMpirun = "/usr/bin/mpirun";

bool have_mpirun() {
  static const bool ok = fs::exists(kMpirun) && run_process({kMpirun, "--version"}, {}).exit_code == 0;
  return ok;
}
#define REQUIRE_MPIRUN() \
  if (!have_mpirun()) GTEST_SKIP() << "openmpi-bin is not installed (apt-get install openmpi-bin)"

std::string train_path() { return std::string(DDP_BIN_DIR) + "/train"; }

int free_port() {
  auto s = dist::net::listen_on("127.0.0.1", 0);
  return dist::net::local_port(s);
}

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ddp_launchers_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The training arguments every launcher runs (after the program), writing checkpoints to `dir`.
std::vector<std::string> train_args(const std::string& dir) {
  // clang-format off
  return {"--model", "mlp", "--data", "synthetic", "--steps", "3", "--batch-size", "8",
          "--hidden", "16", "--depth", "1", "--synthetic-samples", "128", "--eval-batches", "1",
          "--checkpoint-dir", dir, "--seed", "7"};
  // clang-format on
}

// A clean environment: no launcher variables from outside, one thread per rank everywhere.
ProcessOptions base_options() {
  ProcessOptions o;
  // clang-format off
  o.unset_env = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "DDP_RUN_TOKEN", "DDP_STORE", "DDP_TORCH_STORE_PROTOCOL", "TORCHELASTIC_USE_AGENT_STORE",
                 "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                 "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"};
  // clang-format on
  o.set_env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  o.timeout_s = 240;
  return o;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The last checkpoint a run wrote in `dir` (named by its "latest" file).
std::string last_checkpoint(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "" : (name[0] == '/' ? name : dir + "/" + name);
}

// Every tensor of two checkpoints, byte for byte; "" when identical, else what differs.
std::string compare_checkpoints(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return "a checkpoint is missing ('" + a + "', '" + b + "')";
  auto x = checkpoint::read_safetensors(a);
  auto y = checkpoint::read_safetensors(b);
  if (x.tensors.size() != y.tensors.size()) return "different tensor counts";
  if (x.tensors.empty()) return "no tensors";
  for (auto& t : x.tensors) {
    const checkpoint::NamedBuffer* other = y.find(t.name);
    if (!other) return "tensor " + t.name + " missing";
    if (t.bytes != other->bytes || t.shape != other->shape) return "tensor " + t.name + " differs";
  }
  return "";
}

// The same run under ddprun, once per test program.
const std::string& reference_checkpoint() {
  static const std::string path = [] {
    std::string dir = fresh_dir("ddprun_ref");
    auto r = run_process(
        concat({ddprun_path(), "--standalone", "--nproc-per-node", "2", train_path()}, train_args(dir)),
        base_options());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return last_checkpoint(dir);
  }();
  return path;
}

std::string write_script(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// One PyTorch installation per instance: Debian's 1.13 and PyPI's 2.x.
class TorchLaunchers : public ::testing::TestWithParam<TorchKind> {
 protected:
  const TorchPython& torch() const { return torch_python(GetParam()); }
  bool is2() const { return GetParam() == TorchKind::PyPI2; }
  // torchrun FLAGS (as a person types them for this version).
  std::vector<std::string> torchrun(const std::vector<std::string>& flags) const {
    return concat(torch().torchrun(), flags);
  }
};

TEST_P(TorchLaunchers, TorchrunStaticRendezvousUsesTheAgentsStore) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("torchrun_static_" + torch().label);
  auto r = run_process(
      concat(torchrun({"--nproc_per_node=2", "--master_addr=127.0.0.1",
                       "--master_port=" + std::to_string(free_port()), "--no_python", train_path()}),
             train_args(dir)),
      base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir)), "");
}

TEST_P(TorchLaunchers, TorchrunStandalone) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("torchrun_standalone_" + torch().label);
  auto r = run_process(
      concat(torchrun({"--standalone", "--nproc_per_node=2", "--no_python", train_path()}), train_args(dir)),
      base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir)), "");
}

// Elastic: one node of at most two, the c10d rendezvous on a TCPStore the agent hosts at the endpoint; the
// workers get another store of the agent's in MASTER_ADDR/MASTER_PORT (2.x: MASTER_ADDR=localhost).
// last_call_timeout=1: the rendezvous waits that long for a second node before it closes (default 30 s).
TEST_P(TorchLaunchers, TorchrunElasticC10dRendezvous) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("torchrun_c10d_" + torch().label);
  auto r = run_process(concat(torchrun({"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                        "--rdzv_endpoint=127.0.0.1:" + std::to_string(free_port()),
                                        "--rdzv_conf=last_call_timeout=1", "--no_python", train_path()}),
                              train_args(dir)),
                       base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir)), "");
}

TEST_P(TorchLaunchers, LegacyTorchDistributedLaunchWithAWrapperPassingLocalRank) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("legacy_launch_" + torch().label);
  // The original recipe: a Python script that the launcher runs with the local rank first in its argv,
  // spelt --local_rank=N by 1.13 and --local-rank=N by 2.x (the spelling that broke old parsers).
  const std::string spelling = is2() ? "--local-rank=" : "--local_rank=";
  std::string wrapper = write_script(dir, "wrapper.py",
                                     "import os, sys\n"
                                     "assert sys.argv[1] in ('" +
                                         spelling + "0', '" + spelling +
                                         "1'), sys.argv\n"
                                         "os.execv('" +
                                         train_path() + "', ['train'] + sys.argv[1:])\n");
  auto r = run_process(
      concat(concat(torch().legacy_launch(), {"--nproc_per_node=2", "--master_addr=127.0.0.1",
                                              "--master_port=" + std::to_string(free_port()), wrapper}),
             train_args(dir + "/ckpt")),
      base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir + "/ckpt")), "");
}

// The simpler recipe of docs/launcher.md for a native program: --use_env --no_python (1.13 refuses
// --no_python alone; 2.x accepts --use_env with a deprecation warning), so the launcher starts train itself
// and passes the local rank in LOCAL_RANK only.
TEST_P(TorchLaunchers, LegacyTorchDistributedLaunchUseEnvNoPythonStartsTrainDirectly) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("legacy_launch_use_env_" + torch().label);
  auto r =
      run_process(concat(concat(torch().legacy_launch(), {"--nproc_per_node=2", "--master_addr=127.0.0.1",
                                                          "--master_port=" + std::to_string(free_port()),
                                                          "--use_env", "--no_python", train_path()}),
                         train_args(dir)),
                  base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir)), "");
}

TEST(Launchers, Mpirun) {
  REQUIRE_MPIRUN();
  std::string dir = fresh_dir("mpirun");
  ProcessOptions o = base_options();
  o.set_env["MASTER_ADDR"] = "127.0.0.1";
  o.set_env["MASTER_PORT"] = std::to_string(free_port());
  o.set_env["DDP_RUN_TOKEN"] = "mpirun-test-token";
  auto r = run_process(
      concat({kMpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", train_path()}, train_args(dir)),
      o);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir)), "");
}

TEST_P(TorchLaunchers, TorchrunMaxRestartsSecondAttemptTrainsToTheEnd) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("torchrun_restart_" + torch().label);
  // Attempt 0: both ranks train (writing their keys into the agent's store), then rank 1 fails on purpose.
  // Attempt 1 runs in the same store: it must not read attempt 0's keys. Rank 1 starts late there, so rank 0
  // would find rank 1's stale Gloo address of attempt 0 if the keys were not namespaced by attempt.
  std::string wrapper =
      write_script(dir, "fail_once.sh",
                   "#!/bin/sh\n"
                   "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] && [ \"$RANK\" = 1 ]; then sleep 2; fi\n"
                   "\"" +
                       train_path() + "\" \"$@\" --checkpoint-dir \"" + dir +
                       "/attempt_$TORCHELASTIC_RESTART_COUNT\" || exit $?\n"
                       "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then\n"
                       "  echo 'rank 1 fails once on purpose' >&2; exit 3\n"
                       "fi\n");
  std::vector<std::string> args = train_args("unused");
  args.resize(args.size() - 4);  // drop --checkpoint-dir unused --seed 7: the wrapper adds its own dir
  args.insert(args.end(), {"--seed", "7"});
  // 1.13 knows only --max_restarts; 2.x's documented spelling is --max-restarts.
  const std::string restarts = is2() ? "--max-restarts=1" : "--max_restarts=1";
  auto r =
      run_process(concat(torchrun({"--nproc_per_node=2", restarts, "--master_addr=127.0.0.1",
                                   "--master_port=" + std::to_string(free_port()), "--no_python", wrapper}),
                         args),
                  base_options());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("rank 1 fails once on purpose"), std::string::npos) << r.out << r.err;
  EXPECT_FALSE(last_checkpoint(dir + "/attempt_0").empty());
  EXPECT_EQ(compare_checkpoints(reference_checkpoint(), last_checkpoint(dir + "/attempt_1")), "");
}

TEST_P(TorchLaunchers, TorchrunsFailureSummaryShowsOurErrorText) {
  DDP_REQUIRE_TORCH(torch());
  std::string dir = fresh_dir("torchrun_failure_" + torch().label);
  // Rank 1 cannot read its data set; rank 0 waits for it until torchrun stops it.
  std::string wrapper = write_script(dir, "rank1_fails.sh",
                                     "#!/bin/sh\n"
                                     "if [ \"$RANK\" = 1 ]; then\n"
                                     "  exec \"" +
                                         train_path() +
                                         "\" --model mlp --data fashion-mnist "
                                         "--data-path /nonexistent/ddp-launchers-test\n"
                                         "fi\n"
                                         "exec \"" +
                                         train_path() + "\" \"$@\"\n");
  auto r =
      run_process(concat(torchrun({"--nproc_per_node=2", "--master_addr=127.0.0.1",
                                   "--master_port=" + std::to_string(free_port()), "--no_python", wrapper}),
                         train_args(dir + "/ckpt")),
                  base_options());
  EXPECT_NE(r.exit_code, 0);
  // torchrun's ChildFailedError summary quotes the error file ("traceback : <our message>").
  const size_t summary = r.err.find("Root Cause");
  ASSERT_NE(summary, std::string::npos) << r.err;
  const std::string tail =
      r.err.substr(r.err.find("Failures:") == std::string::npos ? summary : r.err.find("Failures:"));
  EXPECT_NE(tail.find("train: error:"), std::string::npos) << r.err;
  EXPECT_NE(tail.find("/nonexistent/ddp-launchers-test"), std::string::npos) << r.err;
  EXPECT_EQ(tail.find("error_file: <N/A>"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Launchers, TorchLaunchers, ::testing::ValuesIn(all_torch_kinds()),
                         [](const auto& info) { return torch_kind_label(info.param); });

}  // namespace
}  // namespace ddp::testing
