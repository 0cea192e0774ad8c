// bucket_sim.h - predicts a DDP step's time for any bucket cap without running it: buckets are assigned
// exactly like the reducer (sim/bucket_assignment.h, first bucket capped at first_bucket_mb), each bucket is
// launched in index order once it and every earlier bucket are full, and a single communication channel runs
// the all-reduces one after another, each costing NetworkModel::allreduce_seconds (reduce_scatter_seconds
// for ZeRO-2/3's buckets: SimOptions::collective). simulate_layout takes the buckets as given instead
// (ZeRO-3: one per unit, whatever the cap).
//
//   step = forward + backward_end + exposed + optimizer + other
//   backward_end = backward compute + gradient copies into the buckets (all bytes / copy bandwidth)
//                  + comm_cpu_share * (all-reduce time overlapping backward)
//   exposed      = max(0, end of the last all-reduce - backward_end) + write-back copy (all bytes / copy bw)
//
// Inputs: the parameters (name, bytes, dtype, a relative backward cost), when each gradient becomes ready
// (measured from a trace, or estimate_ready_times: backward time shared in proportion to cost, in reverse
// registration order), the compute times and the network model. Formulas and limits: docs/simulator.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/sim/network_model.h"

namespace ddp::sim {

struct SimParam {
  std::string name;
  int64_t bytes = 0;
  DType dtype = DType::F32;
  // Relative backward cost (e.g. FLOPs, or numel for matmul weights); only ratios matter.
  double backward_cost = 0;
};

// Compute times of one step on one rank, measured without communication (e.g. bench_e2e --mode nosync).
struct ComputeTimes {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  // Per-step time outside the three (loop overhead, waiting for a slower rank): measured step minus the sum.
  double other_s = 0;
};

struct SimOptions {
  int world = 2;
  NetworkModel network;
  double first_bucket_mb = 1.0;
  bool overlap = true;  // false: every all-reduce waits for the end of backward (DDPOptions.overlap=false)
  // What each bucket's communication is: an all-reduce (DDP) or a reduce-scatter (ZeRO-2/3).
  Collective collective = Collective::Allreduce;
  // Pack buckets in the ready order (what the reducer rebuilds its buckets from after the first iteration);
  // false: in reverse registration order, as a reducer that has not rebuilt them (ZeRO-2 never does).
  bool pack_in_ready_order = true;
  // Bytes per second of the reducer's gradient copies (into the bucket, back to .grad); 0: copies are free.
  double copy_bytes_per_s = 0;
  // Fraction of a core an all-reduce takes from the backward thread while both run (0..1). 0 on GPUs (NCCL
  // runs on the GPU's copy engines and SMs the compute does not need); about 1 for Gloo over loopback TCP
  // when the ranks fill the cores: the "network" is the CPUs copying and summing, so overlapped communication
  // stretches backward by that much.
  double comm_cpu_share = 0;
};

struct SimBucket {
  size_t index = 0;
  std::vector<size_t> params;  // indices into the parameter list
  int64_t bytes = 0;
  double ready_s = 0;   // all gradients copied in (seconds since backward start)
  double launch_s = 0;  // it and every earlier bucket ready
  double start_s = 0;   // the channel is free
  double end_s = 0;
};

struct SimResult {
  double cap_mb = 0;
  std::vector<SimBucket> buckets;
  double backward_end_s = 0;  // since backward start
  double comm_busy_s = 0;     // sum of all-reduce durations
  double comm_end_s = 0;
  double exposed_s = 0;
  double step_s = 0;
};

// Gradient ready times (seconds since backward start) when the backward time is shared by backward_cost and
// gradients arrive in reverse registration order: param i is ready once every param after it and itself ran.
// All costs zero: ready times spread evenly.
std::vector<double> estimate_ready_times(const std::vector<SimParam>& params, double backward_s);

// One step at `cap_mb`. ready_s[i] is parameter i's ready time; the bucket order is the ready order (what the
// reducer rebuilds its buckets from after the first iteration), ties in reverse registration order, or
// reverse registration order (SimOptions::pack_in_ready_order false).
SimResult simulate_step(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                        double cap_mb, const ComputeTimes& compute, const SimOptions& options);

// The same step with the buckets given (parameter indices per bucket, in launch order; each parameter once),
// as ReducerOptions::layout gives them (ZeRO-3's units): no cap, so the result's cap_mb is 0.
SimResult simulate_layout(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                          const std::vector<std::vector<size_t>>& buckets, const ComputeTimes& compute,
                          const SimOptions& options);

std::vector<SimResult> sweep_caps(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                                  const std::vector<double>& caps_mb, const ComputeTimes& compute,
                                  const SimOptions& options);

// Index of the result with the lowest predicted step time (the first one on a tie). Empty input is an error.
size_t recommend_cap(const std::vector<SimResult>& results);

// A fixed-width table: cap, buckets, comm busy, exposed, step (ms), samples/s when samples_per_step > 0, and
// a '<' on the recommended row.
std::string format_sweep(const std::vector<SimResult>& results, size_t recommended, double samples_per_step);

}  // namespace ddp::sim
