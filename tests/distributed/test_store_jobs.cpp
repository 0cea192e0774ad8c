// test_store_jobs.cpp - a store server started for one launch (DDP_JOB_ID) refuses a client of another launch
// that has the same run token (two jobs given the same MASTER_PORT and an exported DDP_RUN_TOKEN) with an
// error that says so and how to fix it, before that client can read or write a key; clients of the same job,
// and clients or servers without a job id (launched by hand, by other launchers), are not checked.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "runtime/core/error.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"
#include "runtime/distributed/store_setup.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

namespace {
StoreAddress address(int port, const std::string& job) {
  StoreAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  a.token = "the-shared-token";
  a.job_id = job;
  return a;
}
}  // namespace

TEST(StoreJobs, AServerRefusesAClientOfAnotherJobByName) {
  StoreServer server("127.0.0.1", 0, "the-shared-token", {}, "1111aaaa");
  try {
    Store intruder(address(server.port(), "2222bbbb"), 5s);
    intruder.set("pg0/shm/seg/1", "forged");
    FAIL() << "a client of another job was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("belongs to another job"), std::string::npos) << m;
    EXPECT_NE(m.find("1111aaaa"), std::string::npos) << m;
    EXPECT_NE(m.find("2222bbbb"), std::string::npos) << m;
    EXPECT_NE(m.find("--standalone"), std::string::npos) << m;
    EXPECT_EQ(m.find("wrong run token"), std::string::npos) << "the token was right: " << m;
  }
  Store own(address(server.port(), "1111aaaa"), 5s);
  EXPECT_EQ(own.num_keys(), 0) << "the refused client wrote something";
  own.set("k", "v");
  EXPECT_EQ(own.get("k"), "v");
}

TEST(StoreJobs, ClientsOrServersWithoutAJobIdAreNotChecked) {
  StoreServer with_job("127.0.0.1", 0, "the-shared-token", {}, "1111aaaa");
  Store no_job(address(with_job.port(), ""), 5s);
  no_job.set("a", "1");
  StoreServer without_job("127.0.0.1", 0, "the-shared-token");
  Store any_job(address(without_job.port(), "2222bbbb"), 5s);
  any_job.set("b", "2");
  EXPECT_EQ(any_job.get("b"), "2");
}

// The launcher environment carries the job id to both sides: rank 0's server and every rank's client.
TEST(StoreJobs, TheJobIdGoesFromTheEnvironmentToTheStorePlan) {
  DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.local_world_size = 2;
  env.job_id = "1111aaaa";
  env.token = "the-shared-token";
  EXPECT_EQ(plan_store(env).address.job_id, "1111aaaa");
  const DistEnv parsed = init_from_env([](const std::string& name) -> std::optional<std::string> {
    if (name == "RANK") return "0";
    if (name == "WORLD_SIZE") return "2";
    if (name == "LOCAL_RANK") return "0";
    if (name == "LOCAL_WORLD_SIZE") return "2";
    if (name == "MASTER_ADDR") return "127.0.0.1";
    if (name == "MASTER_PORT") return "29512";
    if (name == "DDP_JOB_ID") return "1111aaaa";
    return std::nullopt;
  });
  EXPECT_EQ(parsed.job_id, "1111aaaa");
}
