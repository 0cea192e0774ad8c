// e2e.cpp - bench_e2e: end-to-end DDP training throughput of a named configuration on synthetic data.
// Each step is train's own (models/train_step.h), which times forward (+ loss), backward (the whole autograd
// call, finalize included) and the optimizer; backward compute, communication and exposed communication come
// from the reducer (reducer.last_stats()). Rank 0 prints medians with their spread and appends one JSON
// record to --json.
//
//   bin/bench_e2e --config mlp --steps 20                                       # world 1
//   bin/ddprun --standalone --nproc-per-node 2 bin/bench_e2e --config gpt --mode nooverlap --json runs/b.json
//
// Modes: ddp (overlapped bucket all-reduce), nosync (backward inside ddp.no_sync(): no communication at all,
// the compute-only reference), nooverlap (DDPOptions.overlap = false: all buckets go after backward), unused
// (find_unused_parameters = true: graph traversal + used-map all-reduce). See docs/benchmarks.md.
// --zero {0,1,2,3}: the step through DDP + the optimizer (0), + ZeroRedundancyOptimizer (1), or
// ShardedDataParallel + ShardedOptimizer (2, 3; bench/e2e_zero.h); the JSON record then holds the memory
// account (parameter, gradient, optimizer bytes beside the ZeRO formula, bucket/gathered/resident peaks) and
// the time the forward and backward waited for parameter all-gathers per step.
// Sizes (tools/bench_cost_curve.py sweeps them): --mlp-hidden, --gpt-width/--gpt-depth/--gpt-context, and
// --config many --param-tensors N (N tensors holding --many-mib MiB in all: bench/many_params_model.h).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/e2e_zero.h"
#include "bench/many_params_model.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_target.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/train_step.h"
#include "runtime/core/cli.h"
#include "runtime/core/device_memory.h"
#include "runtime/core/float32_math.h"
#include "runtime/core/peak_flops.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/init.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/optim/optimizer.h"
#include "runtime/sim/sample_stats.h"
#include "runtime/trace/clock_sync.h"
#include "runtime/trace/trace.h"

namespace {

using Clock = std::chrono::steady_clock;
using ddp::Tensor;

struct Workload {
  std::string description;
  std::shared_ptr<ddp::nn::Module> model;
  Tensor x, y;                     // one synthetic batch, reused every step
  int64_t samples_per_rank = 0;    // rows of x
  int64_t tokens_per_sample = 0;   // 0 for non-token models
  double flops_per_rank_step = 0;  // forward + backward
  std::string flops_rule;
  std::string optimizer_name;
  int64_t loss_classes = 0;  // StepOptions::loss_classes (a padded vocabulary)
  std::vector<int64_t> attention;  // the GPT's attention (B, T, C, heads); empty for other models
};

// Size overrides of the configurations (0: the configuration's default).
struct Sizes {
  int64_t mlp_hidden = 0, gpt_width = 0, gpt_depth = 0, gpt_context = 0, gpt_heads = 0;
  int64_t param_tensors = 256;
  double many_mib = 8;
};

// Synthetic data: the same seed on every rank plus the rank, so ranks see different rows.
Workload make_workload(const std::string& config, int64_t batch, int rank, ddp::DType dtype, const Sizes& z) {
  Workload w;
  ddp::nn::manual_seed(1234);  // identical initial weights everywhere (DDP broadcasts rank 0's anyway)
  if (config == "many") {
    const int64_t total = static_cast<int64_t>(z.many_mib * 1024 * 1024 / 4);
    auto m = std::make_shared<ddp::bench::ManyParams>(z.param_tensors, total);
    w.model = m;
    w.samples_per_rank = batch;
    w.x = Tensor::randn({batch, m->width}, 100 + rank, dtype);
    std::vector<int64_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = (i * 7 + rank) % m->width;
    w.y = Tensor::from_data<int64_t>(labels, {batch});
    w.flops_per_rank_step = 2 * static_cast<double>(batch * total);  // one add forward, one sum backward
    w.flops_rule = "2 * batch * parameters (adds)";
    w.description = std::to_string(z.param_tensors) + " parameter tensors of " + std::to_string(m->width) +
                    " float32 each (h = h + p_i)";
    return w;
  }
  if (config == "mlp") {
    ddp::models::MLPConfig c;
    c.dtype = dtype;
    if (z.mlp_hidden > 0) c.hidden = {z.mlp_hidden, z.mlp_hidden};
    auto m = std::make_shared<ddp::models::MLP>(c);
    const double params = static_cast<double>(m->num_parameters());
    w.model = m;
    w.samples_per_rank = batch;
    w.x = Tensor::randn({batch, c.in}, 100 + rank, dtype);
    std::vector<int64_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = (i * 7 + rank) % c.out;
    w.y = Tensor::from_data<int64_t>(labels, {batch});
    w.flops_per_rank_step = 6 * params * static_cast<double>(batch);
    w.flops_rule = "6 * params * batch";
    w.description = "MLP 784-" + std::to_string(c.hidden[0]) + "-" + std::to_string(c.hidden[1]) + "-10";
  } else {
    ddp::models::GPTConfig c;
    if (config == "gpt2s" || config == "gpt2-small") {
      c.vocab = 50257;  // GPT-2 small's shape, on synthetic tokens; gpt2-small ties the head to wte (124M)
      c.tie_head = config == "gpt2-small";
      c.vocab_padded = 50304;  // a multiple of 64: the classifier's GEMMs on whole tiles (GPTConfig)
      c.context = 1024;
      c.d_model = 768;
      c.n_head = 12;
      c.n_layer = 12;
    }
    if (z.gpt_width > 0) c.d_model = z.gpt_width, c.n_head = z.gpt_width / 32;  // head size 32 as at d 128
    if (z.gpt_heads > 0) c.n_head = z.gpt_heads;
    if (z.gpt_depth > 0) c.n_layer = z.gpt_depth;
    if (z.gpt_context > 0) c.context = z.gpt_context;
    DDP_CHECK(c.n_head > 0 && c.d_model % c.n_head == 0, "bench_e2e: width ", c.d_model,
              " does not split into ", c.n_head, " heads");
    c.dtype = dtype;
    auto m = std::make_shared<ddp::models::GPT>(c);
    w.model = m;
    w.loss_classes = m->loss_classes();
    w.samples_per_rank = batch;
    w.tokens_per_sample = c.context;
    std::vector<int64_t> tokens(batch * c.context), targets(batch * c.context);
    uint64_t s = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
    for (size_t i = 0; i < tokens.size(); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      tokens[i] = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(c.vocab));
    }
    for (size_t i = 0; i < tokens.size(); ++i) targets[i] = tokens[(i + 1) % tokens.size()];
    w.x = Tensor::from_data<int64_t>(tokens, {batch, c.context});
    w.y = Tensor::from_data<int64_t>(targets, {batch, c.context});
    w.flops_per_rank_step = m->flops_per_token_forward() * 3 * static_cast<double>(batch * c.context);
    w.flops_rule = "GPT::flops_per_token_forward() * 3 * tokens";
    char d[160];
    std::snprintf(d, sizeof d, "GPT vocab %lld%s, context %lld, d %lld, %lld heads, %lld blocks%s",
                  static_cast<long long>(c.vocab),
                  c.vocab_padded > c.vocab ? (" (padded to " + std::to_string(c.vocab_padded) + ")").c_str() : "",
                  static_cast<long long>(c.context),
                  static_cast<long long>(c.d_model), static_cast<long long>(c.n_head),
                  static_cast<long long>(c.n_layer), c.tie_head ? ", tied head" : "");
    w.description = d;
    w.attention = {batch, c.context, c.d_model, c.n_head};
  }
  return w;
}

std::string read_first_line(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown";
}

double load_average() {
  double l = -1;
  std::sscanf(read_first_line("/proc/loadavg").c_str(), "%lf", &l);
  return l;
}

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

// Blocks the host until the current stream finished (a one-element copy to the host); nothing on CPU.
void sync_device(const Tensor& probe) {
  if (probe.device().is_cuda()) (void)probe.slice0(0, 1).to(ddp::Device::cpu());
}

// Minor page faults of this process so far (a fresh page touched for the first time costs one).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

nlohmann::ordered_json stats_json(const ddp::sim::SampleStats& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"min", s.min}, {"max", s.max}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string config = "mlp", mode = "ddp", device_s = "auto", backend = "auto", json_path, trace_path,
                dtype_s = "f32", allreduce_dtype = "f32", matmul_precision = "highest", optimizer_s = "default", label;
    int warmup = 3, steps = 20, threads = 0, zero = 0, prefetch = 1;
    int64_t batch = 0;
    double cap_mb = 25.0, first_mb = 1.0, peak_tflops = 0, lr = 0;
    bool force = false, grad_as_bucket_view = false, zero_grad_in_place = false;
    Sizes sizes;
    ddp::cli::Parser p(
        "bench_e2e",
        "End-to-end DDP training throughput on synthetic data: step, forward, backward compute, "
        "communication, exposed communication and optimizer time (median and spread). Run alone "
        "for world 1 or under ddprun. See docs/benchmarks.md.");
    p.add_choice(
        "config", &config, {"mlp", "gpt", "gpt2s", "gpt2-small", "many"},
        "mlp: 784-1024-1024-10, batch 64/rank, SGD; gpt: d 128, 4 heads, 2 blocks, context 64, batch "
        "16/rank, AdamW; gpt2s: GPT-2 small shape, context 1024, untied head (163M; GPU only); "
        "gpt2-small: the same with the head tied to the token embedding (124M, GPT-2's; GPU only); many: "
        "--param-tensors tensors holding --many-mib MiB, batch 8/rank, SGD");
    p.add("mlp-hidden", &sizes.mlp_hidden, "mlp: width of both hidden layers (0: 1024)");
    p.add("gpt-width", &sizes.gpt_width, "gpt: d_model (0: the configuration's); heads = width / 32");
    p.add("gpt-depth", &sizes.gpt_depth, "gpt: blocks (0: the configuration's)");
    p.add("gpt-context", &sizes.gpt_context, "gpt: context length (0: the configuration's)");
    p.add("gpt-heads", &sizes.gpt_heads,
          "gpt: attention heads (0: width / 32 with --gpt-width, else the configuration's)");
    p.add("param-tensors", &sizes.param_tensors, "many: number of parameter tensors (default 256)");
    p.add("many-mib", &sizes.many_mib, "many: MiB of float32 parameters in all (default 8)");
    p.add_choice(
        "mode", &mode, {"ddp", "nosync", "nooverlap", "unused"},
        "ddp: overlapped all-reduce; nosync: no communication; nooverlap: all-reduce after backward; "
        "unused: find_unused_parameters");
    p.add("zero", &zero,
          "ZeRO stage: 0 DDP, 1 ZeroRedundancyOptimizer, 2 ShardedDataParallel (gradients and optimizer "
          "state sharded), 3 parameters too (a second group for the gathers); the JSON record gets the "
          "memory account");
    p.add("prefetch", &prefetch, "--zero 3: units gathered ahead of the one computing (0: none)");
    p.add("bucket-cap-mb", &cap_mb, "DDP bucket cap (MiB)");
    p.add("first-bucket-mb", &first_mb, "cap of the first bucket (MiB)");
    p.add("gradient-as-bucket-view", &grad_as_bucket_view,
          "DDPOptions.gradient_as_bucket_view: gradients are views of the bucket buffers (no copy-in or "
          "write-back; with shm the buckets are shared memory that the all-reduce works on in place)");
    p.add(
        "zero-grad-in-place", &zero_grad_in_place,
        "zero_grad(set_to_none = false): keep the gradient tensors (with --gradient-as-bucket-view, backward "
        "then accumulates into the buckets) instead of dropping them each step");
    p.add("warmup", &warmup, "untimed steps first (>= 1: the first step rebuilds the buckets)");
    p.add("steps", &steps, "measured steps");
    p.add("batch-size", &batch, "samples per rank (0: the configuration's default)");
    p.add("threads", &threads,
          "threads per rank, shared by BLAS and the intra-op pool (0: cores / local ranks, at least 1)");
    p.add_choice("device", &device_s, {"auto", "cpu", "cuda"}, "auto: cuda when a GPU is visible");
    p.add_choice("backend", &backend, {"auto", "cpu", "shm", "gloo", "hier", "nccl"},
                 "process group backend (auto: nccl with a GPU, else cpu = shm on one host)");
    p.add_choice("dtype", &dtype_s, {"f32", "bf16"},
                 "compute dtype; bf16: float32 weights and optimizer, bf16 matmul/linear/attention "
                 "(cuBLAS tensor cores on GPU, emulated on CPU; runtime/ops/mixed_precision.h)");
    p.add_choice("float32-matmul-precision", &matmul_precision, {"highest", "high"},
                 "float32 GEMMs on the GPU: highest (IEEE, PyTorch's default) or high (TF32 tensor cores)");
    p.add_choice("allreduce-dtype", &allreduce_dtype, {"f32", "bf16"},
                 "gradient all-reduce dtype (bf16: the BF16Compress comm hook)");
    p.add_choice("optimizer", &optimizer_s, {"default", "sgd", "adamw"},
                 "default: sgd for mlp, adamw for gpt");
    p.add("lr", &lr, "learning rate (0: 0.01 for SGD, 3e-4 for AdamW)");
    p.add(
        "peak-tflops", &peak_tflops,
        "peak TFLOP/s per rank for MFU (0: NVIDIA's H100/H200 SXM datasheet figures, FP32 67 and BF16 dense "
        "989, for those GPUs; none on CPU or other GPUs)");
    p.add("json", &json_path, "append one JSON record of this run to FILE (rank 0)");
    p.add("trace", &trace_path, "write a Chrome trace of the measured steps to FILE with .rankN inserted");
    p.add("label", &label, "free text stored in the JSON record");
    p.add("force", &force, "run gpt2s or gpt2-small on CPU anyway");
    p.parse(argc, argv);
    DDP_CHECK(steps >= 1 && warmup >= 0, "bench_e2e: --steps must be >= 1 and --warmup >= 0");
    DDP_CHECK(zero >= 0 && zero <= 3, "bench_e2e: --zero ", zero, ": expected 0, 1, 2 or 3");
    DDP_CHECK(zero < 2 || (!grad_as_bucket_view && allreduce_dtype == "f32"), "bench_e2e: --zero ", zero,
              " reduces by reduce-scatter: drop --gradient-as-bucket-view and --allreduce-dtype bf16");

    const ddp::dist::DistEnv env = ddp::dist::init_from_env();
    const bool gpu = device_s == "cuda" || (device_s == "auto" && ddp::cuda_device_count() > 0);
    if (device_s == "cuda")
      DDP_CHECK(ddp::cuda_device_count() > 0,
                "bench_e2e: --device cuda but no GPU is usable: ", ddp::cuda_unavailable_reason());
    if ((config == "gpt2s" || config == "gpt2-small") && !gpu && !force)
      DDP_FAIL("bench_e2e: --config ", config,
               " (GPT-2 small, 124M-163M parameters, context 1024) is meant for a GPU; on "
               "this CPU one step takes minutes. Use --config gpt here, or pass --force to run it anyway.");
    const bool bf16 = dtype_s == "bf16";
    ddp::set_float32_matmul_precision(matmul_precision);
    const ddp::DType dtype = ddp::DType::F32;  // parameters (master weights) stay float32 in both modes
    ddp::ops::Bf16Compute bf16_compute(bf16);
    if (threads <= 0)
      threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size);
    ddp::kernels::cpu::set_thread_budget(threads);  // OpenBLAS and the intra-op pool share it

    ddp::Device dev = ddp::Device::cpu();
    if (gpu) dev = ddp::Device::cuda(std::max(0, ddp::dist::select_cuda_device(env.local_rank)));
    const std::string backend_name = backend == "auto" ? (gpu ? "nccl" : "cpu") : backend;
    auto ctx = ddp::dist::init_distributed(env, backend_name);
    const int rank = ctx.group->rank(), world = ctx.group->size();

    if (batch <= 0) batch = config == "mlp" ? 64 : (config == "gpt" ? 16 : 8);
    Workload w = make_workload(config, batch, rank, dtype, sizes);
    if (gpu) {
      w.model->to(dev);
      w.x = w.x.to(dev);
      w.y = w.y.to(dev);
    }
    ddp::DDPOptions opts;
    opts.bucket_cap_mb = cap_mb;
    opts.first_bucket_mb = first_mb;
    opts.gradient_as_bucket_view = grad_as_bucket_view;
    opts.overlap = mode != "nooverlap";
    opts.find_unused_parameters = mode == "unused";
    if (allreduce_dtype == "bf16") opts.comm_hook = std::make_shared<ddp::BF16CompressHook>();
    if (optimizer_s == "default") optimizer_s = config == "mlp" || config == "many" ? "sgd" : "adamw";
    ddp::optim::OptimizerFactory make_optimizer;
    int optimizer_bytes_per_param = 0;  // K of the ZeRO formula: SGD without momentum 0, AdamW two moments
    if (optimizer_s == "sgd") {
      ddp::optim::SGDOptions o;
      o.lr = lr > 0 ? lr : 0.01;
      make_optimizer = [o](std::vector<ddp::nn::NamedTensor> ps) {
        return std::make_unique<ddp::optim::SGD>(std::move(ps), o);
      };
      w.optimizer_name = "SGD lr " + std::to_string(o.lr);
    } else {
      ddp::optim::AdamWOptions o;
      o.lr = lr > 0 ? lr : 3e-4;
      make_optimizer = [o](std::vector<ddp::nn::NamedTensor> ps) {
        return std::make_unique<ddp::optim::AdamW>(std::move(ps), o);
      };
      w.optimizer_name = "AdamW lr " + std::to_string(o.lr) + " wd 0.01";
      optimizer_bytes_per_param = 2 * static_cast<int>(ddp::dtype_size(dtype));
    }
    ddp::bench::E2eParallel model(zero, w.model, env, ctx, backend_name, opts, prefetch, make_optimizer,
                                  optimizer_bytes_per_param);
    std::string peak_source = "--peak-tflops";
    if (peak_tflops <= 0 && gpu) {
      const ddp::PeakFlops peak =
          ddp::datasheet_peak(ddp::cuda_device_name(dev.index), bf16, ddp::float32_gemm_may_use_tf32());
      peak_tflops = peak.tflops;
      peak_source = peak.source;
    }

    // The step itself is train's (models/train_step.h): one micro-batch, the same synthetic batch every step.
    ddp::models::StepOptions step_options;
    step_options.synchronize_gradients = mode != "nosync";  // nosync: the whole backward under no_sync
    step_options.wait_for_device = gpu;                     // each phase's GPU work counted in it
    step_options.zero_grad_set_to_none = !zero_grad_in_place;
    step_options.loss_classes = w.loss_classes;
    auto next_batch = [&w] {
      ddp::data::Batch b;
      b.x = w.x;
      b.y = w.y;
      return b;
    };
    auto& tracer = ddp::trace::global_tracer();
    std::vector<double> step_s, fwd_s, bwd_s, bwd_compute_s, comm_s, exposed_s, opt_s, used_map_s, gather_s;
    std::vector<double> losses;  // rank 0's loss at every step, warm-up included (the batch never changes)
    const double load_before = load_average();
    long faults_before = 0;
    for (int it = 0; it < warmup + steps; ++it) {
      const bool measured = it >= warmup;
      if (it == warmup) {
        faults_before = minor_faults();
        model.reset_gather_stats();  // the gather waits of the measured steps only
      }
      const double gather_before = model.gather_wait_s();
      if (measured && it == warmup && !trace_path.empty()) {
        tracer.set_rank(rank);
        tracer.set_world_size(world);
        ddp::trace::synchronize_trace_clock(*ctx.group, tracer);  // every rank: the same flags
        tracer.set_enabled(true);
      }
      // Iteration N is the N-th step from 1, warm-up included: the reducer's (DDP_DEBUG) number for it.
      if (measured) tracer.begin_iteration(it + 1);
      sync_device(w.x);
      const auto t0 = Clock::now();
      const ddp::models::StepResult r = model.step(next_batch, step_options);
      const auto t1 = Clock::now();
      if (measured) tracer.end_iteration(it + 1);
      losses.push_back(r.loss);
      if (!measured) continue;
      step_s.push_back(seconds(t0, t1));
      fwd_s.push_back(r.forward_s);
      bwd_s.push_back(r.backward_s);
      opt_s.push_back(r.optimizer_s);
      gather_s.push_back(model.gather_wait_s() - gather_before);
      if (mode == "nosync") {
        bwd_compute_s.push_back(r.backward_s);
        comm_s.push_back(0);
        exposed_s.push_back(0);
      } else {
        const auto& st = model.reducer().last_stats();
        bwd_compute_s.push_back(st.backward_compute_s);
        comm_s.push_back(st.communication_s);
        exposed_s.push_back(st.exposed_communication_s);
        used_map_s.push_back(st.used_map_sync_s);
      }
    }
    tracer.set_enabled(false);
    const double faults_per_step = static_cast<double>(minor_faults() - faults_before) / steps;
    const double load_after = load_average();
    if (!trace_path.empty()) tracer.write_chrome_trace(ddp::trace::rank_trace_path(trace_path, rank));

    // The job's step is its slowest rank's: per step, the maximum over ranks.
    Tensor job_steps = Tensor::from_data<double>(step_s, {static_cast<int64_t>(step_s.size())});
    ddp::host_allreduce(*ctx.group, job_steps, ddp::dist::ReduceOp::Max);
    const double* js = job_steps.data<double>();
    step_s.assign(js, js + job_steps.numel());
    // The memory account: rank 0's in full, every rank's resident peak and parameter + gradient + optimizer
    // bytes.
    const ddp::MemoryAccount account = model.memory_account();
    const std::vector<double> resident_per_rank =
        ddp::bench::every_rank(*ctx.group, static_cast<double>(account.resident_peak_bytes));
    const std::vector<double> measured_per_rank =
        ddp::bench::every_rank(*ctx.group, static_cast<double>(account.measured_bytes()));
    const std::vector<double> shmem_per_rank =
        ddp::bench::every_rank(*ctx.group, static_cast<double>(ddp::bench::resident_now()["RssShmem"]));
    // What the GPU really held (the pool's high-water mark) beside what the account explains: parameters,
    // gradients, optimizer state and the bucket and gathered-parameter peaks (activations are not in it).
    const ddp::DeviceMemory device_memory = gpu ? ddp::device_memory(dev.index) : ddp::DeviceMemory{};
    const double account_bytes = static_cast<double>(account.measured_bytes() + account.bucket_peak_bytes +
                                                     account.gathered_peak_bytes);

    if (rank == 0) {
      using ddp::sim::summarize;
      const auto step = summarize(step_s), fwd = summarize(fwd_s), bwd = summarize(bwd_s),
                 bwdc = summarize(bwd_compute_s), comm = summarize(comm_s), exposed = summarize(exposed_s),
                 opt = summarize(opt_s), gather = summarize(gather_s);
      const double global_samples = static_cast<double>(w.samples_per_rank) * world;
      std::vector<double> rate, tflops;
      for (double s : step_s) {
        rate.push_back(global_samples * static_cast<double>(std::max<int64_t>(w.tokens_per_sample, 1)) / s);
        tflops.push_back(w.flops_per_rank_step / s / 1e12);
      }
      const auto rate_st = summarize(rate), tf = summarize(tflops);
      const size_t buckets = model.reducer().bucket_layout().size();
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      const char* rate_unit = w.tokens_per_sample > 0 ? "tokens/s" : "samples/s";

      std::printf("bench_e2e: %s (%lld parameters), mode %s, ZeRO-%d, world %d, backend %s, device %s, %s\n",
                  w.description.c_str(), static_cast<long long>(w.model->num_parameters()), mode.c_str(),
                  zero, world, ctx.group->backend_name().c_str(), dev.str().c_str(), dtype_s.c_str());
      if (zero > 0) std::printf("  %s\n", model.wrapper_name().c_str());
      std::printf("  batch %lld per rank%s, %s, bucket cap %.3g MiB (first %.3g MiB, %zu buckets%s)\n",
                  static_cast<long long>(w.samples_per_rank),
                  w.tokens_per_sample > 0
                      ? (" (" + std::to_string(w.samples_per_rank * w.tokens_per_sample) + " tokens)").c_str()
                      : "",
                  w.optimizer_name.c_str(), cap_mb, first_mb, buckets,
                  grad_as_bucket_view ? (zero_grad_in_place ? ", gradient as bucket view, zero_grad in place"
                                                            : ", gradient as bucket view")
                                      : (zero_grad_in_place ? ", zero_grad in place" : ""));
      std::printf("  BLAS threads per rank %d (%s), %u cores, host %s, load %.2f -> %.2f\n", threads,
                  ddp::kernels::cpu::gemm_libraries().c_str(), std::thread::hardware_concurrency(), host,
                  load_before, load_after);
      std::printf("  FLOPs per rank step %.4g (%s); %d measured steps after %d warmup\n",
                  w.flops_per_rank_step, w.flops_rule.c_str(), steps, warmup);
      std::printf(
          "  CPU kernels: %s (Highway run-time choice); minor page faults per measured step (rank 0): %.1f\n",
          ddp::kernels::cpu::simd_target_name(), faults_per_step);
      if (w.attention.size() == 4 && dtype_s == "bf16") {
        const auto& a = w.attention;
        const std::string why = dev.is_cuda() ? ddp::ops::bf16_attention_not_cudnn(dev, a[0], a[1], a[2], a[3]) : "";
        std::printf("  bf16 attention: %s%s\n", ddp::ops::bf16_attention_kernel(dev, a[0], a[1], a[2], a[3]),
                    why.empty() ? "" : (" (" + why + ")").c_str());
      }
      std::printf("  %-28s %12s %12s %12s %12s %12s\n", "metric", "median", "p10", "p90", "min", "max");
      auto row = [](const char* name, const ddp::sim::SampleStats& s, double scale) {
        std::printf("  %-28s %12.3f %12.3f %12.3f %12.3f %12.3f\n", name, s.median * scale, s.p10 * scale,
                    s.p90 * scale, s.min * scale, s.max * scale);
      };
      row("step (ms, slowest rank)", step, 1e3);
      row("forward + loss (ms)", fwd, 1e3);
      row("backward call (ms)", bwd, 1e3);
      row("backward compute (ms)", bwdc, 1e3);
      row("communication (ms)", comm, 1e3);
      row("exposed communication (ms)", exposed, 1e3);
      row("optimizer + zero_grad (ms)", opt, 1e3);
      if (zero >= 2) row("waiting for gathers (ms)", gather, 1e3);
      if (mode == "unused")
        row("used-map sync (ms)", summarize(used_map_s), 1e3);  // host wait for its copy (GPU)
      row((std::string(rate_unit) + " (all ranks)").c_str(), rate_st, 1);
      row("GFLOP/s per rank", tf, 1e3);
      if (peak_tflops > 0) {
        ddp::sim::SampleStats mfu = tf;
        for (double* v : {&mfu.median, &mfu.p10, &mfu.p90, &mfu.min, &mfu.max}) *v = *v / peak_tflops * 100;
        row(("MFU % (peak " + std::to_string(static_cast<int>(peak_tflops)) + " TF/s)").c_str(), mfu, 1);
        std::printf("  (MFU peak: %s)\n", peak_source.c_str());
      }
      std::printf("  loss (rank 0): first %.4f last %.4f over %zu steps\n", losses.front(), losses.back(),
                  losses.size());
      constexpr double MiB = 1024.0 * 1024.0;
      if (device_memory.valid)
        std::printf(
            "  device memory (rank 0): peak in use %.1f MiB (CUDA pool high-water; reserved %.1f MiB; "
            "%.1f of %.1f MiB in use on the device at the end), memory account %.1f MiB\n",
            device_memory.pool_used_peak / MiB, device_memory.pool_reserved_peak / MiB,
            device_memory.device_used / MiB, device_memory.device_total / MiB, account_bytes / MiB);
      else
        std::printf("  device memory (rank 0): none (%s), memory account %.1f MiB\n", dev.str().c_str(),
                    account_bytes / MiB);
      std::printf("  ");
      for (char c : account.table()) c == '\n' ? std::printf("\n  ") : std::putchar(c);
      std::printf("\n");
      std::printf("  per rank: resident peak (MiB)");
      for (double b : resident_per_rank) std::printf(" %.1f", b / (1024.0 * 1024.0));
      std::printf("; parameters + gradients + optimizer (MiB)");
      for (double b : measured_per_rank) std::printf(" %.2f", b / (1024.0 * 1024.0));
      std::printf("; shared memory in the resident set at the end (MiB)");
      for (double b : shmem_per_rank) std::printf(" %.1f", b / (1024.0 * 1024.0));
      std::printf("\n");

      if (!json_path.empty()) {
        nlohmann::ordered_json rec = {
            {"kind", "e2e"},
            {"config", config},
            {"mode", mode},
            {"zero", zero},
            {"world", world},
            {"bucket_cap_mb", cap_mb},
            {"first_bucket_mb", first_mb},
            {"gradient_as_bucket_view", grad_as_bucket_view},
            {"zero_grad_in_place", zero_grad_in_place},
            {"buckets", buckets},
            {"threads", threads},
            {"backend", ctx.group->backend_name()},
            {"device", dev.str()},
            {"dtype", dtype_s},
            {"bf16_attention", w.attention.size() == 4 && dtype_s == "bf16"
                                   ? ddp::ops::bf16_attention_kernel(dev, w.attention[0], w.attention[1],
                                                                     w.attention[2], w.attention[3])
                                   : ""},
            {"allreduce_dtype", allreduce_dtype},
            {"batch_per_rank", w.samples_per_rank},
            {"tokens_per_sample", w.tokens_per_sample},
            {"params", w.model->num_parameters()},
            {"param_tensors", w.model->named_parameters().size()},
            {"model", w.description},
            {"optimizer", w.optimizer_name},
            {"flops_per_rank_step", w.flops_per_rank_step},
            {"steps", steps},
            {"warmup", warmup},
            {"machine",
             {{"host", host},
              {"cores", std::thread::hardware_concurrency()},
              {"cpu", cpu_model()},
              {"load_before", load_before},
              {"load_after", load_after}}},
            {"date", iso_now()},
            {"label", label},
            {"simd_target", ddp::kernels::cpu::simd_target_name()},
            {"gemm_libraries", ddp::kernels::cpu::gemm_libraries()},
            {"minor_faults_per_step", faults_per_step},
            {"step_s", stats_json(step)},
            {"forward_s", stats_json(fwd)},
            {"backward_s", stats_json(bwd)},
            {"backward_compute_s", stats_json(bwdc)},
            {"communication_s", stats_json(comm)},
            {"exposed_communication_s", stats_json(exposed)},
            {"optimizer_s", stats_json(opt)},
            {"gather_wait_s", stats_json(gather)},
            {"memory",
             ddp::bench::memory_json(account, resident_per_rank, measured_per_rank, shmem_per_rank)},
            {w.tokens_per_sample > 0 ? "tokens_per_s" : "samples_per_s", stats_json(rate_st)},
            {"tflops_per_rank", stats_json(tf)},
        };
        if (zero == 3) rec["prefetch"] = prefetch;
        rec["loss_first"] = losses.front();
        rec["loss_last"] = losses.back();
        rec["memory_account_bytes"] = account_bytes;
        if (device_memory.valid)
          rec["device_memory"] = {{"pool_used_peak_bytes", device_memory.pool_used_peak},
                                  {"pool_reserved_peak_bytes", device_memory.pool_reserved_peak},
                                  {"device_used_bytes", device_memory.device_used},
                                  {"device_total_bytes", device_memory.device_total}};
        if (peak_tflops > 0) {
          rec["peak_tflops"] = peak_tflops;
          rec["peak_source"] = peak_source;
          rec["mfu"] = tf.median / peak_tflops;
        }
        std::ofstream out(json_path, std::ios::app);
        DDP_CHECK(out.good(), "bench_e2e: cannot open --json file ", json_path, " for appending");
        out << rec.dump() << "\n";
      }
    }
    ctx.group->barrier()->wait();
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_e2e: %s\n", e.what());
    return 1;
  }
}
