// train.h - the training loop shared by the `train` program, the tests and the benchmarks: one model
// (mlp, cnn, gpt, branchy), its data (Fashion-MNIST, Moby Dick or synthetic), DDP, an optimizer with warmup +
// cosine schedule, gradient accumulation through no_sync, periodic evaluation (each sample counted once),
// checkpoints with exact resume, a Chrome trace, and a log line per logged step from rank 0. The loss is
// averaged over ranks every step, and a NaN / Inf loss stops every rank (train_checks.h has the checks).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/distributed/process_group.h"

namespace ddp::models {

struct TrainOptions {
  std::string model = "gpt";      // mlp | cnn | gpt | branchy
  std::string data = "auto";      // auto | fashion-mnist | moby-dick | synthetic
  std::string dtype = "float32";  // float32 | float64 | bfloat16 (float32 weights, bf16 compute)
  std::string device = "auto";    // auto | cpu | cuda
  // float32 GEMMs on the GPU: auto keeps the process's setting (default highest, or DDP_FLOAT32_MATMUL_PRECISION);
  // highest | high | medium sets it for the process (core/float32_math.h: high allows TF32 tensor cores).
  std::string float32_matmul_precision = "auto";
  int64_t batch_size = 16;        // per rank, per micro-step
  int64_t grad_accum = 1;         // micro-steps per optimizer step (all but the last under no_sync)
  int64_t steps = 200;            // optimizer steps (0: use epochs)
  int64_t epochs = 0;
  std::string optimizer = "adamw";  // sgd | adamw
  double lr = 3e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 20;
  std::string schedule = "cosine";  // cosine | constant
  double momentum = 0.9;            // sgd
  double weight_decay = 0.0;
  double clip_grad = 1.0;  // 0: off
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool sync_bn = false;  // BatchNorm statistics over all ranks (nn::convert_sync_batchnorm)
  // ZeRO stage: 0 off; 1 optimizer state sharded (ZeroRedundancyOptimizer, whole parameters per rank);
  // 2 gradients + optimizer state sharded, 3 parameters too (ShardedDataParallel + ShardedOptimizer).
  // Stages 2/3 refuse --comm-hook other than allreduce, --gradient-as-bucket-view and --sync-bn. The
  // checkpoints of every stage are one format (whole model, whole optimizer state): any stage at any world
  // size resumes any of them.
  int zero = 0;
  bool static_graph = false;  // DDP static_graph (the same graph every iteration)
  std::string comm_hook = "allreduce";  // allreduce | bf16 | powersgd (runtime/ddp/comm_hook.h)
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_iter = 10;
  uint64_t seed = 1234;
  int64_t log_interval = 10;
  int64_t eval_interval = 100;      // 0: only at the end
  int64_t eval_batches = 20;        // per rank; 0: the whole validation split
  std::string checkpoint_dir;       // empty: no checkpoints
  int64_t checkpoint_interval = 0;  // steps; 0: only at the end (when checkpoint_dir is set)
  std::string resume;               // a checkpoint path, or "auto" (latest in checkpoint_dir)
  bool reset_optimizer = false;     // resume the model but start the optimizer's state afresh
  std::string trace;                // Chrome trace file ("" off); each rank's: trace::rank_trace_path
  int64_t explain = 0;              // print an account of this step (from 1) on every rank; 0: DDP_EXPLAIN
  int64_t sample_tokens = 200;      // gpt: length of the generated sample at the end
  // model shapes
  int64_t hidden = 1024, depth = 2;                              // mlp
  int64_t context = 64, d_model = 128, n_head = 4, n_layer = 2;  // gpt
  double dropout = 0.0;
  int64_t synthetic_samples = 4096;
  std::string data_path;   // override the data set's default location
  bool quiet = false;      // no per-step lines (tests)
  int64_t stop_after = 0;  // stop (as if killed) after this many steps; for resume tests
  // Uneven data on purpose: rank r runs uneven_steps * r steps fewer, as if its shard were shorter. With
  // join (the default) the ranks that finish early shadow the others (ddp::Join) and the run ends cleanly;
  // without it every rank fails with a collective-mismatch error.
  int64_t uneven_steps = 0;
  bool join = true;
  double peak_tflops = 0;  // per rank, for MFU (0: the GPU's datasheet figure when known)
  // The deterministic mode (docs/determinism.md): each step is `micro_batches` micro-batches of batch_size
  // rows over all ranks (so the step's batch does not depend on the world size), split over the ranks, each
  // computed alone, and averaged exactly (runtime/ddp/deterministic_reduction.h): the parameters after any
  // step are bitwise the same at every world size <= micro_batches, backend, bucket cap and thread count.
  // Ranks with uneven data take part with no micro-batch (Join built in). Any --zero stage (2/3: whole
  // parameters and gradients during the step). Refuses --comm-hook other than allreduce, --grad-accum > 1,
  // --sync-bn, --gradient-as-bucket-view and CUDA, each by name.
  bool deterministic = false;
  int64_t micro_batches = 4;
  // Tests: this rank's loss of step fault_nan_step (1-based) is replaced by NaN (0: never).
  int64_t fault_nan_step = 0;
  int fault_nan_rank = 0;
};

struct TrainResult {
  int64_t steps_done = 0;
  double first_loss = 0, final_train_loss = 0;  // averaged over ranks
  double val_loss = 0, val_accuracy = -1;       // accuracy for classifiers
  double samples_per_s = 0, tokens_per_s = 0;
  double wall_s = 0;
  double exposed_comm_share = 0;  // median exposed communication / step time
  double model_tflops = 0;        // model FLOPs per rank / median step time (gpt, mlp), in TFLOP/s
  double mfu = -1;                // model_tflops / peak; -1 when no peak is known (CPU without --peak-tflops)
  int64_t optimizer_state_bytes = 0;  // held by this rank (with --zero: its shard)
  std::string memory_table;           // --zero 2/3: this rank's memory account (MemoryAccount::table())
  double comm_bytes_per_step = 0;     // handed to the gradient all-reduces by this rank, mean over the run
                                      // (includes the uncompressed warm-up iterations of PowerSGD)
  std::string sample_text;        // gpt
  std::string checkpoint_path;
  std::vector<std::vector<double>> final_params;  // for equivalence tests
  std::vector<std::vector<double>> final_buffers;  // the floating-point buffers (BatchNorm statistics), likewise
  uint64_t parameter_checksum = 0;  // FNV-1a over every parameter's bytes, in order (train --deterministic prints it)
};

// Runs the loop on this rank of `pg`. Prints from rank 0 unless options.quiet.
TrainResult train(const TrainOptions& options, std::shared_ptr<dist::ProcessGroup> pg);
// The same; --zero 3 carries its parameter all-gathers on `gather_group` (a second group over the same ranks,
// e.g. dist::new_process_group with its own ProcessGroupOptions::name), required by ZeRO-3 at world > 1
// (the one-group overload refuses --zero 3 there). Ignored by the other stages.
TrainResult train(const TrainOptions& options, std::shared_ptr<dist::ProcessGroup> pg,
                  std::shared_ptr<dist::ProcessGroup> gather_group);

}  // namespace ddp::models
