// reducer_explain.cpp - the reducer's side of "explain" (step_explain.h): after the iteration to explain,
// every rank puts its records on rank 0's clock (trace/clock_sync.h) and all-gathers them: per bucket when
// it was full, issued and done (the BucketTiming the trace's bucket events come from), backward compute,
// exposed communication, which parameters got no gradient and when each got one. Rank 0 fits the network to
// the step's own collectives (all-reduces; ZeRO-2/3: reduce-scatters, fitted and simulated as such) for the
// simulator's what-if and prints the account on stdout. A given layout (ZeRO-3's units) is simulated as it
// is: the cap does not shape it, so no other cap is offered.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/core/error.h"
#include "runtime/ddp/reducer.h"
#include "runtime/ddp/step_explain.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/sim/bucket_sim.h"
#include "runtime/trace/clock_sync.h"

namespace ddp {

int64_t explain_iteration_from_env() {
  const char* v = std::getenv("DDP_EXPLAIN");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  DDP_CHECK(end && *end == '\0' && n >= 1, "DDP_EXPLAIN='", v,
            "' is not valid: give the number of the iteration to explain (1 is the first synchronized "
            "backward; train: its step, as its log prints it), or unset it");
  return n;
}

namespace {

// The what-if: the simulator at other caps (or, for a given layout, at this run's buckets only), from rank
// 0's ready times and a network fitted to this step's collectives (each bucket's time on the channel: from
// when it could start - every rank issued it - or the previous bucket finished, to its end on rank 0).
ExplainWhatIf what_if(const std::vector<nn::NamedTensor>& params, const std::vector<double>& ready_s,
                      const std::vector<ExplainRank>& ranks, const std::vector<ExplainBucket>& layout,
                      const std::vector<std::vector<size_t>>& buckets, const ReducerOptions& opt,
                      bool sharded, bool rebuilt, int world) {
  ExplainWhatIf w;
  w.current_cap_mb = opt.bucket_cap_mb;
  const sim::Collective collective = sharded ? sim::Collective::ReduceScatter : sim::Collective::Allreduce;
  w.collective = sim::collective_name(collective);
  w.layout_given = !opt.layout.empty();
  const std::string plural = w.collective + "s";
  if (world < 2 || layout.empty()) return w;
  const ExplainRank& r0 = ranks[0];
  if (r0.shadow) return w;
  std::vector<sim::MeasuredAllreduce> points;
  double previous_end = -1e300;
  for (size_t k = 0; k < layout.size(); ++k) {
    double start = -1e300;
    for (const ExplainRank& r : ranks)
      if (!r.shadow) start = std::max(start, r.forward_end_s + r.buckets[k].launched_s);
    const double end = r0.forward_end_s + r0.buckets[k].completed_s;
    const double service = end - std::max(start, previous_end);
    previous_end = end;
    if (service > 0) points.push_back({static_cast<double>(layout[k].bytes), service, 1});
  }
  sim::SimOptions so;
  so.world = world;
  so.first_bucket_mb = opt.first_bucket_mb;
  so.overlap = opt.overlap;
  so.collective = collective;
  so.pack_in_ready_order = rebuilt;  // else this run's buckets are in reverse registration order
  std::string fitted = "network fitted to this step's " + plural;
  try {
    so.network = sim::fit_network_model(points, world, sim::AllreduceAlgorithm::Ring, collective);
  } catch (const Error&) {
    // Too few buckets, or one step's noise, to separate latency from bandwidth: bandwidth only.
    double bytes = 0, seconds = 0;
    for (const auto& p : points) {
      bytes += p.bytes;
      seconds += p.seconds;
    }
    if (seconds <= 0 || bytes <= 0) {
      w.basis = "no what-if: this step's " + plural + " took no measurable time on the channel";
      return w;
    }
    so.network.alpha_s = 0;
    // t = volume * bytes / B, so B = volume * bytes / t; with alpha 0 and B 1, one byte costs `volume`.
    so.network.bandwidth_bytes_per_s = 1;
    const double volume = so.network.seconds(collective, 1.0, world);
    so.network.bandwidth_bytes_per_s = volume * bytes / seconds;
    fitted = "bandwidth of this step's " + plural + " (too few or too noisy to fit a latency)";
  }
  std::vector<sim::SimParam> sp;
  std::vector<double> ready;
  for (size_t i = 0; i < params.size(); ++i) {
    sp.push_back(
        {params[i].name, static_cast<int64_t>(params[i].tensor.nbytes()), params[i].tensor.dtype(), 0});
    ready.push_back(ready_s[i] >= 0 ? ready_s[i] : r0.backward_compute_s);  // no gradient: ready at the end
  }
  sim::ComputeTimes compute;
  compute.backward_s = r0.backward_compute_s;
  if (w.layout_given) {  // the cap does not shape these buckets: simulate them as they are, nothing else
    const sim::SimResult r = sim::simulate_layout(sp, ready, buckets, compute, so);
    w.rows.push_back({0, r.buckets.size(), r.exposed_s, r.backward_end_s + r.exposed_s});
  } else {
    const double c = opt.bucket_cap_mb;
    for (const double cap : {c / 4, c / 2, c, 2 * c, 4 * c}) {
      const sim::SimResult r = sim::simulate_step(sp, ready, cap, compute, so);
      w.rows.push_back({cap, r.buckets.size(), r.exposed_s, r.backward_end_s + r.exposed_s});
    }
  }
  w.basis = "rank 0's gradient-ready times, " + fitted + ": " + so.network.describe();
  return w;
}

}  // namespace

void Reducer::maybe_explain(int64_t number, bool shadow, double backward_compute_s, double exposed_s) {
  if (explain_number_ <= 0 || number != explain_number_) return;
  const bool armed = explain_armed_;
  explain_armed_ = false;
  const int world = pg_->size();
  const size_t nb = buckets_.size(), np = params_.size();
  // Rank 0's clock: the global tracer's (the trace's time axis), offsets measured now.
  auto& tracer = trace::global_tracer();
  const trace::ClockSync clock = trace::estimate_clock_offset(*pg_, tracer);  // tagged "trace clock sync"
  // This rank's record: [shadow, forward end, clock error, backward, exposed, (ready, launched, completed)
  // per bucket, (got a gradient, ready time) per parameter].
  const size_t len = 5 + 3 * nb + 2 * np;
  std::vector<double> mine(len, 0);
  const bool no_record = shadow || !armed;
  mine[0] = no_record ? 1 : 0;
  mine[1] = static_cast<double>(tracer.to_trace_ns(forward_end_) + clock.offset_ns) * 1e-9;
  mine[2] = static_cast<double>(clock.error_bound_ns) * 1e-9;
  mine[3] = backward_compute_s;
  mine[4] = exposed_s;
  for (size_t k = 0; k < nb; ++k) {
    mine[5 + 3 * k] = buckets_[k].timing.ready_s;
    mine[6 + 3 * k] = buckets_[k].timing.launched_s;
    mine[7 + 3 * k] = buckets_[k].timing.completed_s;
  }
  for (size_t i = 0; i < np; ++i) {
    mine[5 + 3 * nb + 2 * i] = locally_used_[i] ? 1 : 0;
    mine[6 + 3 * nb + 2 * i] = armed ? explain_ready_s_[i] : -1;
  }
  Tensor in = Tensor::from_data<double>(mine, {static_cast<int64_t>(len)});
  Tensor all = Tensor::zeros({static_cast<int64_t>(len) * world}, DType::F64);
  {
    dist::FlightIssuer who("ddp explain");
    host_allgather(*pg_, in, all);
  }
  if (pg_->rank() != 0) return;
  std::vector<ExplainBucket> layout;
  for (const Bucket& b : buckets_)
    layout.push_back(
        {b.timing.bytes, b.params.size(), params_[b.params.front()].name, params_[b.params.back()].name});
  std::vector<ExplainRank> ranks;
  const double* v = all.data<double>();
  for (int r = 0; r < world; ++r) {
    const double* x = v + static_cast<size_t>(r) * len;
    ExplainRank e;
    e.rank = r;
    e.shadow = x[0] != 0;
    e.forward_end_s = x[1];
    e.clock_error_s = x[2];
    e.backward_compute_s = x[3];
    e.exposed_s = x[4];
    for (size_t k = 0; k < nb; ++k) {
      BucketTiming t;
      t.index = k;
      t.bytes = layout[k].bytes;
      t.num_params = layout[k].num_params;
      t.ready_s = x[5 + 3 * k];
      t.launched_s = x[6 + 3 * k];
      t.completed_s = x[7 + 3 * k];
      e.buckets.push_back(t);
    }
    for (size_t i = 0; i < np; ++i)
      if (x[5 + 3 * nb + 2 * i] == 0) e.no_gradient.push_back(params_[i].name);
    ranks.push_back(std::move(e));
  }
  std::vector<double> ready0(np, -1);
  for (size_t i = 0; i < np; ++i) ready0[i] = v[6 + 3 * nb + 2 * i];
  const ExplainWhatIf w =
      what_if(params_, ready0, ranks, layout, bucket_layout(), opt_, sharded_, rebuilt_, world);
  const std::string text = explain_iteration(opt_.advice.iteration, number, layout, ranks, &w);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace ddp
