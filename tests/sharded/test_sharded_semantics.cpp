// test_sharded_semantics.cpp - the semantics grid, sharded vs plain (issue 36). Every usage pattern that
// plain DDP + an optimizer supports is one row of kPatterns; the grid crosses each row with ZeRO stages 0-3,
// worlds 1-3, the shm and gloo backends and (ZeRO-3) prefetch depths 0-2, and every case must end, on every
// rank, bitwise equal to rank 0 and within 1e-12 (float64) of plain DDP (stage 0, same world and backend) -
// or be refused on every rank with the error the row names. The Join grid runs the same rows with uneven step
// counts (rank r runs 4 - r steps) at worlds 2 and 3. One gtest per row, so a failure names its pattern; each
// failing case is named in full by its SCOPED_TRACE. semantics_grid.{h,cpp} hold the model and the loop.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tests/sharded/semantics_grid.h"
#include "tests/support/ddp_test_util.h"

using namespace ddp::testing;
using namespace ddp::testing::grid;

namespace {

constexpr const char* kNotOneStepPerBackward =
    "under Join every synchronized backward must be followed by exactly one optimizer step";

// The table. Each row: what the loop does differently from "one synchronized backward, step, zero_grad".
const std::vector<Pattern>& patterns() {
  static const std::vector<Pattern> rows = [] {
    std::vector<Pattern> t;
    t.push_back({.name = "one backward per step"});
    // Under Join a joined rank shadows one step of a sharded optimizer (stages 1-3) per synchronized backward
    // of the others: these rows are refused there, by name, on every rank (plain DDP's optimizer is local).
    const std::map<int, std::string> one_step_per_backward = {
        {1, kNotOneStepPerBackward}, {2, kNotOneStepPerBackward}, {3, kNotOneStepPerBackward}};
    t.push_back({.name = "two synchronized backwards before a step",
                 .backwards = 2,
                 .join_refused = one_step_per_backward});
    t.push_back({.name = "two synchronized backwards, AdamW, clipping",
                 .opt = Opt::AdamW,
                 .backwards = 2,
                 .clip = true,
                 .join_refused = one_step_per_backward});
    t.push_back({.name = "a step without backward after zero_grad to none",
                 .step_without_backward = 3,
                 .join_refused = one_step_per_backward});
    t.push_back({.name = "a step without backward after zero_grad in place",
                 .set_to_none = false,
                 .step_without_backward = 3,
                 .join_refused = one_step_per_backward});
    t.push_back({.name = "no_sync accumulation (3 micro-steps)", .accumulation = 3});
    t.push_back({.name = "no_sync accumulation, AdamW, clipping",
                 .opt = Opt::AdamW,
                 .accumulation = 2,
                 .clip = true});
    t.push_back({.name = "clipping by the global norm", .clip = true});
    t.push_back({.name = "a module called twice in one forward", .net = {.twice = true}});
    t.push_back({.name = "tied weights", .net = {.tied = true}, .opt = Opt::AdamW});
    t.push_back({.name = "buffers (BatchNorm)", .net = {.batchnorm = true}});
    t.push_back({.name = "find_unused_parameters (data-chosen experts, a never-used layer)",
                 .net = {.experts = true},
                 .find_unused = true});
    t.push_back({.name = "find_unused_parameters, AdamW, zero_grad in place",
                 .net = {.experts = true},
                 .opt = Opt::AdamW,
                 .find_unused = true,
                 .set_to_none = false});
    t.push_back({.name = "static_graph", .static_graph = true});
    t.push_back(
        {.name = "static_graph, a module called twice", .net = {.twice = true}, .static_graph = true});
    // Every rank raises (a check on data all ranks see) and abandons the iteration. Not under Join: a joined
    // rank has no way to learn that the others abandoned theirs, in plain DDP too.
    t.push_back({.name = "a raise between forward and backward", .raise_step = 1, .join = false});
    // Refused: ZeRO-3 units are gathered one at a time, so a weight of one unit used by another is read
    // while it has no memory; every rank raises in that forward.
    t.push_back({.name = "a weight tied across two ZeRO-3 units",
                 .net = {.tied_across_units = true},
                 .refused = {{3, "has no memory: it is a ZeRO-3 parameter used outside its unit"}}});
    return t;
  }();
  return rows;
}

// The cases of one row: stages 0-3 x worlds x backends, ZeRO-3 also at prefetch depths. Stage 0 comes first
// in each (world, backend): it is the reference of the others. The whole cross product (worlds 1-3, both
// backends everywhere, every prefetch depth: 36 cases a row, 24 under Join) takes about 170 s on a 2-core
// machine, so by default two axes are sampled, differently in each row (`row`): world 1 on shm only, world 3
// on one backend (shm in even rows, gloo in odd ones), and one prefetch depth per (world, backend), rotating
// through 0, 1, 2. DDP_SEMANTICS_GRID_FULL=1 runs the whole cross product.
std::vector<Case> cases_of(const Pattern& p, size_t row, bool join) {
  const bool full =
      std::getenv("DDP_SEMANTICS_GRID_FULL") && std::string(std::getenv("DDP_SEMANTICS_GRID_FULL")) == "1";
  std::vector<Case> out;
  int combo = 0;
  for (int world : join ? std::vector<int>{2, 3} : std::vector<int>{1, 2, 3})
    for (const std::string backend : {"shm", "gloo"}) {
      const bool sampled_out =
          (world == 1 && backend == "gloo") || (world == 3 && (backend == "shm") != (row % 2 == 0));
      if (!full && sampled_out) continue;
      const int depth = static_cast<int>((row + static_cast<size_t>(combo++)) % 3);
      for (int stage : {0, 1, 2, 3})
        for (int prefetch : stage == 3 && full ? std::vector<int>{0, 1, 2} : std::vector<int>{depth}) {
          Case c;
          c.pattern = &p;
          c.stage = stage;
          c.world = world;
          c.backend = backend;
          c.prefetch = prefetch;
          c.uneven = join ? 1 : 0;
          out.push_back(c);
        }
    }
  return out;
}

void expect_grid(size_t row, bool join) {
  const Pattern& p = patterns()[row];
  const auto t0 = std::chrono::steady_clock::now();
  const auto start = initial_params(p);
  Outcome plain;
  int runs = 0;
  for (const Case& c : cases_of(p, row, join)) {
    SCOPED_TRACE(c.name());
    const Outcome got = run_case(c);
    ++runs;
    const auto& refusals = join && !p.join_refused.empty() ? p.join_refused : p.refused;
    auto refused = refusals.find(c.stage);
    if (refused != refusals.end()) {
      for (int r = 0; r < c.world; ++r)
        EXPECT_NE(got.errors[r].find(refused->second), std::string::npos)
            << "rank " << r << " was not refused with \"" << refused->second << "\": " << got.errors[r];
      continue;
    }
    bool ok = true;
    for (int r = 0; r < c.world; ++r) {
      EXPECT_EQ(got.errors[r], "") << "rank " << r;
      ok = ok && got.errors[r].empty();
    }
    if (!ok) continue;
    for (int r = 1; r < c.world; ++r)
      EXPECT_TRUE(got.params[r] == got.params[0]) << "rank " << r << "'s parameters differ from rank 0's";
    if (c.stage == 0) {
      plain = got;
      // The run moved the parameters (a run that never stepped would be "equal" too).
      EXPECT_GT(max_relative_difference(plain.params[0], start), 1e-3);
      continue;
    }
    ASSERT_FALSE(plain.params.empty()) << "plain DDP failed, nothing to compare with";
    EXPECT_LT(max_relative_difference(got.params[0], plain.params[0]), 1e-12)
        << "parameters differ from plain DDP";
    // Buffers: each rank's own (its last forward updated its running statistics with its own batch).
    for (int r = 0; r < c.world; ++r)
      if (!plain.buffers[r].empty())
        EXPECT_LT(max_relative_difference(got.buffers[r], plain.buffers[r]), 1e-12)
            << "rank " << r << "'s buffers differ from plain DDP's";
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[grid] %s%s: %d cases in %.2f s\n", p.name.c_str(), join ? " (Join)" : "", runs, s);
}

std::string test_name(const Pattern& p) {
  std::string n;
  for (char ch : p.name) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
}

}  // namespace

// The rows of the Join grid: those plain DDP itself supports under Join.
std::vector<size_t> join_rows() {
  std::vector<size_t> out;
  for (size_t i = 0; i < patterns().size(); ++i)
    if (patterns()[i].join) out.push_back(i);
  return out;
}

std::string row_name(const ::testing::TestParamInfo<size_t>& i) { return test_name(patterns()[i.param]); }

class SemanticsGrid : public ::testing::TestWithParam<size_t> {};
class SemanticsGridJoin : public ::testing::TestWithParam<size_t> {};

TEST_P(SemanticsGrid, EqualsPlainDdpOrIsRefusedOnEveryRank) { expect_grid(GetParam(), false); }

TEST_P(SemanticsGridJoin, UnevenStepsEqualPlainDdpOrAreRefusedOnEveryRank) { expect_grid(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Patterns, SemanticsGrid, ::testing::Range<size_t>(0, patterns().size()), row_name);
INSTANTIATE_TEST_SUITE_P(Patterns, SemanticsGridJoin, ::testing::ValuesIn(join_rows()), row_name);
