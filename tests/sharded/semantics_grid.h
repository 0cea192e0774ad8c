// semantics_grid.h - the pieces of the semantics grid (test_sharded_semantics.cpp, issue 36): one training
// loop that every ZeRO stage runs the same way (stage 0 plain DistributedDataParallel + SGD/AdamW, stage 1
// ZeroRedundancyOptimizer over it, stages 2 and 3 ShardedDataParallel + ShardedOptimizer), a small float64
// model whose switches make the usage patterns (a module called twice, tied weights, BatchNorm buffers,
// data-chosen experts with a never-used layer), and the table row that says what one pattern does.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp::testing::grid {

enum class Opt { SGD, AdamW };

// The model's switches (semantics_grid.cpp: GridNet).
struct NetConfig {
  bool twice = false;              // items.1 runs twice in one forward
  bool tied = false;               // "mix" and "again" share one weight (both in the root unit of ZeRO-3)
  bool tied_across_units = false;  // items.1 also uses items.2's weight (two ZeRO-3 units share it)
  bool batchnorm = false;          // a BatchNorm2d "norm" (buffers: running mean and variance)
  bool experts = false;  // experts.0 or experts.1 by the sign of the batch, and a never-used "spare"
};

// One usage pattern of plain DDP + an optimizer: one row of the table.
struct Pattern {
  std::string name;
  NetConfig net;
  Opt opt = Opt::SGD;
  bool find_unused = false;
  bool static_graph = false;
  int backwards = 1;               // synchronized backwards before each step (no zero_grad between them)
  int accumulation = 1;            // no_sync micro-steps before each synchronized backward, counted with it
  bool clip = false;               // clip the global gradient norm before each step
  bool set_to_none = true;         // zero_grad after each step: to none, or zeros in place
  int step_without_backward = -1;  // in this step: no forward, no backward, just step() and zero_grad()
  int raise_step = -1;             // in this step every rank raises between forward and backward, abandons it
  bool join = true;  // also in the Join grid (false: plain DDP itself cannot do it under Join; see table)
  // Stage -> the words every rank's error must contain (the stage refuses this pattern); absent: must equal
  // plain DDP. join_refused: the same under Join (defaults to refused).
  std::map<int, std::string> refused, join_refused;
};

// One case: a pattern at one stage, world, backend and (ZeRO-3) prefetch depth; uneven > 0: under Join, rank
// r runs steps - uneven * r steps.
struct Case {
  const Pattern* pattern = nullptr;
  int stage = 0;
  int world = 2;
  std::string backend = "shm";
  int prefetch = 1;
  int steps = 4;
  int uneven = 0;
  std::string name() const;
};

// What a case ended with on every rank: the parameters and buffers (whole, gathered), and what it caught.
struct Outcome {
  std::vector<std::vector<std::vector<double>>> params, buffers;  // per rank
  std::vector<std::string> errors;                                // per rank, "" when none
};

Outcome run_case(const Case& c);
// The parameters of the model before any step (to check that a run moved them).
std::vector<std::vector<double>> initial_params(const Pattern& p);

}  // namespace ddp::testing::grid
