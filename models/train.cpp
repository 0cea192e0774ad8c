// train.cpp - the training loop behind `train` (see train.h for what it does and the options). It reads top to
// bottom: set up (train_setup.h), resume (train_checkpoint.h), then per step one train_step (train_step.h), the
// loss check, the log line, evaluation now and then (train_eval.h) and checkpoints; at the end the figures of
// the run (throughput, MFU, communication, optimizer state), the trace files and the summary.
#include "models/train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "models/gpt.h"
#include "models/train_checkpoint.h"
#include "models/train_checks.h"
#include "models/train_eval.h"
#include "models/train_setup.h"
#include "models/train_deterministic.h"
#include "models/train_step.h"
#include "kernels/cpu/gemm.h"
#include "runtime/core/float32_math.h"
#include "runtime/core/peak_flops.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/tensor/device_checks.h"
#include "runtime/trace/clock_sync.h"
#include "runtime/trace/trace.h"

namespace ddp::models {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double allreduce_mean(dist::ProcessGroup& pg, double v) {
  Tensor t = Tensor::from_data<double>({v}, {1});
  host_allreduce(pg, t);
  return t.data<double>()[0] / pg.size();
}

// --deterministic pins the GEMMs to one thread for the run: OpenBLAS's threaded sgemm adds in another order
// than its one-thread sgemm, and the library picked for a product depends on the thread count
// (gemm_backend.h). The intra-op pool keeps the rank's budget: its kernels give the same bits at any split
// (parallel.h). Process-wide, like the thread budget; the previous count comes back at the end.
class GemmOnOneThread {
 public:
  explicit GemmOnOneThread(bool on) : previous_(on ? kernels::cpu::blas_threads() : 0) {
    if (on) kernels::cpu::set_blas_threads(1);
  }
  ~GemmOnOneThread() {
    if (previous_ > 0) kernels::cpu::set_blas_threads(previous_);
  }
  GemmOnOneThread(const GemmOnOneThread&) = delete;
  GemmOnOneThread& operator=(const GemmOnOneThread&) = delete;

 private:
  int previous_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// What the loop records for the figures at the end.
struct RunRecord {
  int64_t steps = 0;                                  // steps of this run (after a resume: since it)
  std::vector<double> all_step_times, step_times;     // all; without the first 2 (warm-up)
  std::vector<double> exposed_shares;                 // exposed communication / step time, without warm-up
  std::vector<double> first_losses, recent_losses;    // this rank's loss of the first / last 3 steps
  double median_step_s = 0;
  bool warmup_included = false;  // too few steps to leave out the first 2
  PeakFlops peak;
};

// The log line of a logged step, or the progress bar on a terminal.
void print_progress(const TrainOptions& o, TrainSetup& s, int64_t step, double mean_loss, double lr,
                    double dt, bool log_now, bool tty) {
  if (log_now) {
    const double rows_s = static_cast<double>(o.batch_size * o.grad_accum * s.world) / dt;
    if (tty) std::printf("\r\033[K");
    std::printf("step %5lld/%lld  loss %.4f  lr %.2e  %s %.0f/s  step %.1f ms  exposed comm %.1f%%\n",
                static_cast<long long>(step), static_cast<long long>(s.total_steps), mean_loss, lr,
                s.data.tokens ? "tokens" : "samples",
                rows_s * static_cast<double>(s.data.tokens ? o.context : 1), dt * 1e3,
                100 * s.dp().reducer().last_stats().exposed_communication_s / dt);
    std::fflush(stdout);
  } else if (tty) {
    const int width = 30, filled = static_cast<int>(width * step / s.total_steps);
    std::printf("\r[%.*s%*s] step %lld/%lld", filled, "##############################", width - filled, "",
                static_cast<long long>(step), static_cast<long long>(s.total_steps));
    std::fflush(stdout);
  }
}

// Throughput, exposed communication, MFU, communicated bytes and optimizer state into `result`.
void measure(const TrainOptions& o, TrainSetup& s, RunRecord& run, TrainResult& result) {
  const int64_t rows_per_step = o.batch_size * o.grad_accum * s.world;
  const int64_t tokens_per_row = s.data.tokens ? o.context : 1;
  // Steady-state steps exclude the first two (warm-up); a run too short for that reports all its steps.
  run.warmup_included = run.step_times.empty() && !run.all_step_times.empty();
  const double med = median(run.warmup_included ? run.all_step_times : run.step_times);
  run.median_step_s = med;
  result.samples_per_s = med > 0 ? static_cast<double>(rows_per_step) / med : 0;
  result.tokens_per_s = result.samples_per_s * static_cast<double>(tokens_per_row);
  result.exposed_comm_share = median(run.exposed_shares);
  // MFU: model FLOPs per rank per step (GPT: 3 x forward FLOPs per token; MLP: 6 x parameters per sample)
  // over the median step time, against the GPU's datasheet peak (runtime/core/peak_flops.h) or --peak-tflops.
  double flops_per_rank_step = 0;
  const double rank_rows = static_cast<double>(rows_per_step / s.world);
  if (auto* gpt = dynamic_cast<GPT*>(s.model.get()))
    flops_per_rank_step =
        3 * gpt->flops_per_token_forward() * rank_rows * static_cast<double>(tokens_per_row);
  else if (o.model == "mlp")
    flops_per_rank_step = 6 * static_cast<double>(s.model->num_parameters()) * rank_rows;
  run.peak = PeakFlops{o.peak_tflops, "--peak-tflops"};
  if (run.peak.tflops <= 0 && s.device.is_cuda())
    run.peak = datasheet_peak(cuda_device_name(s.device.index), o.dtype == "bfloat16", float32_gemm_may_use_tf32());
  if (med > 0 && flops_per_rank_step > 0) {
    result.model_tflops = flops_per_rank_step / med / 1e12;
    if (run.peak.tflops > 0) result.mfu = result.model_tflops / run.peak.tflops;
  }
  if (s.deterministic)
    result.comm_bytes_per_step = static_cast<double>(s.deterministic->bytes_last_step());
  else if (run.steps > 0)
    result.comm_bytes_per_step = static_cast<double>(s.dp().reducer().comm_hook().bytes_communicated()) /
                                 static_cast<double>(run.steps);  // one synchronized micro-step each
  if (s.zero) {
    result.optimizer_state_bytes = s.zero->local_state_bytes();
  } else if (s.sharded) {
    result.optimizer_state_bytes = s.sharded->state_bytes();
    result.memory_table =
        s.sdp->memory_account(s.sharded->state_bytes(), s.sharded->state_bytes_per_param()).table();
  } else {
    for (auto& [k, t] : s.optimizer->state()) result.optimizer_state_bytes += static_cast<int64_t>(t.nbytes());
  }
}

// Each rank's Chrome trace (trace::rank_trace_path: t.json -> t.rank1.json); rank 0 merges them into --trace,
// on rank 0's clock (the offsets estimated at start-up).
void write_traces(const TrainOptions& o, const TrainSetup& s, dist::ProcessGroup& pg) {
  auto& tracer = trace::global_tracer();
  const std::string mine = s.world > 1 ? trace::rank_trace_path(o.trace, s.rank) : o.trace;
  tracer.write_chrome_trace(mine);
  tracer.set_enabled(false);
  pg.barrier()->wait();
  if (s.world > 1 && s.rank == 0) {
    std::vector<std::string> inputs;
    for (int r = 0; r < s.world; ++r) inputs.push_back(trace::rank_trace_path(o.trace, r));
    trace::merge_chrome_traces(inputs, o.trace);
  }
}

void print_summary(const TrainOptions& o, const TrainSetup& s, const RunRecord& run, const TrainResult& result,
                   bool finished) {
  std::printf("\n== summary: %s, world %d, %lld steps in %.1f s\n", o.model.c_str(), s.world,
              static_cast<long long>(result.steps_done), result.wall_s);
  std::printf("   train loss %.4f (mean of the last 3 steps; first 3 steps: %.4f)", result.final_train_loss,
              result.first_loss);
  if (finished) {
    if (s.data.tokens)
      std::printf(", val loss %.4f nats/char", result.val_loss);
    else
      std::printf(", val loss %.4f, val accuracy %.2f%%", result.val_loss, 100 * result.val_accuracy);
  }
  const char* unit = s.data.tokens ? "tokens" : "samples";
  const double rate = s.data.tokens ? result.tokens_per_s : result.samples_per_s;
  if (run.all_step_times.empty())
    std::printf("\n   throughput not measured: no step ran\n");
  else if (run.warmup_included)
    std::printf("\n   throughput %.0f %s/s (median of all %lld steps, %.1f ms, warm-up included: too few steps "
                "to leave out the first 2)\n",
                rate, unit, static_cast<long long>(run.all_step_times.size()), run.median_step_s * 1e3);
  else
    std::printf("\n   throughput %.0f %s/s (median step %.1f ms), exposed communication %.1f%% of a step\n", rate,
                unit, run.median_step_s * 1e3, 100 * result.exposed_comm_share);
  if (result.mfu >= 0)
    std::printf("   MFU %.1f%% (%.3g model TFLOP/s per rank; peak %g TFLOP/s: %s)\n", 100 * result.mfu,
                result.model_tflops, run.peak.tflops, run.peak.source.c_str());
  if (o.deterministic)
    std::printf("   gradient communication: exact micro-batch mean (int64 fixed point), %.3f MiB per step "
                "handed to its all-reduces by rank 0\n   parameters: checksum %016llx (FNV-1a of their bytes; "
                "--deterministic: the same at every world size)\n",
                result.comm_bytes_per_step / (1024.0 * 1024.0),
                static_cast<unsigned long long>(result.parameter_checksum));
  else if (o.zero >= 2)
    std::printf("   gradient communication: ZeRO-%d reduce-scatter, %.3f MiB per step handed to it by rank 0\n",
                static_cast<int>(o.zero), result.comm_bytes_per_step / (1024.0 * 1024.0));
  else
    std::printf("   gradient communication: %s hook, %.3f MiB per step handed to all-reduces by rank 0\n",
                o.comm_hook.c_str(), result.comm_bytes_per_step / (1024.0 * 1024.0));
  std::printf("   optimizer state on rank 0: %.3f MiB%s\n",
              static_cast<double>(result.optimizer_state_bytes) / (1024.0 * 1024.0),
              o.zero > 0 ? " (its ZeRO shard)" : "");
  if (!result.memory_table.empty()) {
    std::printf("   memory of rank 0 (ZeRO-%d):\n", static_cast<int>(o.zero));
    size_t at = 0;
    while (at < result.memory_table.size()) {
      size_t end = result.memory_table.find('\n', at);
      if (end == std::string::npos) end = result.memory_table.size();
      std::printf("     %s\n", result.memory_table.substr(at, end - at).c_str());
      at = end + 1;
    }
  }
  if (!result.checkpoint_path.empty()) std::printf("   checkpoint %s\n", result.checkpoint_path.c_str());
  if (!o.trace.empty()) std::printf("   trace %s (open in ui.perfetto.dev or chrome://tracing)\n", o.trace.c_str());
  if (!result.sample_text.empty())
    std::printf("   sample: %s\n", printable_text("The whale" + result.sample_text).c_str());
  std::fflush(stdout);
}
// Why a resumed run has no step left: its checkpoint is at or past the run's last step. --steps (and
// --epochs) count from the start of training, not from the resume.
std::string nothing_to_do(const TrainOptions& o, const TrainSetup& s, const ResumePoint& resumed) {
  const std::string at = std::to_string(resumed.step), total = std::to_string(s.total_steps);
  const std::string budget =
      o.steps > 0 ? "--steps " + total : "--epochs " + std::to_string(o.epochs) + " (" + total + " steps)";
  const std::string why = resumed.step == s.total_steps
                              ? ", the last step of " + budget + ": that training is complete"
                              : ", past the " + budget +
                                    " of this run, which count from the start of training, "
                                    "not from the resume";
  return "train: nothing to do: checkpoint " + resumed.path + " is at step " + at + why +
         ". To train further, give more than " + at + " steps (e.g. --steps " +
         std::to_string(resumed.step + std::max<int64_t>(1, o.steps > 0 ? o.steps : s.total_steps)) + ").";
}
}  // namespace

TrainResult train(const TrainOptions& o, std::shared_ptr<dist::ProcessGroup> pg) { return train(o, pg, nullptr); }

TrainResult train(const TrainOptions& o, std::shared_ptr<dist::ProcessGroup> pg,
                  std::shared_ptr<dist::ProcessGroup> gather_group) {
  const auto t_start = Clock::now();
  const bool talk = pg->rank() == 0 && !o.quiet;
  ops::Bf16Compute bf16_compute(o.dtype == "bfloat16");  // --dtype bfloat16: bf16 matmul/linear/attention
  if (o.float32_matmul_precision != "auto") set_float32_matmul_precision(o.float32_matmul_precision);
  GemmOnOneThread gemm_pin(o.deterministic);
  TrainSetup s = set_up_training(o, pg, std::move(gather_group));
  const ResumePoint resumed = resume_training(o, s, talk);
  int64_t step = resumed.step;
  int64_t epoch = resumed.epoch;
  // A resume at or past the last step has nothing to train. The ranks agree on that first (they read the same
  // checkpoint, but a rank that returned alone would leave the others waiting in the first step's
  // collective).
  const bool done_here = step >= s.total_steps;
  const double ranks_done = o.resume.empty() ? 0.0 : allreduce_mean(*pg, done_here ? 1.0 : 0.0) * pg->size();
  DDP_CHECK(ranks_done < 0.5 || ranks_done > pg->size() - 0.5, "the ranks resumed different steps: on ",
            ranks_done, " of ", pg->size(), " ranks the checkpoint is at or past the last step (rank ",
            s.rank, " resumed step ", step, " of ", s.total_steps, "); give every rank the same checkpoint");
  if (done_here) {
    if (talk) std::printf("%s\n", nothing_to_do(o, s, resumed).c_str());
    TrainResult done;
    done.steps_done = step;
    auto whole = s.whole_parameters();  // --zero 3: collective (every rank is here: they agreed above)
    for (auto& p : s.model->named_parameters()) done.final_params.push_back(p.tensor.to_double_vector());
    return done;
  }

  auto& tracer = trace::global_tracer();
  if (!o.trace.empty()) {
    tracer.set_rank(s.rank);
    tracer.set_world_size(s.world);
    trace::synchronize_trace_clock(*pg, tracer);  // collective: every rank traces (same flags)
    tracer.set_enabled(true);
  }
  if (talk) {
    std::printf(
        "train: model %s (%lld parameters, %s) on %s, data %s, world %d, batch %lld x %lld accum per rank, "
        "%lld steps (%lld per epoch), %s lr %g\n",
        o.model.c_str(), static_cast<long long>(s.model->num_parameters()), o.dtype.c_str(),
        s.device.str().c_str(), s.data.name.c_str(), s.world, static_cast<long long>(o.batch_size),
        static_cast<long long>(o.grad_accum), static_cast<long long>(s.total_steps),
        static_cast<long long>(s.steps_per_epoch), o.optimizer.c_str(), o.lr);
    std::fflush(stdout);
  }

  // The micro-batches: the loader's next batch (into the next epoch when one ends), in the model's dtype.
  auto next_batch = [&]() -> data::Batch {
    for (int tries = 0; tries < 2; ++tries) {
      if (auto b = s.loader->next()) {
        if (!s.data.tokens && b->x.dtype() != s.dtype) b->x = b->x.to(s.dtype);
        return std::move(*b);
      }
      s.loader->start_epoch(++epoch);
    }
    DDP_FAIL("the data loader gave no batch for a whole epoch");
  };
  StepOptions step_options;
  step_options.grad_accum = o.grad_accum;
  step_options.clip_grad = o.clip_grad;
  step_options.zero_grad_set_to_none = !o.gradient_as_bucket_view;  // bucket views: zero in place, keep them
  if (auto* gpt = dynamic_cast<GPT*>(s.model.get())) step_options.loss_classes = gpt->loss_classes();

  TrainResult result;
  LossGuard loss_guard(*pg, resumed.path);
  RunRecord run;
  const bool tty = talk && isatty(1);
  // With --zero 2/3 evaluation, checkpoints and the sample see whole parameters inside a gathered scope
  // (s.whole_parameters(): collective, every rank at the same point; ZeRO-3 parameters have no memory at rest).
  auto save = [&] {
    check_device_errors();  // no checkpoint of parameters that a bad index touched unnoticed
    auto whole = s.whole_parameters();
    const std::string path = save_checkpoint(o, s, *pg, step, talk);
    if (path.empty()) return;
    result.checkpoint_path = path;
    loss_guard.saved(path);
  };
  auto eval = [&] {
    auto whole = s.whole_parameters();
    const EvalResult e = evaluate(o, s, *pg, step, talk);
    result.val_loss = e.loss;
    result.val_accuracy = e.accuracy;
  };

  // One synchronized backward per step: the reducer's errors name the step as the log does, counted from the
  // start of training (so after a resume too).
  s.dp().reducer().number_iterations_from(step + 1);
  // --deterministic: every rank runs every step (one out of data with no micro-batch of its own); dropout
  // draws from a stream of the micro-batch's global number, whichever rank runs it.
  const int64_t last_step = s.deterministic ? s.total_steps : s.my_steps;
  auto seed_dropout = [&](int64_t local) {
    set_dropout_streams(*s.model, step * o.micro_batches + s.rank + local * s.world);
  };
  while (step < last_step) {
    const auto t0 = Clock::now();
    // One number per step everywhere (docs/trace.md, "Iteration numbers"): the log's "step N" counts from 1;
    // the trace's "iteration N", the flight record, DDP_DEBUG and the reducer's errors use the same N.
    if (!o.trace.empty()) tracer.begin_iteration(step + 1);
    dist::set_flight_iteration(step + 1);
    set_device_check_step(step + 1);  // a device-side index error names this step (the step reads the loss)
    const double lr = s.schedule.at(step);
    s.optimizer->set_lr(lr);
    double loss =
        (s.deterministic && s.sdp
             ? train_step(*s.sdp, *s.deterministic, *s.optimizer, next_batch,
                          step < s.my_steps ? s.micro_batches : 0, seed_dropout, step_options)
         : s.deterministic ? train_step(*s.ddp, *s.deterministic, *s.optimizer, next_batch,
                                        step < s.my_steps ? s.micro_batches : 0, seed_dropout, step_options)
         : s.sdp         ? train_step(*s.sdp, *s.optimizer, next_batch, step_options)
                         : train_step(*s.ddp, *s.optimizer, next_batch, step_options))
            .loss;
    if (!o.trace.empty()) tracer.end_iteration(step + 1);
    const double dt = seconds_since(t0);
    if (o.fault_nan_step == step + 1 && s.rank == o.fault_nan_rank) loss = NAN;
    // Every rank stops on NaN / Inf (one all-reduce per step). Past the steps every rank runs (uneven data),
    // a collective here would have no Join shadow: each rank checks its own loss.
    DDP_CHECK(step + 1 <= s.common_steps || std::isfinite(loss), "training stopped at step ", step + 1,
              ": the loss is not finite on rank ", s.rank, " (", loss, "); the parameters have diverged");
    const double mean_loss = step + 1 <= s.common_steps ? loss_guard.mean_loss(loss, step + 1) : loss;
    run.recent_losses.push_back(loss);
    if (run.recent_losses.size() > 3) run.recent_losses.erase(run.recent_losses.begin());
    if (run.steps < 3) run.first_losses.push_back(loss);
    ++step;
    ++run.steps;
    run.all_step_times.push_back(dt);
    if (run.steps > 2) {  // the first steps pay for warm-up (allocation, rebuild)
      run.step_times.push_back(dt);
      run.exposed_shares.push_back(s.dp().reducer().last_stats().exposed_communication_s / dt);
    }
    const bool log_now = o.log_interval > 0 && (step % o.log_interval == 0 || step == s.total_steps);
    if (talk) print_progress(o, s, step, mean_loss, lr, dt, log_now, tty);
    const bool all_ranks_here = step <= s.common_steps;  // past it, some rank has stopped (uneven data)
    if (o.eval_interval > 0 && step % o.eval_interval == 0 && step < s.total_steps && all_ranks_here) eval();
    if (o.checkpoint_interval > 0 && step % o.checkpoint_interval == 0 && step < s.total_steps &&
        all_ranks_here)
      save();
    if (o.stop_after > 0 && run.steps >= o.stop_after) break;
  }
  if (s.join) s.join->join();  // shadows the ranks with more steps; then everyone has the last joiner's model
  check_device_errors();       // the end of training: nothing checked on the device is left unraised
  set_device_check_step(0);
  result.steps_done = step;
  result.first_loss = allreduce_mean(*pg, mean_of(run.first_losses));
  result.final_train_loss = allreduce_mean(*pg, mean_of(run.recent_losses));
  const bool finished = step >= s.my_steps;
  if (finished) eval();
  save();
  measure(o, s, run, result);
  {
    auto whole = s.whole_parameters();
    if (s.data.tokens && finished && o.sample_tokens > 0) {
      if (auto* gpt = dynamic_cast<GPT*>(s.model.get()))
        result.sample_text = gpt->generate("The whale", o.sample_tokens, 0.8, o.seed);
    }
    for (auto& p : s.model->named_parameters()) result.final_params.push_back(p.tensor.to_double_vector());
    for (auto& b : s.model->named_buffers())
      if (dtype_is_floating(b.tensor.dtype())) result.final_buffers.push_back(b.tensor.to_double_vector());
    result.parameter_checksum = parameter_checksum(*s.model);
  }
  if (!o.trace.empty()) write_traces(o, s, *pg);
  result.wall_s = seconds_since(t_start);
  if (talk) print_summary(o, s, run, result, finished);
  return result;
}

}  // namespace ddp::models
