// train_main.cpp - the `train` program: trains a reference model alone (world size 1) or under ddprun,
// Slurm or mpirun, unchanged. `train --help` lists the flags.
#include <cstdio>

#include "models/train.h"
#include "kernels/cpu/gemm.h"
#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/dist/env.h"
#include "runtime/dist/init.h"

int main(int argc, char** argv) {
  using namespace ddp;
  models::TrainOptions o;
  std::string backend = "auto";
  int threads = 0;
  cli::Parser p("train", "Trains a reference model (mlp, cnn, gpt, branchy) with data parallelism.");
  p.add_choice("model", &o.model, {"mlp", "cnn", "gpt", "branchy"}, "reference model");
  p.add_choice("data", &o.data, {"auto", "fashion-mnist", "moby-dick", "synthetic"},
               "data set (auto: moby-dick for gpt, fashion-mnist for mlp/cnn, synthetic for branchy)");
  p.add("data-path", &o.data_path, "override the data set's location (file for text, folder for IDX)");
  p.add_choice("dtype", &o.dtype, {"float32", "float64"}, "parameter dtype");
  p.add("device", &o.device, "auto (a GPU when present), cpu, cuda or cuda:N");
  p.add_choice("backend", &backend, {"auto", "gloo", "nccl"}, "process group backend");
  p.add("batch-size", &o.batch_size, "samples per rank per micro-step");
  p.add("grad-accum", &o.grad_accum, "micro-steps per optimizer step (gradient accumulation with no_sync)");
  p.add("steps", &o.steps, "optimizer steps (0: use --epochs)");
  p.add("epochs", &o.epochs, "epochs when --steps is 0");
  p.add_choice("optimizer", &o.optimizer, {"sgd", "adamw"}, "optimizer");
  p.add("lr", &o.lr, "peak learning rate");
  p.add("min-lr-ratio", &o.min_lr_ratio, "cosine decays to lr * this");
  p.add("warmup-steps", &o.warmup_steps, "linear warmup steps");
  p.add_choice("schedule", &o.schedule, {"cosine", "constant"}, "learning-rate schedule after warmup");
  p.add("momentum", &o.momentum, "SGD momentum");
  p.add("weight-decay", &o.weight_decay, "weight decay (decoupled for AdamW)");
  p.add("clip-grad", &o.clip_grad, "global gradient-norm clip (0: off)");
  p.add("bucket-cap-mb", &o.bucket_cap_mb, "DDP bucket size cap in MiB");
  p.add("first-bucket-mb", &o.first_bucket_mb, "DDP first bucket cap in MiB");
  p.add("find-unused-parameters", &o.find_unused_parameters, "mark parameters without gradient as ready");
  p.add("gradient-as-bucket-view", &o.gradient_as_bucket_view, "gradients live in the DDP buckets");
  p.add("sync-bn", &o.sync_bn, "cnn: SyncBatchNorm, batch statistics over all ranks");
  p.add("zero", &o.zero, "ZeroRedundancyOptimizer: optimizer state sharded across ranks");
  p.add("static-graph", &o.static_graph, "DDP static_graph: the same graph every iteration (no unused search)");
  p.add_choice("comm-hook", &o.comm_hook, {"allreduce", "bf16", "powersgd"},
               "gradient communication per bucket (bf16 needs CUDA)");
  p.add("powersgd-rank", &o.powersgd_rank, "PowerSGD: rank of the gradient approximation");
  p.add("powersgd-start-iter", &o.powersgd_start_iter, "PowerSGD: plain all-reduce before this iteration (>= 2)");
  int64_t seed = static_cast<int64_t>(o.seed);
  p.add("seed", &seed, "seed of initialisation and data order");
  p.add("log-interval", &o.log_interval, "steps between log lines");
  p.add("eval-interval", &o.eval_interval, "steps between evaluations (0: at the end only)");
  p.add("eval-batches", &o.eval_batches, "validation batches per rank per evaluation (0: all)");
  p.add("checkpoint-dir", &o.checkpoint_dir, "folder for checkpoints (empty: none)");
  p.add("checkpoint-interval", &o.checkpoint_interval, "steps between checkpoints (0: at the end)");
  p.add("resume", &o.resume, "checkpoint to resume from, or 'auto' for the latest in --checkpoint-dir");
  p.add("trace", &o.trace, "write a Chrome trace (Perfetto) of the run to this file");
  p.add("sample-tokens", &o.sample_tokens, "gpt: characters to generate at the end");
  p.add("hidden", &o.hidden, "mlp: hidden width");
  p.add("depth", &o.depth, "mlp: hidden layers");
  p.add("context", &o.context, "gpt: context length");
  p.add("d-model", &o.d_model, "gpt: model width");
  p.add("n-head", &o.n_head, "gpt: attention heads");
  p.add("n-layer", &o.n_layer, "gpt: blocks");
  p.add("dropout", &o.dropout, "gpt: dropout");
  p.add("synthetic-samples", &o.synthetic_samples, "size of synthetic data sets");
  p.add("threads", &threads, "BLAS threads per rank (0: OPENBLAS_NUM_THREADS or the library default)");
  try {
    p.parse(argc, argv);
    o.seed = static_cast<uint64_t>(seed);
    dist::DistEnv env = dist::init_from_env();
    log::set_rank(env.world_size > 1 ? env.rank : -1);
    if (threads > 0) kernels::cpu::set_blas_threads(threads);
    auto ctx = dist::init_distributed(env, backend);
    models::train(o, ctx.group);
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 1;
  }
}
