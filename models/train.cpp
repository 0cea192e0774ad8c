// train.cpp - the training loop behind `train` (see train.h for what it does and the options).
#include "models/train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/branchy.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/make_model.h"
#include "models/mlp.h"
#include "models/train_checks.h"
#include "runtime/autograd/engine.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/core/peak_flops.h"
#include "runtime/core/log.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/text_dataset.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/host_collectives.h"
#include "runtime/nn/sync_batchnorm.h"
#include "runtime/ddp/join.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"
#include "runtime/optim/zero_redundancy_optimizer.h"
#include "runtime/trace/trace.h"

namespace ddp::models {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Data {
  std::shared_ptr<const data::Dataset> train, val;
  bool tokens = false;  // language model: x, y are (B, T) int64
  int64_t classes = 10;
  std::string name;
};

Data load_data(const TrainOptions& o) {
  std::string which = o.data;
  if (which == "auto")
    which = o.model == "gpt" ? "moby-dick" : (o.model == "branchy" ? "synthetic" : "fashion-mnist");
  Data d;
  d.name = which;
  if (o.model == "gpt") {
    d.tokens = true;
    if (which == "moby-dick") {
      auto t = o.data_path.empty() ? data::load_moby_dick(o.context)
                                   : data::load_moby_dick(o.context, o.data_path);
      d.train = t.train;
      d.val = t.val;
    } else if (which == "synthetic") {
      d.train = data::synthetic_token_dataset(o.synthetic_samples * o.context, 256, o.context, o.seed);
      d.val = data::synthetic_token_dataset(o.synthetic_samples / 8 * o.context, 256, o.context, o.seed + 99);
    } else {
      DDP_FAIL("--data ", which, " does not fit --model gpt: use moby-dick or synthetic");
    }
    return d;
  }
  if (which == "fashion-mnist") {
    DDP_CHECK(o.model != "branchy", "--model branchy takes --data synthetic (16 features)");
    const std::string dir = o.data_path.empty() ? std::string(data::kFashionMnistDir) : o.data_path;
    d.train = data::fashion_mnist_dataset(dir, data::Split::Train);
    d.val = data::fashion_mnist_dataset(dir, data::Split::Test);
  } else if (which == "synthetic") {
    Shape sample = o.model == "branchy" ? Shape{16} : Shape{1, 28, 28};
    d.classes = o.model == "branchy" ? 4 : 10;
    d.train = data::synthetic_classification(o.synthetic_samples, sample, d.classes, o.seed);
    d.val = data::synthetic_classification(std::max<int64_t>(o.synthetic_samples / 8, 64), sample, d.classes,
                                           o.seed);
  } else {
    DDP_FAIL("--data ", which, " does not fit --model ", o.model, ": use fashion-mnist or synthetic");
  }
  return d;
}

double allreduce_mean(dist::ProcessGroup& pg, double v) {
  Tensor t = Tensor::from_data<double>({v}, {1});
  host_allreduce(pg, t);
  return t.data<double>()[0] / pg.size();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

TrainResult train(const TrainOptions& o, std::shared_ptr<dist::ProcessGroup> pg) {
  const auto t_start = Clock::now();
  const int rank = pg->rank(), world = pg->size();
  const bool talk = rank == 0 && !o.quiet;
  validate_options(o);
  DDP_CHECK(o.dtype == "float32" || o.dtype == "float64" || o.dtype == "bfloat16", "--dtype ", o.dtype,
            ": expected float32, float64 or bfloat16");
  // bfloat16: float32 parameters and optimizer, bf16 compute in matmul/linear/attention
  // (ops/mixed_precision.h)
  const DType dtype = o.dtype == "float64" ? DType::F64 : DType::F32;
  ops::Bf16Compute bf16_compute(o.dtype == "bfloat16");
  Device device = Device::parse(o.device);
  if (device.is_cuda()) {  // the GPU of this rank's local rank (LOCAL_RANK as every launcher sets it)
    const char* local = std::getenv("LOCAL_RANK");
    device = Device::cuda((local ? std::atoi(local) : rank) % cuda_device_count());
  }

  check_output_paths(o, *pg);
  Data data = load_data(o);
  nn::manual_seed(o.seed);
  auto model = make_model(o, dtype);
  model->to(device);
  if (o.sync_bn) {
    model = nn::convert_sync_batchnorm(model, pg);
    DDP_CHECK(nn::count_sync_batchnorm(*model) > 0, "--sync-bn: model ", o.model,
              " has no BatchNorm2d layer to synchronize (use --model cnn)");
  }
  DDPOptions dopt;
  dopt.bucket_cap_mb = o.bucket_cap_mb;
  dopt.first_bucket_mb = o.first_bucket_mb;
  dopt.find_unused_parameters = o.find_unused_parameters;
  dopt.gradient_as_bucket_view = o.gradient_as_bucket_view;
  dopt.static_graph = o.static_graph;
  dopt.comm_hook = make_comm_hook(o.comm_hook, static_cast<int>(o.powersgd_rank), o.powersgd_start_iter);
  DistributedDataParallel ddp(model, pg, dopt);

  auto make_optimizer = [&o](std::vector<nn::NamedTensor> params) -> std::unique_ptr<optim::Optimizer> {
    if (o.optimizer == "sgd")
      return std::make_unique<optim::SGD>(
          std::move(params), optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
    if (o.optimizer == "adamw")
      return std::make_unique<optim::AdamW>(std::move(params),
                                            optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
    DDP_FAIL("--optimizer ", o.optimizer, ": expected sgd or adamw");
  };
  std::unique_ptr<optim::Optimizer> opt =
      o.zero ? std::make_unique<optim::ZeroRedundancyOptimizer>(model->named_parameters(), pg, make_optimizer)
             : make_optimizer(model->named_parameters());
  auto* zero_opt = dynamic_cast<optim::ZeroRedundancyOptimizer*>(opt.get());

  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.num_replicas = world;
  lo.rank = rank;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.drop_incomplete_batch = true;
  lo.device = device;
  data::DataLoader loader(data.train, lo);
  data::DataLoaderOptions vo = lo;
  vo.shuffle = false;
  vo.each_sample_once = true;
  vo.drop_incomplete_batch = false;
  data::DataLoader val_loader(data.val, vo);
  DDP_CHECK(loader.batches_per_epoch() >= o.grad_accum, "the training split gives ",
            loader.batches_per_epoch(), " batches per rank per epoch, fewer than --grad-accum ", o.grad_accum,
            "; lower --batch-size");

  const int64_t steps_per_epoch = loader.batches_per_epoch() / o.grad_accum;
  const int64_t total_steps = o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs) * steps_per_epoch;
  // Uneven data (--uneven-steps): this rank's own number of steps; every rank runs the first common_steps,
  // so side collectives (log all-reduce, evaluation, checkpoints) happen only there. Join shadows the rest.
  DDP_CHECK(o.uneven_steps >= 0, "--uneven-steps must be >= 0, got ", o.uneven_steps);
  const int64_t my_steps = total_steps - o.uneven_steps * rank;
  const int64_t common_steps = total_steps - o.uneven_steps * (world - 1);
  DDP_CHECK(common_steps >= 1, "--uneven-steps ", o.uneven_steps, " leaves rank ", world - 1,
            " no step of the ", total_steps, "; use at most ", (total_steps - 1) / std::max(1, world - 1));
  std::unique_ptr<Join> join;
  if (o.uneven_steps > 0 && o.join) join = std::make_unique<Join>(ddp);
  optim::WarmupCosine schedule{o.lr, o.lr * o.min_lr_ratio, std::min(o.warmup_steps, total_steps),
                               total_steps, o.schedule != "constant"};

  int64_t step = 0;
  int64_t epoch = 0;
  bool resumed = false;
  std::string resumed_from;
  if (!o.resume.empty()) {
    const std::string path = resume_path(o);
    checkpoint::LoadOptions load;
    load.reset_optimizer = o.reset_optimizer;
    load.live_config = options_json(o);
    if (o.reset_optimizer) load.config_keys_may_differ = {"optimizer", "lr"};
    auto st = checkpoint::load_training_checkpoint(path, *model, opt.get(), load);
    resumed_from = path;
    DDP_CHECK(st.seed == o.seed, "checkpoint ", path, " was written with --seed ", st.seed,
              ", this run has --seed ", o.seed, "; resume with the same seed");
    step = st.step;
    epoch = st.epoch;
    loader.resume({st.epoch, st.batches_in_epoch, 0});
    resumed = true;
    if (talk)
      std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)%s\n", path.c_str(),
                  static_cast<long long>(step), static_cast<long long>(st.epoch),
                  static_cast<long long>(st.batches_in_epoch),
                  o.reset_optimizer ? "; optimizer state reset (--reset-optimizer)" : "");
  }
  if (!resumed) loader.start_epoch(epoch);

  auto& tracer = trace::global_tracer();
  if (!o.trace.empty()) {
    tracer.set_rank(rank);
    tracer.set_world_size(world);
    tracer.set_enabled(true);
  }

  const int64_t rows_per_step = o.batch_size * o.grad_accum * world;
  const int64_t tokens_per_row = data.tokens ? o.context : 1;
  if (talk) {
    std::printf(
        "train: model %s (%lld parameters, %s) on %s, data %s, world %d, batch %lld x %lld accum per rank, "
        "%lld steps (%lld per epoch), %s lr %g\n",
        o.model.c_str(), static_cast<long long>(model->num_parameters()), o.dtype.c_str(),
        device.str().c_str(), data.name.c_str(), world, static_cast<long long>(o.batch_size),
        static_cast<long long>(o.grad_accum), static_cast<long long>(total_steps),
        static_cast<long long>(steps_per_epoch), o.optimizer.c_str(), o.lr);
    std::fflush(stdout);
  }

  auto next_batch = [&]() -> data::Batch {
    for (int tries = 0; tries < 2; ++tries) {
      if (auto b = loader.next()) return std::move(*b);
      loader.start_epoch(++epoch);
    }
    DDP_FAIL("the data loader gave no batch for a whole epoch");
  };
  auto loss_of = [&](const Tensor& out, const Tensor& y) { return ops::cross_entropy(out, y); };

  TrainResult result;
  LossGuard loss_guard(*pg, resumed_from);
  std::vector<double> step_times, exposed_shares, all_step_times;
  double last_loss = 0;
  std::vector<double> first_losses, recent_losses;  // loss of the first / last 3 steps of this run
  auto mean_of = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  const bool tty = talk && isatty(1);
  int64_t steps_this_run = 0;
  auto evaluate = [&]() {
    autograd::NoGradGuard ng;
    ddp.before_forward();  // rank 0's buffers (BatchNorm statistics) for everyone
    model->eval();
    val_loader.start_epoch(0);
    double loss_sum = 0, rows = 0, correct = 0;
    int64_t batches = 0;
    while (auto b = val_loader.next()) {
      if (o.eval_batches > 0 && batches >= o.eval_batches) break;
      Tensor x = b->x;
      if (!data.tokens && x.dtype() != dtype) x = x.to(dtype);  // as in training (--dtype float64)
      Tensor out = model->forward(x);
      ops::CrossEntropyOptions sum_rows;
      sum_rows.reduction = ops::LossReduction::Sum;
      Tensor l = ops::cross_entropy(out, b->y, sum_rows);
      loss_sum += l.item();
      rows += static_cast<double>(b->y.numel());
      if (!data.tokens) {
        std::vector<double> logits = out.to_double_vector(), ys = b->y.to_double_vector();
        const int64_t c = out.size(1);
        for (size_t i = 0; i < ys.size(); ++i) {
          auto row = logits.begin() + static_cast<int64_t>(i) * c;
          if (std::max_element(row, row + c) - row == static_cast<int64_t>(ys[i])) correct += 1;
        }
      }
      ++batches;
    }
    model->train();
    Tensor t = Tensor::from_data<double>({loss_sum, rows, correct}, {3});
    host_allreduce(*pg, t);
    const double* v = t.data<double>();
    result.val_loss = v[1] > 0 ? v[0] / v[1] : NAN;
    result.val_accuracy = data.tokens ? -1 : (v[1] > 0 ? v[2] / v[1] : 0);
    if (talk) {
      if (data.tokens)
        std::printf("eval step %lld: val loss %.4f nats/char over %.0f tokens\n",
                    static_cast<long long>(step), result.val_loss, v[1]);
      else
        std::printf("eval step %lld: val loss %.4f, accuracy %.2f%% over %.0f samples\n",
                    static_cast<long long>(step), result.val_loss, 100 * result.val_accuracy, v[1]);
      std::fflush(stdout);
    }
  };
  auto save = [&]() {
    if (o.checkpoint_dir.empty()) return;
    if (zero_opt) zero_opt->consolidate_state_dict(0);  // every rank's shard to rank 0, which writes
    const std::string name = "ckpt-step" + std::to_string(step) + ".safetensors";
    if (rank == 0) {
      std::filesystem::create_directories(o.checkpoint_dir);
      for (const std::string& stale : checkpoint::remove_stale_temp_files(o.checkpoint_dir))
        if (talk) std::printf("removed %s (left by an interrupted save)\n", stale.c_str());
      auto pos = loader.position();
      checkpoint::TrainingState st{step, pos.epoch, pos.batches_consumed, o.seed, options_json(o), {}, {}};
      checkpoint::save_training_checkpoint(o.checkpoint_dir + "/" + name, *model, opt.get(), st);
      checkpoint::write_latest(o.checkpoint_dir, name);
      if (talk) std::printf("checkpoint: %s/%s\n", o.checkpoint_dir.c_str(), name.c_str());
      std::fflush(stdout);
    }
    result.checkpoint_path = o.checkpoint_dir + "/" + name;
    loss_guard.saved(result.checkpoint_path);
    pg->barrier()->wait();
  };

  while (step < my_steps) {
    const auto t0 = Clock::now();
    if (!o.trace.empty()) tracer.begin_iteration(step);
    const double lr = schedule.at(step);
    opt->set_lr(lr);
    double loss_sum = 0;
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      data::Batch b = next_batch();
      Tensor x = b.x;
      if (!data.tokens && x.dtype() != dtype) x = x.to(dtype);
      auto run = [&] {
        Tensor out;
        {
          trace::TraceScope ts("forward", "forward");
          out = ddp.forward(x);
        }
        Tensor loss = loss_of(out, b.y);
        loss_sum += loss.item();
        if (o.grad_accum > 1) loss = loss * (1.0 / static_cast<double>(o.grad_accum));
        trace::TraceScope ts("backward", "backward");
        autograd::backward(loss);
      };
      if (micro + 1 < o.grad_accum) {
        auto guard = ddp.no_sync();
        run();
      } else {
        run();
      }
    }
    if (o.clip_grad > 0) optim::clip_grad_norm_(model->parameters(), o.clip_grad);
    {
      trace::TraceScope ts("optimizer", "optimizer");
      opt->step();
      opt->zero_grad(/*set_to_none=*/!o.gradient_as_bucket_view);  // bucket views: zero in place, keep them
    }
    if (!o.trace.empty()) tracer.end_iteration(step);
    const double dt = seconds_since(t0);
    last_loss = loss_sum / static_cast<double>(o.grad_accum);
    if (o.fault_nan_step == step + 1 && rank == o.fault_nan_rank) last_loss = NAN;
    // Every rank stops on NaN / Inf (one all-reduce per step). Past the steps every rank runs (uneven data),
    // a collective here would have no Join shadow: each rank checks its own loss.
    DDP_CHECK(step + 1 <= common_steps || std::isfinite(last_loss), "training stopped at step ", step + 1,
              ": the loss is not finite on rank ", rank, " (", last_loss, "); the parameters have diverged");
    const double mean_loss = step + 1 <= common_steps ? loss_guard.mean_loss(last_loss, step + 1) : last_loss;
    recent_losses.push_back(last_loss);
    if (recent_losses.size() > 3) recent_losses.erase(recent_losses.begin());
    if (steps_this_run < 3) first_losses.push_back(last_loss);
    ++step;
    ++steps_this_run;
    all_step_times.push_back(dt);
    if (steps_this_run > 2) {  // the first steps pay for warm-up (allocation, rebuild)
      step_times.push_back(dt);
      exposed_shares.push_back(ddp.reducer().last_stats().exposed_communication_s / dt);
    }
    const bool log_now = o.log_interval > 0 && (step % o.log_interval == 0 || step == total_steps);
    const bool all_ranks_here = step <= common_steps;  // past it, some rank has stopped (uneven data)
    if (log_now) {
      const double rows_s = static_cast<double>(rows_per_step) / dt;
      if (talk) {
        if (tty) std::printf("\r\033[K");
        std::printf("step %5lld/%lld  loss %.4f  lr %.2e  %s %.0f/s  step %.1f ms  exposed comm %.1f%%\n",
                    static_cast<long long>(step), static_cast<long long>(total_steps), mean_loss, lr,
                    data.tokens ? "tokens" : "samples", rows_s * static_cast<double>(tokens_per_row),
                    dt * 1e3, 100 * ddp.reducer().last_stats().exposed_communication_s / dt);
        std::fflush(stdout);
      }
    } else if (tty) {
      const int width = 30, filled = static_cast<int>(width * step / total_steps);
      std::printf("\r[%.*s%*s] step %lld/%lld", filled, "##############################", width - filled, "",
                  static_cast<long long>(step), static_cast<long long>(total_steps));
      std::fflush(stdout);
    }
    if (o.eval_interval > 0 && step % o.eval_interval == 0 && step < total_steps && all_ranks_here)
      evaluate();
    if (o.checkpoint_interval > 0 && step % o.checkpoint_interval == 0 && step < total_steps &&
        all_ranks_here)
      save();
    if (o.stop_after > 0 && steps_this_run >= o.stop_after) break;
  }
  if (join) join->join();  // shadows the ranks with more steps; then everyone has the last joiner's model
  result.steps_done = step;
  result.first_loss = allreduce_mean(*pg, mean_of(first_losses));
  result.final_train_loss = allreduce_mean(*pg, mean_of(recent_losses));
  const bool finished = step >= my_steps;
  if (finished) evaluate();
  save();
  // Steady-state steps exclude the first two (warm-up); a run too short for that reports all its steps.
  const bool warmup_included = step_times.empty() && !all_step_times.empty();
  const double med = median(warmup_included ? all_step_times : step_times);
  result.samples_per_s = med > 0 ? static_cast<double>(rows_per_step) / med : 0;
  result.tokens_per_s = result.samples_per_s * static_cast<double>(tokens_per_row);
  result.exposed_comm_share = median(exposed_shares);
  // MFU: model FLOPs per rank per step (GPT: 3 x forward FLOPs per token; MLP: 6 x parameters per sample)
  // over the median step time, against the GPU's datasheet peak (runtime/core/peak_flops.h) or --peak-tflops.
  double flops_per_rank_step = 0;
  const double rank_rows = static_cast<double>(rows_per_step / world);
  if (auto* gpt = dynamic_cast<GPT*>(model.get()))
    flops_per_rank_step =
        3 * gpt->flops_per_token_forward() * rank_rows * static_cast<double>(tokens_per_row);
  else if (o.model == "mlp")
    flops_per_rank_step = 6 * static_cast<double>(model->num_parameters()) * rank_rows;
  PeakFlops peak{o.peak_tflops, "--peak-tflops"};
  if (peak.tflops <= 0 && device.is_cuda())
    peak = datasheet_peak(cuda_device_name(device.index), o.dtype == "bfloat16");
  if (med > 0 && flops_per_rank_step > 0) {
    result.model_tflops = flops_per_rank_step / med / 1e12;
    if (peak.tflops > 0) result.mfu = result.model_tflops / peak.tflops;
  }
  if (steps_this_run > 0)
    result.comm_bytes_per_step = static_cast<double>(ddp.reducer().comm_hook().bytes_communicated()) /
                                 static_cast<double>(steps_this_run);  // one synchronized micro-step each
  if (zero_opt) {
    result.optimizer_state_bytes = zero_opt->local_state_bytes();
  } else {
    for (auto& [k, t] : opt->state()) result.optimizer_state_bytes += static_cast<int64_t>(t.nbytes());
  }
  if (data.tokens && finished && o.sample_tokens > 0) {
    if (auto* gpt = dynamic_cast<GPT*>(model.get()))
      result.sample_text = gpt->generate("The whale", o.sample_tokens, 0.8, o.seed);
  }
  for (auto& p : model->named_parameters()) result.final_params.push_back(p.tensor.to_double_vector());
  if (!o.trace.empty()) {
    const std::string mine = world > 1 ? o.trace + ".rank" + std::to_string(rank) : o.trace;
    tracer.write_chrome_trace(mine);
    tracer.set_enabled(false);
    pg->barrier()->wait();
    if (world > 1 && rank == 0) {
      std::vector<std::string> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(o.trace + ".rank" + std::to_string(r));
      trace::merge_chrome_traces(inputs, o.trace);
    }
  }
  result.wall_s = seconds_since(t_start);
  if (talk) {
    std::printf("\n== summary: %s, world %d, %lld steps in %.1f s\n", o.model.c_str(), world,
                static_cast<long long>(step), result.wall_s);
    std::printf("   train loss %.4f (mean of the last 3 steps; first 3 steps: %.4f)", result.final_train_loss,
                result.first_loss);
    if (finished) {
      if (data.tokens)
        std::printf(", val loss %.4f nats/char", result.val_loss);
      else
        std::printf(", val loss %.4f, val accuracy %.2f%%", result.val_loss, 100 * result.val_accuracy);
    }
    if (all_step_times.empty())
      std::printf("\n   throughput not measured: no step ran\n");
    else if (warmup_included)
      std::printf("\n   throughput %.0f %s/s (median of all %lld steps, %.1f ms, warm-up included: too few steps "
                  "to leave out the first 2)\n",
                  data.tokens ? result.tokens_per_s : result.samples_per_s, data.tokens ? "tokens" : "samples",
                  static_cast<long long>(all_step_times.size()), med * 1e3);
    else
      std::printf("\n   throughput %.0f %s/s (median step %.1f ms), exposed communication %.1f%% of a step\n",
                  data.tokens ? result.tokens_per_s : result.samples_per_s, data.tokens ? "tokens" : "samples",
                  med * 1e3, 100 * result.exposed_comm_share);
    if (result.mfu >= 0)
      std::printf("   MFU %.1f%% (%.3g model TFLOP/s per rank; peak %g TFLOP/s: %s)\n", 100 * result.mfu,
                  result.model_tflops, peak.tflops, peak.source.c_str());
    std::printf("   gradient communication: %s hook, %.3f MiB per step handed to all-reduces by rank 0\n",
                o.comm_hook.c_str(), result.comm_bytes_per_step / (1024.0 * 1024.0));
    std::printf("   optimizer state on rank 0: %.3f MiB%s\n",
                static_cast<double>(result.optimizer_state_bytes) / (1024.0 * 1024.0),
                zero_opt ? " (its ZeRO shard)" : "");
    if (!result.checkpoint_path.empty()) std::printf("   checkpoint %s\n", result.checkpoint_path.c_str());
    if (!o.trace.empty())
      std::printf("   trace %s (open in ui.perfetto.dev or chrome://tracing)\n", o.trace.c_str());
    if (!result.sample_text.empty())
      std::printf("   sample: %s\n", printable_text("The whale" + result.sample_text).c_str());
    std::fflush(stdout);
  }
  return result;
}

}  // namespace ddp::models
