// train_setup.cpp - what `train` builds before its first step (see train_setup.h).
#include "models/train_setup.h"

#include <algorithm>
#include <cstdlib>

#include "models/make_model.h"
#include "models/train_checks.h"
#include "runtime/core/log.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/synthetic.h"
#include "runtime/data/text_dataset.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/nn/sync_batchnorm.h"

namespace ddp::models {

TrainData load_data(const TrainOptions& o) {
  std::string which = o.data;
  if (which == "auto")
    which = o.model == "gpt" ? "moby-dick" : (o.model == "branchy" ? "synthetic" : "fashion-mnist");
  TrainData d;
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

std::unique_ptr<optim::Optimizer> make_train_optimizer(const TrainOptions& o,
                                                       std::vector<nn::NamedTensor> params) {
  if (o.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        std::move(params), optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  if (o.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  DDP_FAIL("--optimizer ", o.optimizer, ": expected sgd or adamw");
}

int train_local_rank(int rank) {
  const char* local = std::getenv("LOCAL_RANK");
  if (!local || !*local) return rank;
  char* end = nullptr;
  const long v = std::strtol(local, &end, 10);
  DDP_CHECK(*end == '\0' && v >= 0 && v < (1 << 20), "LOCAL_RANK='", local,
            "' in the environment is not a non-negative integer");
  return static_cast<int>(v);
}

TrainSetup set_up_training(const TrainOptions& o, std::shared_ptr<dist::ProcessGroup> pg,
                           std::shared_ptr<dist::ProcessGroup> gather_group) {
  TrainSetup s;
  s.rank = pg->rank();
  s.world = pg->size();
  validate_options(o);
  check_deterministic_options(o, s.world);
  check_zero_options(o, s.world, gather_group != nullptr);
  DDP_CHECK(o.dtype == "float32" || o.dtype == "float64" || o.dtype == "bfloat16", "--dtype ", o.dtype,
            ": expected float32, float64 or bfloat16");
  // bfloat16: float32 parameters and optimizer, bf16 compute in matmul/linear/attention
  // (ops/mixed_precision.h; the caller holds the ops::Bf16Compute switch)
  s.dtype = o.dtype == "float64" ? DType::F64 : DType::F32;
  // --device cuda:N is GPU N; cuda and auto the GPU of this rank's local rank (device_for_rank, device.h).
  s.device = device_for_rank(o.device, train_local_rank(s.rank), cuda_device_count());
  if (s.device.is_cuda()) set_current_cuda_device(s.device.index);  // kernels launch on its streams
  check_deterministic_device(o, s.device);

  check_output_paths(o, *pg);
  s.data = load_data(o);
  nn::manual_seed(o.seed);
  s.model = make_model(o, s.dtype);
  s.model->to(s.device);
  if (o.sync_bn) {
    s.model = nn::convert_sync_batchnorm(s.model, pg);
    DDP_CHECK(nn::count_sync_batchnorm(*s.model) > 0, "--sync-bn: model ", o.model,
              " has no BatchNorm2d layer to synchronize (use --model cnn)");
  }
  DDPOptions dopt;
  dopt.bucket_cap_mb = o.bucket_cap_mb;
  dopt.first_bucket_mb = o.first_bucket_mb;
  dopt.find_unused_parameters = o.find_unused_parameters;
  dopt.gradient_as_bucket_view = o.gradient_as_bucket_view;
  dopt.static_graph = o.static_graph;
  if (o.zero < 2)  // ZeRO-2/3 reduce by reduce-scatter: no hook (check_zero_options refused another one)
    dopt.comm_hook = make_comm_hook(o.comm_hook, static_cast<int>(o.powersgd_rank), o.powersgd_start_iter);
  // The reducer's errors in train's words: its flags, and its log's "step N" (numbered in train()).
  dopt.advice.enable_find_unused_parameters = "run train with --find-unused-parameters";
  dopt.advice.disable_static_graph = "run train without --static-graph";
  dopt.advice.iteration = "step";
  dopt.explain_iteration = o.explain;  // numbered as the steps, like the errors (train() renumbers after a resume)
  auto inner = [&o](std::vector<nn::NamedTensor> params) {
    return make_train_optimizer(o, std::move(params));
  };
  if (o.zero >= 2) {  // ZeRO-2/3: the sharded wrapper (it builds the DDP and reducer itself) and optimizer
    ShardOptions so;
    so.stage = static_cast<int>(o.zero);
    so.ddp = dopt;
    if (o.zero == 3) so.gather_group = gather_group;
    s.sdp = std::make_unique<ShardedDataParallel>(s.model, pg, so);
    auto sharded = std::make_unique<ShardedOptimizer>(*s.sdp, inner);
    s.sharded = sharded.get();
    s.optimizer = std::move(sharded);
  } else {
    s.ddp = std::make_unique<DistributedDataParallel>(s.model, pg, dopt);
    if (o.zero == 1) {
      auto zero = std::make_unique<optim::ZeroRedundancyOptimizer>(s.model->named_parameters(), pg, inner);
      s.zero = zero.get();
      s.optimizer = std::move(zero);
    } else {
      s.optimizer = make_train_optimizer(o, s.model->named_parameters());
    }
  }

  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.num_replicas = s.world;
  lo.rank = s.rank;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.drop_incomplete_batch = true;
  lo.device = s.device;
  if (o.deterministic) lo.micro_batches_per_step = o.micro_batches;  // the same micro-batches at any world
  s.loader = std::make_unique<data::DataLoader>(s.data.train, lo);
  data::DataLoaderOptions vo = lo;
  vo.shuffle = false;
  vo.each_sample_once = true;
  vo.drop_incomplete_batch = false;
  s.val_loader = std::make_unique<data::DataLoader>(s.data.val, vo);
  DDP_CHECK(s.loader->batches_per_epoch() >= o.grad_accum, "the training split gives ",
            s.loader->batches_per_epoch(), " batches per rank per epoch, fewer than --grad-accum ", o.grad_accum,
            "; lower --batch-size");

  s.micro_batches = o.deterministic ? data::micro_batches_of_rank(o.micro_batches, s.world, s.rank) : 0;
  if (o.deterministic)
    DDP_CHECK(s.loader->batches_per_epoch() >= s.micro_batches, "--deterministic: the training split gives ",
              s.loader->batches_per_epoch() / s.micro_batches, " steps of --micro-batches ", o.micro_batches,
              " x --batch-size ", o.batch_size, " rows per epoch; lower --batch-size or --micro-batches");
  s.steps_per_epoch = s.loader->batches_per_epoch() / (o.deterministic ? s.micro_batches : o.grad_accum);
  const int64_t planned = o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs) * s.steps_per_epoch;
  // This rank's own number of steps, fewer with --uneven-steps (rank r runs K·r fewer) or when its data (or
  // its --steps) gives it fewer. The ranks learn the fewest and the most (two all-reduces): every rank runs
  // the first common_steps, so side collectives (log all-reduce, evaluation, checkpoints) happen only
  // there; the schedule spans the most; and when they differ, Join shadows the rest (with --join).
  DDP_CHECK(o.uneven_steps >= 0, "--uneven-steps must be >= 0, got ", o.uneven_steps);
  s.my_steps = planned - o.uneven_steps * s.rank;
  auto agree = [&](int64_t v, dist::ReduceOp op) {
    Tensor t = Tensor::from_data<int64_t>({v}, {1});
    host_allreduce(*pg, t, op);
    return t.data<int64_t>()[0];
  };
  s.common_steps = agree(s.my_steps, dist::ReduceOp::Min);
  s.total_steps = agree(s.my_steps, dist::ReduceOp::Max);
  if (o.uneven_steps > 0)
    DDP_CHECK(s.common_steps >= 1, "--uneven-steps ", o.uneven_steps, " leaves rank ", s.world - 1,
              " no step of the ", planned, "; use at most ", (planned - 1) / std::max(1, s.world - 1));
  DDP_CHECK(s.common_steps >= 1, "rank ", s.rank,
            ": some rank has no training step (the fewest of the ranks: ", s.common_steps,
            "); give every rank at least one batch per --grad-accum");
  if (o.deterministic) {
    // Every rank runs every step (total_steps), one out of data with no micro-batch: Join built in.
    s.deterministic = std::make_unique<DeterministicReduction>(
        s.model->parameters(), s.model->buffers(), pg, DeterministicOptions{.micro_batches = o.micro_batches});
  } else if (s.common_steps < s.total_steps && o.join) {
    JoinOptions jo;
    jo.zero_grad_set_to_none = !o.gradient_as_bucket_view;  // as train_step zeroes them
    if (s.zero) {
      jo.joinables.push_back(s.zero);  // its step's broadcasts are shadowed too, after the same clipping
      if (o.clip_grad > 0)
        s.zero->set_join_gradient_transform([model = s.model, clip = o.clip_grad] {
          optim::clip_grad_norm_tensor_(model->parameters(), clip);  // on CUDA: nothing read back
        });
    }
    if (s.sharded) {
      jo.joinables.push_back(s.sdp.get());  // ZeRO-3: a joined rank shadows the gathers (needs the gather group)
      jo.joinables.push_back(s.sharded);    // and the step, after the same clipping
      if (o.clip_grad > 0)
        s.sharded->set_join_gradient_transform(
            [sdp = s.sdp.get(), clip = o.clip_grad] { sdp->clip_grad_norm_tensor_(clip); });
    }
    s.join = std::make_unique<Join>(s.dp(), jo);
  }
  s.schedule = optim::WarmupCosine{o.lr, o.lr * o.min_lr_ratio, std::min(o.warmup_steps, s.total_steps),
                                   s.total_steps, o.schedule != "constant"};
  return s;
}

}  // namespace ddp::models
