// micro_host_cost.cpp - what the framework costs the host, apart from the arithmetic (Google Benchmark): one op
// on one-element tensors (allocation, dispatch, checks, the autograd node when gradients are recorded) and a
// whole training step of a GPT too small to compute anything (d_model 8, 2 heads, 2 blocks, context 4, batch 1:
// ~40 kFLOP per step, under 1 us of arithmetic at this machine's peak), so its time is the host cost of the
// step's ops: forward, cross-entropy, backward (one node per recorded op), AdamW over every parameter and
// zero_grad. On a GPU the same host work precedes every kernel launch, so it bounds how far the host can run
// ahead of the device (issue 38: the tiny gpt's step must not be host-bound). bench/torch_host_cost.py runs
// PyTorch's eager twin of each row, alternated with these, and prints both.
#include <benchmark/benchmark.h>

#include <functional>
#include <set>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/layernorm.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/optimizer.h"

using namespace ddp;

namespace {
// Range 0: which op; range 1: 1 records the autograd graph (inputs require grad), 0 does not.
const char* const kOpNames[] = {"add", "mul", "linear", "layer_norm", "gelu"};

void HostCost_Op(benchmark::State& state) {
  kernels::cpu::set_blas_threads(1);
  const bool record = state.range(1) != 0;
  auto leaf = [&](Shape s) { return record ? Tensor::ones(s).set_requires_grad(true) : Tensor::ones(s); };
  Tensor a = leaf({1}), b = leaf({1}), x = leaf({1, 1}), w = leaf({1, 1}), bias = leaf({1});
  std::function<Tensor()> op;
  switch (state.range(0)) {
    case 0: op = [&] { return ops::add(a, b); }; break;
    case 1: op = [&] { return ops::mul(a, b); }; break;
    case 2: op = [&] { return ops::linear(x, w, bias); }; break;
    case 3: op = [&] { return ops::layer_norm(x, bias, bias); }; break;
    default: op = [&] { return ops::gelu(a); }; break;
  }
  for (auto _ : state) {
    Tensor c = op();
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetLabel(std::string(kOpNames[state.range(0)]) + (record ? " recorded" : " no_grad"));
}
BENCHMARK(HostCost_Op)->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1}})->Unit(benchmark::kNanosecond);

// The nodes of the graph that produced `t` (each runs once in backward).
int64_t graph_nodes(const Tensor& t) {
  std::set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> todo{t.grad_fn().get()};
  while (!todo.empty()) {
    const autograd::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (const auto& e : n->next_edges) todo.push_back(e.node.get());
  }
  return static_cast<int64_t>(seen.size());
}

void HostCost_GptStep(benchmark::State& state) {
  kernels::cpu::set_blas_threads(1);
  nn::manual_seed(1);
  models::GPTConfig c;
  c.d_model = 8;
  c.n_head = 2;
  c.n_layer = 2;
  c.context = 4;
  models::GPT model(c);
  optim::AdamW opt(model.named_parameters(), {.lr = 3e-4});
  std::vector<int64_t> t(c.context);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 31 + 7) % c.vocab);
  Tensor x = Tensor::from_data(t, {1, c.context}), y = Tensor::from_data(t, {1, c.context});
  auto step = [&](int64_t* nodes) {
    Tensor loss = ops::cross_entropy(model.forward(x), y);
    if (nodes) *nodes = graph_nodes(loss);
    autograd::backward(loss);
    opt.step();
    opt.zero_grad();
  };
  int64_t nodes = 0;
  step(&nodes);  // counted once, outside the timed loop
  for (auto _ : state) step(nullptr);
  state.counters["graph_nodes"] = static_cast<double>(nodes);
  state.counters["parameters"] = static_cast<double>(model.named_parameters().size());
  state.SetLabel("gpt d8 h2 L2 T4 B1 vocab 256, AdamW");
}
BENCHMARK(HostCost_GptStep)->Unit(benchmark::kMicrosecond);
}  // namespace

BENCHMARK_MAIN();
