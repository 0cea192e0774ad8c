// micro_flight.cpp - bench_micro_flight: what the flight recorder costs per collective - issued, started and
// completed recorded into a 2000-entry ring (the three transitions of one collective, under the ring's lock,
// with a DDP bucket's issuer and the progress counters) - against the same loop with the recorder off
// (capacity 0). Multiplied by the collectives of a step it bounds the recorder's share of the step
// (docs/benchmarks.md "Flight recorder overhead").
#include <benchmark/benchmark.h>

#include "runtime/distributed/flight_recorder.h"

using namespace ddp::dist;

static void record_collectives(benchmark::State& state, size_t capacity) {
  FlightRecorder fr("bench", 0, 2, capacity, /*dump_dir=*/"");
  FlightIssuer who("ddp bucket", 3, 1 << 20, "blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias");
  CollectiveDesc d;
  d.kind = CollectiveKind::Allreduce;
  d.count = 262144;
  uint64_t seq = 0;
  for (auto _ : state) {
    d.seq = seq;
    fr.issued(d);
    fr.started(seq);
    fr.completed(seq);
    ++seq;
  }
  state.SetItemsProcessed(static_cast<int64_t>(seq));
}

static void BM_FlightRecorderOn(benchmark::State& state) { record_collectives(state, 2000); }
static void BM_FlightRecorderOff(benchmark::State& state) { record_collectives(state, 0); }
BENCHMARK(BM_FlightRecorderOn);
BENCHMARK(BM_FlightRecorderOff);
BENCHMARK_MAIN();
