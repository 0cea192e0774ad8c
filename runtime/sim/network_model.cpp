// network_model.cpp - the ring and tree all-reduce formulas, the ring reduce-scatter, and their least-squares
// fit.
#include "runtime/sim/network_model.h"

#include <cmath>
#include <sstream>

#include "runtime/core/error.h"

namespace ddp::sim {

const char* algorithm_name(AllreduceAlgorithm a) { return a == AllreduceAlgorithm::Ring ? "ring" : "tree"; }

AllreduceAlgorithm parse_algorithm(const std::string& s) {
  if (s == "ring") return AllreduceAlgorithm::Ring;
  if (s == "tree") return AllreduceAlgorithm::Tree;
  DDP_FAIL("all-reduce algorithm '", s, "' is unknown; use 'ring' or 'tree'");
}

const char* collective_name(Collective c) {
  return c == Collective::Allreduce ? "all-reduce" : "reduce-scatter";
}

namespace {
// t = steps * alpha + volume * bytes / B: the (steps, volume) multipliers of each algorithm and collective.
void multipliers(AllreduceAlgorithm a, Collective c, int world, double* steps, double* volume) {
  const double n = world;
  if (c == Collective::ReduceScatter) {  // the ring's first half, whatever the all-reduce algorithm
    *steps = n - 1;
    *volume = (n - 1) / n;
  } else if (a == AllreduceAlgorithm::Ring) {
    *steps = 2 * (n - 1);
    *volume = 2 * (n - 1) / n;
  } else {
    *steps = 2 * std::log2(n);
    *volume = 2 * std::log2(n);
  }
}
}  // namespace

double NetworkModel::seconds(Collective c, double bytes, int world) const {
  DDP_CHECK(world >= 1, collective_name(c), " time: world size ", world, " must be >= 1");
  DDP_CHECK(bytes >= 0, collective_name(c), " time: bytes ", bytes, " must be >= 0");
  DDP_CHECK(bandwidth_bytes_per_s > 0, "network model: bandwidth ", bandwidth_bytes_per_s,
            " bytes/s must be > 0");
  if (world == 1) return 0;
  double steps = 0, volume = 0;
  multipliers(algorithm, c, world, &steps, &volume);
  return steps * alpha_s + volume * bytes / bandwidth_bytes_per_s;
}

double NetworkModel::allreduce_seconds(double bytes, int world) const {
  return seconds(Collective::Allreduce, bytes, world);
}

double NetworkModel::reduce_scatter_seconds(double bytes, int world) const {
  return seconds(Collective::ReduceScatter, bytes, world);
}

std::string NetworkModel::describe() const {
  std::ostringstream os;
  os.precision(4);
  os << algorithm_name(algorithm) << ", alpha " << alpha_s * 1e3 << " ms, B " << bandwidth_bytes_per_s / 1e9
     << " GB/s";
  return os.str();
}

NetworkModel fit_network_model(const std::vector<MeasuredAllreduce>& points, int world,
                               AllreduceAlgorithm algorithm, Collective collective) {
  DDP_CHECK(world >= 2, "fit_network_model: world size ", world, " must be >= 2 (one rank moves nothing)");
  DDP_CHECK(points.size() >= 2, "fit_network_model: ", points.size(),
            " measured point(s); need at least two message sizes");
  double steps = 0, volume = 0;
  multipliers(algorithm, collective, world, &steps, &volume);
  // Linear regression seconds = a * count + b * bytes (a = steps * alpha, b = volume / B), weighted by
  // 1 / seconds^2: it minimizes the relative error, so the small messages (which fix alpha) count as much as
  // the large ones. With count 1 everywhere it is the usual line with intercept a.
  double skk = 0, skx = 0, sxx = 0, sky = 0, sxy = 0;
  for (auto& p : points) {
    DDP_CHECK(p.bytes >= 0 && p.seconds > 0 && p.count >= 1, "fit_network_model: bad measurement (", p.count,
              " all-reduce(s) of ", p.bytes, " bytes in ", p.seconds,
              " s); times must be > 0 and the count >= 1");
    const double w = 1 / (p.seconds * p.seconds);
    skk += w * p.count * p.count;
    skx += w * p.count * p.bytes;
    sxx += w * p.bytes * p.bytes;
    sky += w * p.count * p.seconds;
    sxy += w * p.bytes * p.seconds;
  }
  const double denom = skk * sxx - skx * skx;
  DDP_CHECK(denom > 1e-12 * skk * sxx,
            "fit_network_model: every point moves the same bytes per all-reduce, which cannot separate "
            "latency from bandwidth; need at least two distinct sizes");
  double b = (skk * sxy - skx * sky) / denom;
  double a = (sky - b * skx) / skk;
  if (a < 0) {  // latency cannot be negative: fit through the origin instead
    a = 0;
    b = sxy / sxx;
  }
  DDP_CHECK(b > 0, "fit_network_model: the measured times do not grow with message size (slope ", b,
            " s/byte); measure larger messages");
  NetworkModel m;
  m.algorithm = algorithm;
  m.alpha_s = a / steps;
  m.bandwidth_bytes_per_s = volume / b;
  return m;
}

}  // namespace ddp::sim
