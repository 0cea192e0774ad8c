// test_ft_units.cpp - the pieces of per-step fault tolerance alone (docs/fault-tolerance.md): the membership
// records, the coordinator's decisions over a real store with heartbeats written by the test (lost by process
// end, by a silent heartbeat, never for a slow one that beats; joins; two at once; --min-ranks; no join once a
// member finished), the client's epoch watch and lost-coordinator error, and the elastic sampler's rule over
// generated sequences of world sizes (each sample once, weights that make the mean over the step's samples).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/data/elastic_sampler.h"
#include "runtime/distributed/ft_client.h"
#include "runtime/distributed/ft_coordinator.h"
#include "runtime/distributed/store.h"
#include "runtime/distributed/store_server.h"

namespace ddp {
namespace {

using namespace dist::ft;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(FtMembership, EncodeDecodeRoundTrip) {
  Membership m;
  m.epoch = 7;
  m.members = {{0, 0}, {2, 1}, {3, 0}};
  m.reason = "rank 1 lost (no heartbeat for 2.0 s); world 4 -> 3";
  m.step = 412;
  const Membership back = Membership::decode(m.encode());
  EXPECT_EQ(back.epoch, 7);
  EXPECT_EQ(back.members, m.members);
  EXPECT_EQ(back.reason, m.reason);
  EXPECT_EQ(back.step, 412);
  EXPECT_FALSE(back.failed);
  EXPECT_EQ(back.rank_of(2), 1);
  EXPECT_EQ(back.rank_of(1), -1);
  EXPECT_EQ(back.slot_list(), "0,2,3");
  Membership none;
  none.failed = true;
  none.reason = "below --min-ranks";
  EXPECT_TRUE(Membership::decode(none.encode()).members.empty());
  EXPECT_TRUE(Membership::decode(none.encode()).failed);
  EXPECT_THROW(Membership::decode("garbage"), Error);
  EXPECT_FALSE(Heartbeat::decode("x y").has_value());
}

struct StoreFixture : ::testing::Test {
  dist::StoreServer server{"127.0.0.1", 0, "tok"};
  std::shared_ptr<dist::Store> store = std::make_shared<dist::Store>("127.0.0.1", server.port(), "tok");
  void beat(int slot, int incarnation, int64_t n, int64_t step = 0) {
    store->set(heartbeat_key(slot), Heartbeat{incarnation, n, step}.encode());
  }
};

using FtCoordinator = StoreFixture;

TEST_F(FtCoordinator, PublishesEpochZeroWithEverySlot) {
  Coordinator c(store, {.slots = 3});
  c.start(Clock::now());
  EXPECT_EQ(store->get(kEpochKey), "0");
  const Membership m = Membership::decode(store->get(members_key(0)));
  EXPECT_EQ(m.size(), 3);
  EXPECT_FALSE(c.tick(Clock::now()).has_value());  // no heartbeat yet: within the first-beat timeout
}

// Generated: for each way a member can be lost (process end reported, heartbeat silent, first heartbeat never
// written) and each slot, the next epoch holds exactly the others, names why, and counts the world.
TEST_F(FtCoordinator, EachWayOfLosingEachSlotMakesOneEpochWithoutIt) {
  for (const std::string way : {"ended", "silent", "never_beat"}) {
    for (int lost = 0; lost < 3; ++lost) {
      SCOPED_TRACE(way + " slot " + std::to_string(lost));
      for (int s = 0; s < 3; ++s) store->delete_key(heartbeat_key(s));
      Coordinator c(store, {.slots = 3, .deadline = milliseconds(200), .first_beat_timeout = milliseconds(400)});
      auto t = Clock::now();
      c.start(t);
      for (int s = 0; s < 3; ++s)
        if (!(way == "never_beat" && s == lost)) beat(s, 0, 1);
      ASSERT_FALSE(c.tick(t).has_value());
      if (way == "ended") c.worker_ended(lost, 0, true, "SIGKILL (signal 9)");
      // The others keep beating; time moves past the deadline (and the first-beat timeout).
      for (int s = 0; s < 3; ++s)
        if (s != lost) beat(s, 0, 2);
      const auto later = way == "ended" ? t + milliseconds(10) : t + milliseconds(500);
      auto m = c.tick(later);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->epoch, 1);
      EXPECT_EQ(m->size(), 2);
      EXPECT_EQ(m->rank_of(lost), -1);
      EXPECT_NE(m->reason.find("rank " + std::to_string(lost) + " lost"), std::string::npos) << m->reason;
      EXPECT_NE(m->reason.find("world 3 -> 2"), std::string::npos) << m->reason;
      EXPECT_EQ(Membership::decode(store->get(members_key(1))).slot_list(), m->slot_list());
      ASSERT_EQ(c.removed_last().size(), 1u);
      EXPECT_EQ(c.removed_last()[0].slot, lost);
    }
  }
}

TEST_F(FtCoordinator, ASlowRankThatBeatsIsNeverLost) {
  Coordinator c(store, {.slots = 2, .deadline = milliseconds(100)});
  auto t = Clock::now();
  c.start(t);
  // Ten deadlines pass; slot 1 commits no step at all but its heartbeat moves: nobody is lost.
  for (int i = 1; i <= 20; ++i) {
    beat(0, 0, i, i);
    beat(1, 0, i, 0);
    EXPECT_FALSE(c.tick(t + milliseconds(50 * i)).has_value()) << "tick " << i;
  }
}

// A rank removed for a silent heartbeat (a cut link) that beats again is not let back in: only a newer
// incarnation (a replacement) joins.
TEST_F(FtCoordinator, ARemovedIncarnationThatBeatsAgainStaysOut) {
  Coordinator c(store, {.slots = 2, .deadline = milliseconds(100)});
  auto t = Clock::now();
  c.start(t);
  beat(0, 0, 1);
  beat(1, 0, 1);
  c.tick(t);
  beat(0, 0, 2);
  auto m = c.tick(t + milliseconds(150));  // slot 1 silent past the deadline
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rank_of(1), -1);
  beat(0, 0, 3);
  beat(1, 0, 2);  // the link is back
  EXPECT_FALSE(c.tick(t + milliseconds(200)).has_value());
  beat(0, 0, 4);
  beat(1, 1, 0);  // its replacement
  m = c.tick(t + milliseconds(250));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->member_of(1)->incarnation, 1);
}

TEST_F(FtCoordinator, TwoLostInOneTickMakeOneEpochAndBelowMinRanksFails) {
  Coordinator c(store, {.slots = 4, .min_ranks = 3});
  auto t = Clock::now();
  c.start(t);
  for (int s = 0; s < 4; ++s) beat(s, 0, 1);
  c.tick(t);
  c.worker_ended(1, 0, true, "SIGKILL (signal 9)");
  c.worker_ended(2, 0, true, "exit code 3");
  auto m = c.tick(t + milliseconds(1));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->epoch, 1);
  EXPECT_TRUE(m->failed);
  EXPECT_TRUE(c.failed());
  EXPECT_NE(m->reason.find("below --min-ranks 3 (ranks lost: 1, 2)"), std::string::npos) << m->reason;
  EXPECT_FALSE(c.tick(t + milliseconds(2)).has_value());  // a failed job publishes nothing more
}

TEST_F(FtCoordinator, AReplacementJoinsAndAFinishedJobTakesNoMore) {
  Coordinator c(store, {.slots = 3});
  auto t = Clock::now();
  c.start(t);
  for (int s = 0; s < 3; ++s) beat(s, 0, 1);
  c.tick(t);
  c.worker_ended(2, 0, true, "SIGKILL (signal 9)");
  ASSERT_TRUE(c.tick(t + milliseconds(1)).has_value());
  beat(2, 1, 0);  // the replacement's first heartbeat
  auto m = c.tick(t + milliseconds(2));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->epoch, 2);
  EXPECT_EQ(m->size(), 3);
  EXPECT_EQ(m->member_of(2)->incarnation, 1);
  EXPECT_NE(m->reason.find("rank 2 joined (incarnation 1)"), std::string::npos);
  // Another loss and replacement, but a member has finished meanwhile: nobody joins, nobody finished is lost.
  c.worker_ended(1, 0, true, "SIGKILL (signal 9)");
  beat(0, 0, Heartbeat::kFinished, 50);
  ASSERT_TRUE(c.tick(t + milliseconds(3)).has_value());  // slot 1 lost
  beat(2, 1, Heartbeat::kFinished, 50);
  beat(1, 1, 0);
  EXPECT_FALSE(c.tick(t + milliseconds(4)).has_value());
  EXPECT_FALSE(c.tick(t + std::chrono::seconds(10)).has_value()) << "a finished member must never be lost";
}

// The end: once every member's heartbeat says finished, the coordinator names the epoch (the members leave
// only then, so a join decided just before and the end never cross); not before.
TEST_F(FtCoordinator, TheEndIsDeclaredOnceEveryMemberFinished) {
  store->delete_key(kFinishedKey);
  Coordinator c(store, {.slots = 2});
  auto t = Clock::now();
  c.start(t);
  beat(0, 0, Heartbeat::kFinished, 9);
  beat(1, 0, 5, 8);
  EXPECT_FALSE(c.tick(t).has_value());
  EXPECT_FALSE(store->try_get(kFinishedKey).has_value());
  beat(1, 0, Heartbeat::kFinished, 9);
  EXPECT_FALSE(c.tick(t + milliseconds(1)).has_value());
  EXPECT_EQ(store->try_get(kFinishedKey).value_or(""), "0");
}

TEST_F(FtCoordinator, AnotherNodesExitReportLosesItsRank) {
  Coordinator c(store, {.slots = 2});
  auto t = Clock::now();
  c.start(t);
  beat(0, 0, 1);
  beat(1, 0, 1);
  c.tick(t);
  store->set(exit_key(1, 0), "exit code 7");
  auto m = c.tick(t + milliseconds(1));
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->reason.find("rank 1 lost (exit code 7)"), std::string::npos) << m->reason;
}

TEST(FtCoordinatorOptions, BadOptionsAreRefusedByName) {
  dist::StoreServer server{"127.0.0.1", 0, ""};
  auto store = std::make_shared<dist::Store>("127.0.0.1", server.port(), "");
  EXPECT_THROW(Coordinator(store, {.slots = 2, .min_ranks = 3}), Error);
  EXPECT_THROW(Coordinator(store, {.slots = 2, .deadline = milliseconds(0)}), Error);
}

using FtClient = StoreFixture;

TEST_F(FtClient, SeesANewEpochAndCallsBackAtOnce) {
  Coordinator c(store, {.slots = 2});
  c.start(Clock::now());
  std::atomic<int> calls{0};
  Client client(store->clone(), {.slot = 1, .period = milliseconds(10), .deadline = milliseconds(500)});
  client.on_change([&](const std::string& why) {
    EXPECT_NE(why.find("membership epoch 1"), std::string::npos) << why;
    ++calls;
  });
  EXPECT_EQ(client.latest().epoch, 0);
  EXPECT_FALSE(client.wait_for_epoch_after(0, milliseconds(30)).has_value());
  c.worker_ended(0, 0, true, "SIGKILL (signal 9)");
  c.tick(Clock::now());
  const auto m = client.wait_for_epoch_after(0, milliseconds(2000));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->epoch, 1);
  // The callback runs on the heartbeat thread right after the new epoch is visible.
  for (int i = 0; i < 100 && calls.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(client.coordinator_lost().empty());
}

TEST(FtClientLost, AStoreThatGoesAwayIsNamedWithinTheDeadline) {
  auto server = std::make_unique<dist::StoreServer>("127.0.0.1", 0, "tok");
  auto store = std::make_shared<dist::Store>("127.0.0.1", server->port(), "tok");
  Coordinator c(store, {.slots = 1});
  c.start(Clock::now());
  Client client(store->clone(), {.slot = 0, .period = milliseconds(10), .deadline = milliseconds(300)});
  std::atomic<bool> called{false};
  client.on_change([&](const std::string&) { called = true; });
  const auto t0 = Clock::now();
  server.reset();  // ddprun's store is gone
  EXPECT_FALSE(client.wait_for_epoch_after(0, milliseconds(5000)).has_value());
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(waited, 3.0);
  EXPECT_NE(client.coordinator_lost().find("has not answered"), std::string::npos) << client.coordinator_lost();
  for (int i = 0; i < 100 && !called.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(called.load());
}

// The sampler: random worlds per step (as membership changes would make them), over whole epochs of sizes at
// the boundaries (a multiple of world x batch, one more, one less, primes, smaller than one step).
TEST(ElasticSampler, EverySampleOnceAndWeightsGiveTheStepMeanForAnyWorldSequence) {
  std::mt19937_64 rng(7);
  for (int64_t n : {1, 2, 7, 31, 32, 33, 97, 100, 128, 129}) {
    for (int64_t batch : {1, 3, 8}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<int> used(static_cast<size_t>(n), 0);
        int64_t pos = 0;
        while (pos < n) {
          const int world = 1 + static_cast<int>(rng() % 4);
          double weight_sum = 0;
          int64_t covered = 0, end = 0;
          for (int r = 0; r < world; ++r) {
            const auto s = data::elastic_share(n, pos, world, r, batch);
            EXPECT_EQ(s.step_begin, pos);
            EXPECT_LE(s.rows(), batch);
            for (int64_t i = s.begin; i < s.end; ++i) ++used[static_cast<size_t>(i)];
            covered += s.rows();
            weight_sum += s.loss_weight(world) * static_cast<double>(s.step_rows()) / world;
            end = s.step_end;
          }
          EXPECT_EQ(covered, end - pos);
          // DDP averages weight_r * mean_r over the world: the step's mean when weight_r = rows_r * world / rows
          EXPECT_NEAR(weight_sum, static_cast<double>(covered), 1e-9);
          pos = end;
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(used[static_cast<size_t>(i)], 1) << "n " << n << " sample " << i;
      }
    }
  }
  EXPECT_THROW(data::elastic_share(10, 10, 2, 0, 4), Error);
  EXPECT_THROW(data::elastic_share(10, 0, 2, 2, 4), Error);
  const auto ids = data::elastic_indices(10, 1, 0, 0, 10);
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_NE(ids, data::elastic_indices(10, 1, 1, 0, 10)) << "each epoch has its own order";
}

}  // namespace
}  // namespace ddp

// The members of a new epoch wait for each other longer than the old group's collective timeout: one may be held
// in an aborted Gloo send until then (ft_membership.h); and never less than 30 s or 10 heartbeat deadlines.
TEST(FtMembership, MembersWaitLongerThanACollectiveCanHoldOne) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  EXPECT_EQ(ddp::dist::ft::member_arrival_wait(milliseconds(2000), seconds(60)), seconds(70));  // the defaults
  EXPECT_GT(ddp::dist::ft::member_arrival_wait(milliseconds(2000), seconds(60)), seconds(60));
  EXPECT_EQ(ddp::dist::ft::member_arrival_wait(milliseconds(100), seconds(4)), seconds(30));
  EXPECT_EQ(ddp::dist::ft::member_arrival_wait(milliseconds(5000), seconds(4)), seconds(50));
  EXPECT_EQ(ddp::dist::ft::member_arrival_wait(milliseconds(100), seconds(300)), seconds(310));
}
