// train_checkpoint.cpp - resuming and saving the checkpoints of `train` (see train_checkpoint.h).
#include "models/train_checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "models/make_model.h"
#include "models/train_checks.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/training_checkpoint.h"

namespace ddp::models {

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
  auto st = checkpoint::load_training_checkpoint(path, *s.model, s.optimizer.get(), load);
  DDP_CHECK(st.seed == o.seed, "checkpoint ", path, " was written with --seed ", st.seed,
            ", this run has --seed ", o.seed, "; resume with the same seed");
  at.path = path;
  at.step = st.step;
  at.epoch = st.epoch;
  s.loader->resume(
      {st.epoch, st.batches_in_epoch, 0, "metadata field 'batches_in_epoch' of checkpoint '" + path + "'"});
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
  const std::string name = "ckpt-step" + std::to_string(step) + ".safetensors";
  if (s.rank == 0) {
    std::filesystem::create_directories(o.checkpoint_dir);
    for (const std::string& stale : checkpoint::remove_stale_temp_files(o.checkpoint_dir))
      if (talk) std::printf("removed %s (left by an interrupted save)\n", stale.c_str());
    auto pos = s.loader->position();
    checkpoint::TrainingState st{step, pos.epoch, pos.batches_consumed, o.seed, options_json(o), {}, {}};
    // --zero 2/3: the whole model (the caller holds the gathered scope), no optimizer state (each rank holds
    // only its shard's, not consolidated yet)
    checkpoint::save_training_checkpoint(o.checkpoint_dir + "/" + name, *s.model,
                                         s.sharded ? nullptr : s.optimizer.get(), st);
    checkpoint::write_latest(o.checkpoint_dir, name);
    if (talk) std::printf("checkpoint: %s/%s\n", o.checkpoint_dir.c_str(), name.c_str());
    std::fflush(stdout);
  }
  pg.barrier()->wait();
  return o.checkpoint_dir + "/" + name;
}

}  // namespace ddp::models
