// train_main.cpp - the `train` program: trains a reference model alone (world size 1) or under ddprun,
// Slurm or mpirun, unchanged. `train --help` lists the flags.
#include <cstdio>
#include <string>
#include <vector>

#include "models/train.h"
#include "models/train_ft.h"
#include "models/train_setup.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/init.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/launch/error_file.h"

int main(int argc, char** argv) {
  using namespace ddp;
  models::TrainOptions o;
  std::string backend = "auto";
  int threads = 0;
  using B = cli::Bounds;
  cli::Parser p("train", "Trains a reference model (mlp, cnn, gpt, branchy) with data parallelism.");
  p.add_choice(
      "model", &o.model, {"mlp", "cnn", "gpt", "branchy"},
      "reference model (branchy needs --find-unused-parameters, at any world size: one of its experts "
      "and its unused head get no gradient in a step)");
  p.add_choice("data", &o.data, {"auto", "fashion-mnist", "moby-dick", "synthetic"},
               "data set (auto: moby-dick for gpt, fashion-mnist for mlp/cnn, synthetic for branchy)");
  p.add("data-path", &o.data_path, "override the data set's location (file for text, folder for IDX)");
  p.add_choice(
      "dtype", &o.dtype, {"float32", "float64", "bfloat16"},
      "parameter dtype; bfloat16: float32 weights and optimizer, bf16 compute in matmul/linear/attention");
  p.add_choice("float32-matmul-precision", &o.float32_matmul_precision, {"auto", "highest", "high", "medium"},
               "float32 GEMMs on the GPU: highest (IEEE float32, the default, as PyTorch's), high or medium (TF32 "
               "tensor cores; as torch.set_float32_matmul_precision); auto: DDP_FLOAT32_MATMUL_PRECISION or "
               "highest");
  p.add("peak-tflops", &o.peak_tflops,
        "peak TFLOP/s per rank for MFU (0: the NVIDIA datasheet figure of an H100/H200 SXM; none on CPU)");
  p.add("device", &o.device,
        "auto (this local rank's GPU when present, else cpu), cpu, cuda (GPU LOCAL_RANK % count) or cuda:N "
        "(GPU N, whatever LOCAL_RANK says)");
  p.add_choice("backend", &backend, {"auto", "gloo", "nccl"}, "process group backend");
  p.add("batch-size", &o.batch_size, "samples per rank per micro-step", B::at_least(1));
  p.add("grad-accum", &o.grad_accum, "micro-steps per optimizer step (gradient accumulation with no_sync)", B::at_least(1));
  p.add("steps", &o.steps, "optimizer steps (0: use --epochs)", B::at_least(0));
  p.add("epochs", &o.epochs, "epochs when --steps is 0", B::at_least(0));
  p.add_choice("optimizer", &o.optimizer, {"sgd", "adamw"}, "optimizer");
  p.add("lr", &o.lr, "peak learning rate", B::at_least(0));
  p.add("min-lr-ratio", &o.min_lr_ratio, "cosine decays to lr * this", B::between(0, 1));
  p.add("warmup-steps", &o.warmup_steps, "linear warmup steps", B::at_least(0));
  p.add_choice("schedule", &o.schedule, {"cosine", "constant"}, "learning-rate schedule after warmup");
  p.add("momentum", &o.momentum, "SGD momentum", B::between(0, 1, true));
  p.add("weight-decay", &o.weight_decay, "weight decay (decoupled for AdamW)", B::at_least(0));
  p.add("clip-grad", &o.clip_grad, "global gradient-norm clip (0: off)", B::at_least(0));
  p.add("bucket-cap-mb", &o.bucket_cap_mb, "DDP bucket size cap in MiB", B::above(0));
  p.add("first-bucket-mb", &o.first_bucket_mb, "DDP first bucket cap in MiB", B::above(0));
  p.add("find-unused-parameters", &o.find_unused_parameters,
        "mark parameters without gradient as ready (needed by --model branchy)");
  p.add("gradient-as-bucket-view", &o.gradient_as_bucket_view, "gradients live in the DDP buckets");
  p.add("sync-bn", &o.sync_bn, "cnn: SyncBatchNorm, batch statistics over all ranks");
  std::string zero = "0";
  p.add_choice_optional_value(
      "zero", &zero, {"0", "1", "2", "3"}, "1",
      "ZeRO stage (--zero N or --zero=N): 1 (a bare --zero) optimizer state sharded "
      "(ZeroRedundancyOptimizer); 2 gradients too, 3 parameters too (ShardedDataParallel; "
      "the summary prints the memory account). 2/3 refuse --comm-hook, "
      "--gradient-as-bucket-view and --sync-bn. Checkpoints are one format: any stage "
      "at any world size resumes any of them");
  p.add("static-graph", &o.static_graph, "DDP static_graph: the same graph every iteration (no unused search)");
  p.add_choice("comm-hook", &o.comm_hook, {"allreduce", "bf16", "powersgd"},
               "gradient communication per bucket (bf16 needs CUDA)");
  p.add("powersgd-rank", &o.powersgd_rank, "PowerSGD: rank of the gradient approximation", B::at_least(1));
  p.add("powersgd-start-iter", &o.powersgd_start_iter,
        "PowerSGD: the first N steps of this run use a plain all-reduce, compression starts at step N + 1 "
        "(PyTorch's start_powerSGD_iter; >= 2)", B::at_least(2));
  int64_t seed = static_cast<int64_t>(o.seed);
  p.add("seed", &seed, "seed of initialisation and data order", B::at_least(0));
  p.add("log-interval", &o.log_interval, "steps between log lines", B::at_least(0));
  p.add("eval-interval", &o.eval_interval, "steps between evaluations (0: at the end only)", B::at_least(0));
  p.add("eval-batches", &o.eval_batches, "validation batches per rank per evaluation (0: all)", B::at_least(0));
  p.add("checkpoint-dir", &o.checkpoint_dir, "folder for checkpoints (empty: none)");
  p.add("checkpoint-interval", &o.checkpoint_interval, "steps between checkpoints (0: at the end)", B::at_least(0));
  p.add("resume", &o.resume, "checkpoint to resume from, or 'auto' for the latest in --checkpoint-dir");
  p.add("reset-optimizer", &o.reset_optimizer,
        "with --resume: load the model but start the optimizer's state afresh (e.g. to switch --optimizer)");
  p.add("trace", &o.trace, "write a Chrome trace (Perfetto) of the run to this file");
  p.add("explain", &o.explain,
        "after step N, print how it went on every rank: buckets, waits, slowest rank, what other bucket caps "
        "would change (0: off, or the DDP_EXPLAIN variable)",
        B::at_least(0));
  p.add("sample-tokens", &o.sample_tokens, "gpt: characters to generate at the end", B::at_least(0));
  p.add("hidden", &o.hidden, "mlp: hidden width", B::at_least(1));
  p.add("depth", &o.depth, "mlp: hidden layers", B::at_least(0));
  p.add("context", &o.context, "gpt: context length", B::at_least(1));
  p.add("d-model", &o.d_model, "gpt: model width", B::at_least(1));
  p.add("n-head", &o.n_head, "gpt: attention heads", B::at_least(1));
  p.add("n-layer", &o.n_layer, "gpt: blocks", B::at_least(1));
  p.add("dropout", &o.dropout, "gpt: dropout", B::between(0, 1, true));
  p.add("synthetic-samples", &o.synthetic_samples, "size of synthetic data sets", B::at_least(1));
  p.add("uneven-steps", &o.uneven_steps,
        "uneven data on purpose: rank r runs this many steps fewer per rank index (shows Join)", B::at_least(0));
  p.add("join", &o.join, "with uneven steps, ranks that finish early shadow the others (DDP Join)");
  p.add("deterministic", &o.deterministic,
        "bitwise the same parameters at any world size: each step is --micro-batches micro-batches of "
        "--batch-size over all ranks, averaged exactly (docs/determinism.md)");
  p.add("micro-batches", &o.micro_batches,
        "--deterministic: micro-batches per step over all ranks (the world size must not exceed it)",
        B::at_least(1));
  bool fault_tolerant = false;
  std::string ft_log, ft_fault, ft_check;
  p.add("fault-tolerant", &fault_tolerant,
        "per-step fault tolerance under `ddprun --fault-tolerant`: a rank that dies leaves, the others go on, a "
        "replacement joins (docs/fault-tolerance.md)");
  p.add("ft-log", &ft_log, "--fault-tolerant: record the samples of each step and the final parameters in this folder");
  p.add("ft-fault", &ft_fault,
        "--fault-tolerant tests: 'slot=K,step=S,phase=forward|backward|optimizer|commit|recovery|stall[,incarnation=I]' "
        "(';' between several): that process kills itself there with SIGKILL");
  p.add("ft-check", &ft_check,
        "check the record of a --fault-tolerant run in this folder (--ft-log) against one process trained on "
        "the same batches, with the same other flags; exit 0 when it holds");
  double ft_check_tolerance = 1e-12;
  p.add("ft-check-tolerance", &ft_check_tolerance,
        "--ft-check: the largest |difference| to the one-process reference (1e-12; a GPU run's float64 differs "
        "from the CPU reference's by more)", B::above(0));
  p.add("threads", &threads, "threads per rank, shared by BLAS and the intra-op pool (0: OPENBLAS_NUM_THREADS or the library default)", B::at_least(0));
  // "--zero N" as well as "--zero=N": the optional-value choice takes its value only after '=' (a bare
  // "--zero" is stage 1), so a stage given as the next word is joined to it here.
  std::vector<std::string> joined;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (; i < argc; ++i) joined.emplace_back(argv[i]);
      break;
    }
    if (a == "--zero" && i + 1 < argc && std::string(argv[i + 1]).size() == 1 && argv[i + 1][0] >= '0' &&
        argv[i + 1][0] <= '9') {
      joined.push_back(a + "=" + argv[++i]);
      continue;
    }
    joined.push_back(a);
  }
  std::vector<const char*> args;
  for (const std::string& a : joined) args.push_back(a.c_str());
  try {
    p.parse(static_cast<int>(args.size()), args.data());
    o.seed = static_cast<uint64_t>(seed);
    o.zero = std::stoi(zero);
    if (!ft_check.empty()) return models::check_fault_tolerant_run(o, ft_check, ft_check_tolerance);
    dist::DistEnv env = dist::init_from_env();
    log::set_rank(env.world_size > 1 ? env.rank : -1);
    if (threads > 0) kernels::cpu::set_thread_budget(threads);  // OpenBLAS + the intra-op pool
    // "auto": from the device the parameters will live on (not merely whether a GPU is visible).
    // The GPU by train's rule (device_for_rank: an explicit cuda:N wins over LOCAL_RANK); an NCCL group
    // runs on that same GPU.
    const Device device = device_for_rank(o.device, models::train_local_rank(env.rank), cuda_device_count());
    const std::string resolved = dist::resolve_backend(backend, device);
    if (fault_tolerant) {
      models::FtRunOptions ft;
      ft.log_dir = ft_log;
      ft.faults = models::parse_ft_faults(ft_fault);
      models::train_fault_tolerant(o, env, resolved, ft);
      return 0;
    }
    DDP_CHECK(ft_log.empty() && ft_fault.empty(), "--ft-log and --ft-fault belong to --fault-tolerant; add it");
    dist::ProcessGroupOptions po;
    if (device.is_cuda()) po.cuda_device = device.index;
    auto ctx = dist::init_distributed(env, resolved, po);
    // ZeRO-3: its parameter all-gathers on a second group over the same ranks, in their own order
    // (ShardedDataParallel requires it at world > 1; destroyed before ctx's store).
    std::shared_ptr<dist::ProcessGroup> gather_group;
    if (o.zero == 3 && env.world_size > 1) {
      dist::ProcessGroupOptions go;
      go.name = "train-zero3-gather";
      go.cuda_device = po.cuda_device;
      gather_group = dist::new_process_group(env, ctx.store, resolved, go);
    }
    models::train(o, ctx.group, gather_group);
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", log::for_user(e.what()).c_str());
    launch::report_error_to_launcher(e.what());  // torchrun's / ddprun's failure summary shows it
    return 2;
  } catch (const std::exception& e) {
    const std::string message = log::for_user(e.what());
    std::fprintf(stderr, "train: error: %s\n", message.c_str());
    launch::report_error_to_launcher("train: error: " + message);
    return 1;
  }
}
