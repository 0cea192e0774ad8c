// network_model.h - the alpha-beta cost of one all-reduce, for the bucket simulator (bucket_sim.h).
//
// A message of `bytes` between two ranks costs alpha + bytes / B (alpha: latency in seconds, B: bandwidth in
// bytes per second). An all-reduce over n ranks then costs, by algorithm:
//   ring: 2(n-1) steps (reduce-scatter + all-gather), each moving bytes/n:
//           t = 2(n-1)/n * bytes / B + 2(n-1) * alpha
//   tree: reduce up and broadcast down a binary tree of depth log2(n), whole message per level:
//           t = 2 log2(n) * (alpha + bytes / B)
// n = 1 costs 0. A reduce-scatter (ZeRO-2/3's gradient collective: each rank keeps 1/n of the sum) is the
// ring's first half with either algorithm (NCCL, Gloo and shm run it as a ring):
//   reduce-scatter: t = (n-1)/n * bytes / B + (n-1) * alpha
// All are linear in bytes, so alpha and B can be fitted by least squares from measured (bytes, seconds)
// points of one world size and collective (fit_network_model).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::sim {

enum class AllreduceAlgorithm { Ring, Tree };
// "ring" / "tree"; parse throws ddp::Error naming the bad value.
const char* algorithm_name(AllreduceAlgorithm a);
AllreduceAlgorithm parse_algorithm(const std::string& s);

// Which collective a bucket runs: plain DDP all-reduces, ZeRO-2/3 reduce-scatter ("all-reduce" /
// "reduce-scatter" by collective_name).
enum class Collective { Allreduce, ReduceScatter };
const char* collective_name(Collective c);

struct NetworkModel {
  double alpha_s = 0;                  // per-message latency, seconds
  double bandwidth_bytes_per_s = 1e9;  // B
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::Ring;

  // Seconds for one all-reduce of `bytes` over `world` ranks (world >= 1, bytes >= 0).
  double allreduce_seconds(double bytes, int world) const;
  // Seconds for one reduce-scatter of `bytes` (the whole input) over `world` ranks; or either collective.
  double reduce_scatter_seconds(double bytes, int world) const;
  double seconds(Collective c, double bytes, int world) const;
  // "ring, alpha 1.23 ms, B 0.77 GB/s".
  std::string describe() const;
};

// One measurement: `seconds` for `count` all-reduces (one after another on one channel) moving `bytes` in
// all. An isolated all-reduce benchmark gives count 1; a training step's exposed communication without
// overlap gives count = its buckets and bytes = all gradients (fit_in_training_network, in_training_fit.h).
struct MeasuredAllreduce {
  double bytes = 0;
  double seconds = 0;
  double count = 1;
};

// Least-squares fit (of relative errors) of alpha and B (algorithm given) to points measured at one world
// size (>= 2), of all-reduces or (`collective`) reduce-scatters: seconds = count * steps * alpha + volume *
// bytes / B (steps, volume: the collective's multipliers above). Needs points that separate the two terms
// (with count 1: at least two distinct sizes); a fit giving a non-positive bandwidth is an error (the points
// do not grow with size); a negative latency is clamped to alpha = 0 (B refitted through the origin).
NetworkModel fit_network_model(const std::vector<MeasuredAllreduce>& points, int world,
                               AllreduceAlgorithm algorithm, Collective collective = Collective::Allreduce);

}  // namespace ddp::sim
