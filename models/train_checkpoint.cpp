// train_checkpoint.cpp - resuming and saving the checkpoints of `train` (see train_checkpoint.h).
#include "models/train_checkpoint.h"
#include "models/train_deterministic.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "models/make_model.h"
#include "models/train_checks.h"
#include "runtime/autograd/node.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/training_checkpoint.h"

namespace ddp::models {

namespace {
// --zero 2/3: a checkpoint holds the whole model and the whole optimizer state (of any stage and world size),
// the live model only this rank's shards. The file loads, with every check of load_training_checkpoint, into
// a whole model and a plain optimizer of this run's kind on the CPU first (for the resume only); then every
// rank takes its part of the same values: the parameters through ShardedDataParallel::load_parameters (ZeRO-2
// the whole buffers, ZeRO-3 its shards), the buffers as they are, and the optimizer state through
// ShardedOptimizer::load_consolidated_state. Not collective.
checkpoint::TrainingState load_into_shards(const TrainOptions& o, TrainSetup& s, const std::string& path,
                                           const checkpoint::LoadOptions& load) {
  auto whole = make_model(o, s.dtype);
  auto plain = o.reset_optimizer ? nullptr : make_train_optimizer(o, whole->named_parameters());
  auto st = checkpoint::load_training_checkpoint(path, *whole, plain.get(), load);
  std::map<std::string, Tensor> params;
  for (auto& p : whole->named_parameters()) params[p.name] = p.tensor;
  s.sdp->load_parameters(params);
  std::map<std::string, Tensor> buffers;
  for (auto& b : whole->named_buffers()) buffers[b.name] = b.tensor;
  {
    autograd::NoGradGuard no_grad;
    for (auto& b : s.model->named_buffers()) {
      auto it = buffers.find(b.name);
      DDP_CHECK(it != buffers.end(), "checkpoint ", path, ": the model's buffer ", b.name, " was not loaded");
      b.tensor.copy_from(it->second);
    }
  }
  if (plain) s.sharded->load_consolidated_state(plain->state(), plain->steps());
  return st;
}
}  // namespace

ResumePoint resume_training(const TrainOptions& o, TrainSetup& s, bool talk) {
  ResumePoint at;
  if (o.resume.empty()) {
    s.loader->start_epoch(0);
    return at;
  }
  const std::string path = resume_path(o);
  checkpoint::LoadOptions load;
  load.reset_optimizer = o.reset_optimizer;
  load.live_config = options_json(o);
  if (o.reset_optimizer) load.config_keys_may_differ = {"optimizer", "lr"};
  auto st = s.sdp ? load_into_shards(o, s, path, load)
                  : checkpoint::load_training_checkpoint(path, *s.model, s.optimizer.get(), load);
  DDP_CHECK(st.seed == o.seed, "checkpoint ", path, " was written with --seed ", st.seed,
            ", this run has --seed ", o.seed, "; resume with the same seed");
  check_resume_mode(st.config_json, o.deterministic, path);
  DDP_CHECK(!st.extra.count("data_rule"), "checkpoint '", path, "' was written by train --fault-tolerant, whose data ",
            "position counts samples of the epoch's whole order (docs/fault-tolerance.md); resume it with "
            "--fault-tolerant under ddprun --fault-tolerant");
  at.path = path;
  at.step = st.step;
  at.epoch = st.epoch;
  const int64_t batches = o.deterministic ? rank_batches_consumed(st.batches_in_epoch, s.micro_batches,
                                                                   o.micro_batches)
                                          : st.batches_in_epoch;
  s.loader->resume({st.epoch, batches, 0, "metadata field 'batches_in_epoch' of checkpoint '" + path + "'"});
  if (talk)
    std::printf("resumed from %s at step %lld (epoch %lld, batch %lld)%s\n", path.c_str(),
                static_cast<long long>(at.step), static_cast<long long>(st.epoch),
                static_cast<long long>(st.batches_in_epoch),
                o.reset_optimizer ? "; optimizer state reset (--reset-optimizer)" : "");
  return at;
}

std::string save_checkpoint(const TrainOptions& o, TrainSetup& s, dist::ProcessGroup& pg, int64_t step,
                            bool talk) {
  if (o.checkpoint_dir.empty()) return "";
  if (s.zero) s.zero->consolidate_state_dict(0);  // every rank's shard to rank 0, which writes
  // --zero 2/3: every rank gets the whole optimizer state by parameter name, as the plain optimizer over the
  // whole model names it (collective: every rank here; rank 0 writes it, the others drop it)
  checkpoint::OptimizerSnapshot consolidated;
  if (s.sharded)
    consolidated = {checkpoint::optimizer_kind(s.sharded->inner()), s.sharded->steps(),
                    s.sharded->consolidated_state()};
  const std::string name = "ckpt-step" + std::to_string(step) + ".safetensors";
  if (s.rank == 0) {
    std::filesystem::create_directories(o.checkpoint_dir);
    for (const std::string& stale : checkpoint::remove_stale_temp_files(o.checkpoint_dir))
      if (talk) std::printf("removed %s (left by an interrupted save)\n", stale.c_str());
    auto pos = s.loader->position();
    // --deterministic: counted over all ranks, so the run resumes at any world size
    const int64_t batches =
        o.deterministic ? global_micro_batches_consumed(pos.batches_consumed, s.micro_batches, o.micro_batches)
                        : pos.batches_consumed;
    checkpoint::TrainingState st{step, pos.epoch, batches, o.seed, options_json(o), {}, {}};
    // The same file at every stage and world size. --zero 2/3: the whole model (the caller holds the gathered
    // scope) and the consolidated optimizer state.
    const std::string file = o.checkpoint_dir + "/" + name;
    if (s.sharded)
      checkpoint::save_training_checkpoint(file, *s.model, consolidated, st);
    else
      checkpoint::save_training_checkpoint(file, *s.model, s.optimizer.get(), st);
    checkpoint::write_latest(o.checkpoint_dir, name);
    if (talk) std::printf("checkpoint: %s/%s\n", o.checkpoint_dir.c_str(), name.c_str());
    std::fflush(stdout);
  }
  pg.barrier()->wait();
  return o.checkpoint_dir + "/" + name;
}

}  // namespace ddp::models
