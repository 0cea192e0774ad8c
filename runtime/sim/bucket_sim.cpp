// bucket_sim.cpp - the bucket timeline: assignment as the reducer does it, in-order launch, one channel.
#include "runtime/sim/bucket_sim.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/sim/bucket_assignment.h"

namespace ddp::sim {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;

// Wall time at which the backward thread has done `compute` seconds of work when every all-reduce in `busy`
// (non-overlapping, in start order: one channel) takes `share` of its core while it runs: outside them
// compute runs at full speed, inside at (1 - share).
double wall_time(double compute, const std::vector<std::pair<double, double>>& busy, double share) {
  // Rounding must not make an all-reduce that starts exactly when the work ends look like it interrupted it.
  const double eps = 1e-12 * std::max(1.0, compute);
  double t = 0, done = 0;
  for (const auto& [s, e] : busy) {
    if (done >= compute - eps) return t;
    if (s > t) {  // free stretch
      if (done + (s - t) >= compute - eps) return t + std::max(0.0, compute - done);
      done += s - t;
      t = s;
    }
    const double stretch = e - std::max(s, t);
    if (stretch <= 0) continue;
    const double rate = 1 - share;
    if (rate > 0 && done + stretch * rate >= compute) return t + (compute - done) / rate;
    done += stretch * rate;
    t = e;
  }
  return t + std::max(0.0, compute - done);
}
}  // namespace

std::vector<double> estimate_ready_times(const std::vector<SimParam>& params, double backward_s) {
  DDP_CHECK(backward_s >= 0, "estimate_ready_times: backward time ", backward_s, " s must be >= 0");
  double total = 0;
  for (auto& p : params) {
    DDP_CHECK(p.backward_cost >= 0, "estimate_ready_times: parameter ", p.name,
              " has negative backward cost ", p.backward_cost);
    total += p.backward_cost;
  }
  std::vector<double> ready(params.size(), 0);
  double done = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const double share =
        total > 0 ? params[k].backward_cost / total : 1.0 / static_cast<double>(params.size());
    done += share * backward_s;
    ready[k] = std::min(done, backward_s);
  }
  return ready;
}

namespace {

void check_inputs(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                  const SimOptions& options) {
  DDP_CHECK(!params.empty(), "bucket simulator: the parameter list is empty");
  DDP_CHECK(ready_s.size() == params.size(), "bucket simulator: ", ready_s.size(), " ready times for ",
            params.size(), " parameters");
  DDP_CHECK(options.world >= 1, "bucket simulator: world size ", options.world, " must be >= 1");
  DDP_CHECK(options.copy_bytes_per_s >= 0, "bucket simulator: copy bandwidth must be >= 0");
  DDP_CHECK(options.comm_cpu_share >= 0 && options.comm_cpu_share <= 1, "bucket simulator: comm_cpu_share ",
            options.comm_cpu_share, " must be in [0, 1]");
  for (size_t i = 0; i < params.size(); ++i)
    DDP_CHECK(params[i].bytes >= 0 && ready_s[i] >= 0, "bucket simulator: parameter ", params[i].name,
              " has negative bytes or ready time");
}

// Ready order: by ready time, ties in reverse registration order.
std::vector<size_t> ready_order(const std::vector<double>& ready_s) {
  std::vector<size_t> order(ready_s.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready_s[a] < ready_s[b]; });
  return order;
}

// The timeline of `groups` (buckets in launch order), as the header describes it.
SimResult timeline(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                   const std::vector<std::vector<size_t>>& groups, double cap_mb, const ComputeTimes& compute,
                   const SimOptions& options) {
  const std::vector<size_t> order = ready_order(ready_s);

  // Each gradient's copy into its bucket runs on the backward thread: it delays everything after it.
  auto copy_s = [&](int64_t bytes) {
    return options.copy_bytes_per_s > 0 ? static_cast<double>(bytes) / options.copy_bytes_per_s : 0.0;
  };
  std::vector<double> copied(params.size(), 0);
  double copies_so_far = 0, total_bytes = 0;
  for (size_t i : order) {
    copies_so_far += copy_s(params[i].bytes);
    copied[i] = ready_s[i] + copies_so_far;
    total_bytes += static_cast<double>(params[i].bytes);
  }

  SimResult r;
  r.cap_mb = cap_mb;
  const double share = options.overlap ? options.comm_cpu_share : 0.0;
  std::vector<std::pair<double, double>> busy;  // all-reduces scheduled so far (wall time)
  const double backward_compute_end = compute.backward_s + copies_so_far;
  double prev_launch = 0, channel_free = 0;
  for (size_t b = 0; b < groups.size(); ++b) {
    SimBucket sb;
    sb.index = b;
    sb.params = groups[b];
    double compute_ready = 0;
    for (size_t i : sb.params) {
      sb.bytes += params[i].bytes;
      compute_ready = std::max(compute_ready, copied[i]);
    }
    // Only earlier buckets can run before this one is ready: its own all-reduce starts after.
    sb.ready_s = wall_time(compute_ready, busy, share);
    if (!options.overlap)
      sb.launch_s = wall_time(backward_compute_end, busy, share);
    else
      sb.launch_s = std::max(sb.ready_s, prev_launch);
    sb.start_s = std::max(sb.launch_s, channel_free);
    sb.end_s = sb.start_s +
               options.network.seconds(options.collective, static_cast<double>(sb.bytes), options.world);
    prev_launch = sb.launch_s;
    channel_free = sb.end_s;
    busy.push_back({sb.start_s, sb.end_s});
    r.comm_busy_s += sb.end_s - sb.start_s;
    r.buckets.push_back(std::move(sb));
  }
  r.backward_end_s = wall_time(backward_compute_end, busy, share);
  r.comm_end_s = channel_free;
  r.exposed_s = std::max(0.0, r.comm_end_s - r.backward_end_s) + copy_s(static_cast<int64_t>(total_bytes));
  r.step_s = compute.forward_s + r.backward_end_s + r.exposed_s + compute.optimizer_s + compute.other_s;
  return r;
}

}  // namespace

SimResult simulate_step(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                        double cap_mb, const ComputeTimes& compute, const SimOptions& options) {
  check_inputs(params, ready_s, options);
  DDP_CHECK(cap_mb > 0, "bucket simulator: bucket cap ", cap_mb, " MB must be > 0");
  DDP_CHECK(options.first_bucket_mb > 0, "bucket simulator: first bucket cap ", options.first_bucket_mb,
            " MB must be > 0");
  std::vector<BucketParamInfo> infos;
  for (auto& p : params) infos.push_back({static_cast<size_t>(p.bytes), p.dtype, Device::cpu()});
  std::vector<size_t> order = ready_order(ready_s);
  if (!options.pack_in_ready_order)
    for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  const auto groups = assign_buckets(infos, order, static_cast<size_t>(options.first_bucket_mb * kMiB),
                                     static_cast<size_t>(cap_mb * kMiB));
  return timeline(params, ready_s, groups, cap_mb, compute, options);
}

SimResult simulate_layout(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                          const std::vector<std::vector<size_t>>& buckets, const ComputeTimes& compute,
                          const SimOptions& options) {
  check_inputs(params, ready_s, options);
  std::vector<int> seen(params.size(), 0);
  for (const auto& b : buckets) {
    DDP_CHECK(!b.empty(), "bucket simulator: a given bucket is empty");
    for (size_t i : b) {
      DDP_CHECK(i < params.size(), "bucket simulator: a given bucket names parameter ", i, " of ",
                params.size());
      ++seen[i];
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    DDP_CHECK(seen[i] == 1, "bucket simulator: parameter ", params[i].name, " is in ", seen[i],
              " of the given buckets; each must be in exactly one");
  return timeline(params, ready_s, buckets, 0, compute, options);
}

std::vector<SimResult> sweep_caps(const std::vector<SimParam>& params, const std::vector<double>& ready_s,
                                  const std::vector<double>& caps_mb, const ComputeTimes& compute,
                                  const SimOptions& options) {
  std::vector<SimResult> out;
  for (double cap : caps_mb) out.push_back(simulate_step(params, ready_s, cap, compute, options));
  return out;
}

size_t recommend_cap(const std::vector<SimResult>& results) {
  DDP_CHECK(!results.empty(), "recommend_cap: no simulated caps to choose from");
  size_t best = 0;
  for (size_t i = 1; i < results.size(); ++i)
    if (results[i].step_s < results[best].step_s) best = i;
  return best;
}

std::string format_sweep(const std::vector<SimResult>& results, size_t recommended, double samples_per_step) {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "%10s %8s %12s %12s %12s %12s\n", "cap_MB", "buckets", "comm_ms",
                "exposed_ms", "step_ms", samples_per_step > 0 ? "samples/s" : "");
  os << line;
  for (size_t i = 0; i < results.size(); ++i) {
    const SimResult& r = results[i];
    char rate[32] = "";
    if (samples_per_step > 0) std::snprintf(rate, sizeof rate, "%.1f", samples_per_step / r.step_s);
    std::snprintf(line, sizeof line, "%10.3g %8zu %12.3f %12.3f %12.3f %12s%s\n", r.cap_mb, r.buckets.size(),
                  r.comm_busy_s * 1e3, r.exposed_s * 1e3, r.step_s * 1e3, rate,
                  i == recommended ? "  < recommended" : "");
    os << line;
  }
  return os.str();
}

}  // namespace ddp::sim
