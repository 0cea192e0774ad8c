// sample_stats.h - order statistics of repeated timings (median, p10, p90, min, max), the numbers the
// benchmarks report and the simulator is calibrated from. Percentiles interpolate linearly between the
// sorted samples (p50 of an even count is the mean of the two middle values).
#pragma once
#include <cstddef>
#include <vector>

namespace ddp::sim {

struct SampleStats {
  size_t count = 0;
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};

// q in [0, 1]; an empty sample is an error.
double percentile(std::vector<double> samples, double q);
SampleStats summarize(const std::vector<double>& samples);

}  // namespace ddp::sim
