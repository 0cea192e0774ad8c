// in_training_fit.h - calibrates the all-reduce cost (network_model.h) for the conditions inside training
// from the exposed communication of steps run without overlap (bench_e2e --mode nooverlap).
//
// Without overlap every bucket's all-reduce starts after backward, one after another on one channel, and the
// reducer then copies the reduced buckets back into .grad; so each such run gives one equation
//   exposed = sum over its k buckets of (steps * alpha + volume * bytes_b / B) + all bytes / copy bandwidth
//           = k * steps * alpha + volume * all bytes / B + write-back,
// and runs of models with different bytes per bucket determine alpha_eff and B_eff (fit_network_model with
// count = k). Unlike an isolated all-reduce benchmark, these include what a collective costs among busy
// ranks: waiting for the slower rank (skew), the communication thread being scheduled on cores the ranks
// compute on, and the bucket bookkeeping. Use them to predict the loaded machine they were measured on; use
// the isolated fit for a real network (docs/simulator.md).
#pragma once
#include <string>
#include <vector>

#include "runtime/sim/network_model.h"

namespace ddp::sim {

// One nooverlap run (medians over its steps).
struct ExposedCommunication {
  std::string label;     // names the run in errors, e.g. "mlp nooverlap"
  int buckets = 0;       // all-reduces per step
  double bytes = 0;      // all gradient bytes per step
  double exposed_s = 0;  // measured exposed communication per step (all-reduces + write-back)
};

// alpha_eff and B_eff from at least two runs at one world size (>= 2) whose bytes per bucket differ. The
// write-back (bytes / copy_bytes_per_s; 0: free) is taken off each run's exposed time first; a run where
// nothing is left is an error naming it.
NetworkModel fit_in_training_network(const std::vector<ExposedCommunication>& runs, int world,
                                     AllreduceAlgorithm algorithm, double copy_bytes_per_s);

}  // namespace ddp::sim
