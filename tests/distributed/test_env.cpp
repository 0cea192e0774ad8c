// test_env.cpp - rank/world/master from torchrun, Slurm and Open MPI variables, and the error texts for
// missing or inconsistent ones.
#include <gtest/gtest.h>

#include <map>

#include "runtime/core/device.h"
#include "runtime/core/error.h"
#include "runtime/distributed/env.h"

using namespace ddp::dist;

namespace {
DistEnv parse(const std::map<std::string, std::string>& vars) {
  return init_from_env([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(DistEnv, NoVariablesMeansAWorldOfOne) {
  DistEnv e = parse({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.launcher, "none");
}

TEST(DistEnv, Torchrun) {
  DistEnv e = parse({{"RANK", "5"},
                     {"WORLD_SIZE", "8"},
                     {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "4"},
                     {"MASTER_ADDR", "10.0.0.7"},
                     {"MASTER_PORT", "29600"},
                     {"DDP_RUN_TOKEN", "tok"}});
  EXPECT_EQ(e.launcher, "torchrun/ddprun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29600);
  EXPECT_EQ(e.token, "tok");
}

TEST(DistEnv, TorchrunSingleNodeDefaults) {
  DistEnv e = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(DistEnv, TorchrunErrorsNameTheVariable) {
  auto err = error_of({{"RANK", "0"}});
  EXPECT_NE(err.find("WORLD_SIZE is not"), std::string::npos) << err;
  err = error_of({{"WORLD_SIZE", "2"}});
  EXPECT_NE(err.find("RANK is not set"), std::string::npos) << err;
  err = error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(err.find("RANK=2 is not smaller than WORLD_SIZE=2"), std::string::npos) << err;
  err = error_of({{"RANK", "x1"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(err.find("RANK='x1' is not valid"), std::string::npos) << err;
  err = error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_NE(err.find("WORLD_SIZE='0' is not valid: expected a positive integer"), std::string::npos) << err;
  err = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(err.find("MASTER_PORT='70000'"), std::string::npos) << err;
  err = error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(err.find("MASTER_ADDR is not set"), std::string::npos) << err;
  err = error_of({{"RANK", "0"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "2"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "h"}});
  EXPECT_NE(err.find("LOCAL_RANK=2 is not smaller than LOCAL_WORLD_SIZE=2"), std::string::npos) << err;
  err = error_of({{"LOCAL_RANK", "0"}});
  EXPECT_NE(err.find("LOCAL_RANK is set but WORLD_SIZE is not"), std::string::npos) << err;
}

TEST(DistEnv, Slurm) {
  DistEnv e = parse({{"SLURM_PROCID", "6"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "2"},
                     {"SLURM_NTASKS_PER_NODE", "4"},
                     {"SLURM_JOB_NODELIST", "gpu[07-08],login1"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(DistEnv, SlurmDerivesTasksPerNode) {
  DistEnv e = parse({{"SLURM_PROCID", "6"},
                     {"SLURM_NTASKS", "7"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                     {"SLURM_NODEID", "3"},
                     {"SLURM_JOB_NODELIST", "n[1-4]"},
                     {"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "n1");
  EXPECT_EQ(e.master_port, 1234);
  e = parse({{"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NNODES", "2"},
             {"SLURM_JOB_NODELIST", "a"}});
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "a");
  e = parse({{"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NNODES", "2"},
             {"SLURM_JOB_NODELIST", "a"},
             {"MASTER_ADDR", "override"}});
  EXPECT_EQ(e.master_addr, "override");
}

TEST(DistEnv, SlurmErrors) {
  auto err = error_of({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(err.find("SLURM_NPROCS is not set"), std::string::npos) << err;  // neither NTASKS nor NPROCS
  err = error_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(err.find("SLURM_PROCID=4 is not smaller than SLURM_NTASKS=4"), std::string::npos) << err;
  err = error_of({{"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_LOCALID", "0"},
                  {"SLURM_NNODES", "2"},
                  {"SLURM_JOB_NODELIST", "node[01-04"}});
  EXPECT_NE(err.find("SLURM_JOB_NODELIST='node[01-04'"), std::string::npos) << err;
  err =
      error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"SLURM_NNODES", "2"}});
  EXPECT_NE(err.find("neither MASTER_ADDR nor SLURM_JOB_NODELIST"), std::string::npos) << err;
}

TEST(DistEnv, SlurmFirstHost) {
  EXPECT_EQ(slurm_first_host("node[01-04],x"), "node01");
  EXPECT_EQ(slurm_first_host("x,node[01-04]"), "x");
  EXPECT_EQ(slurm_first_host("node[7,9-12]"), "node7");
  EXPECT_EQ(slurm_first_host("rack[2-3]-gpu[005-008]"), "rack2-gpu005");
  EXPECT_EQ(slurm_first_host("single"), "single");
  EXPECT_THROW(slurm_first_host("n[a-b]"), ddp::Error);
  EXPECT_THROW(slurm_first_host("n]1["), ddp::Error);
  EXPECT_THROW(slurm_first_host(""), ddp::Error);
}

TEST(DistEnv, OpenMpi) {
  DistEnv e = parse({{"OMPI_COMM_WORLD_RANK", "3"},
                     {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // single node: local default
  auto err = error_of({{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_NE(err.find("MASTER_ADDR is not set"), std::string::npos) << err;
  EXPECT_NE(err.find("mpirun"), std::string::npos) << err;
  err = error_of({{"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_NE(err.find("OMPI_COMM_WORLD_SIZE is not set"), std::string::npos) << err;
}

TEST(DistEnv, TorchrunWinsOverSlurm) {
  DistEnv e = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(e.launcher, "torchrun/ddprun");
  EXPECT_EQ(e.rank, 1);
}

TEST(DistEnv, SelectCudaDeviceWithoutGpu) {
  if (ddp::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(select_cuda_device(3), -1);
}

// ---- which store, and where rank 0 listens (store_setup.h) --------------------------------------

#include "runtime/distributed/store_setup.h"

namespace {
std::map<std::string, std::string> torchrun_vars(int rank) {
  return {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", "2"},      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
}
}  // namespace

TEST(StoreChoice, TorchrunsAgentStoreIsUsedAndNamespacedByRunAndAttempt) {
  auto vars = torchrun_vars(0);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["TORCHELASTIC_RUN_ID"] = "job42";
  vars["TORCHELASTIC_RESTART_COUNT"] = "1";
  DistEnv e = parse(vars);
  EXPECT_EQ(e.store, StoreKind::Torch);
  EXPECT_EQ(e.run_id, "job42");
  EXPECT_EQ(e.restart_count, 1);
  StorePlan p = plan_store(e);
  EXPECT_FALSE(p.host_server);  // the agent hosts it; rank 0 must not take the port
  EXPECT_EQ(p.address.kind, StoreKind::Torch);
  EXPECT_EQ(p.address.key_prefix, "ddp/job42/attempt_1/");
  EXPECT_EQ(p.warning, "");
  // A run token does not apply to PyTorch's store: rank 0 says so.
  vars["DDP_RUN_TOKEN"] = "abc";
  EXPECT_NE(plan_store(parse(vars)).warning.find("does not apply"), std::string::npos);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(parse(vars).store, StoreKind::Ddp);
}

TEST(StoreChoice, ExplicitSelectionAndBadValuesNameTheVariable) {
  auto vars = torchrun_vars(1);
  vars["DDP_STORE"] = "torch";
  vars["DDP_TORCH_STORE_PROTOCOL"] = "2";
  DistEnv e = parse(vars);
  EXPECT_EQ(e.store, StoreKind::Torch);
  EXPECT_EQ(e.torch_protocol, TorchProtocol::V2);
  vars["DDP_STORE"] = "pytorch";
  EXPECT_NE(error_of(vars).find("DDP_STORE='pytorch'"), std::string::npos) << error_of(vars);
  vars["DDP_STORE"] = "ddp";
  vars["DDP_TORCH_STORE_PROTOCOL"] = "3";
  EXPECT_NE(error_of(vars).find("DDP_TORCH_STORE_PROTOCOL='3'"), std::string::npos);
  vars.erase("DDP_TORCH_STORE_PROTOCOL");
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "maybe";
  EXPECT_NE(error_of(vars).find("TORCHELASTIC_USE_AGENT_STORE='maybe'"), std::string::npos);
}

TEST(StoreChoice, WithoutATokenRankZeroWarnsAndListensOnMasterAddrOnly) {
  auto vars = torchrun_vars(0);
  vars["MASTER_ADDR"] = "127.0.0.1";
  StorePlan p = plan_store(parse(vars));
  EXPECT_TRUE(p.host_server);
  EXPECT_EQ(p.bind_host, "127.0.0.1");
  EXPECT_NE(p.warning.find("no DDP_RUN_TOKEN"), std::string::npos) << p.warning;
  EXPECT_NE(p.warning.find("export DDP_RUN_TOKEN="), std::string::npos) << p.warning;
  vars["DDP_RUN_TOKEN"] = "t";
  EXPECT_EQ(plan_store(parse(vars)).warning, "");
  // Only rank 0 hosts (and warns).
  EXPECT_FALSE(plan_store(parse(torchrun_vars(1))).host_server);
  EXPECT_EQ(plan_store(parse(torchrun_vars(1))).warning, "");
  // Multi-node with a MASTER_ADDR that resolves to loopback here: other nodes must reach it, listen on all.
  auto multi = torchrun_vars(0);
  multi["WORLD_SIZE"] = "4";
  multi["MASTER_ADDR"] = "localhost";
  EXPECT_EQ(plan_store(parse(multi)).bind_host, "");
}

TEST(StoreChoice, Ipv6MasterAddrInBracketsIsAccepted) {
  auto vars = torchrun_vars(0);
  vars["MASTER_ADDR"] = "[::1]";
  EXPECT_EQ(parse(vars).master_addr, "::1");
}
