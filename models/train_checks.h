// train_checks.h - the checks of the training loop that protect a run from careless input and from itself:
// the options' ranges (for callers of train() that bypass the command line), the output paths before the
// first step, the `latest` checkpoint of --resume auto, a loss that stops being finite, and the text printed
// for users (a model's sample may be any bytes). Every check that can fail on one rank only is agreed on by
// all ranks, so they stop together with the same step in the message instead of hanging in a collective.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/core/device.h"
#include "runtime/distributed/process_group.h"

namespace ddp::models {

// Throws ddp::Error naming the option (its flag) when a value is out of range or options contradict.
void validate_options(const TrainOptions& o);
// --deterministic: nothing whose result depends on how the step's micro-batches are split over the ranks
// (each refusal names the flag, why, and the way out).
void check_deterministic_options(const TrainOptions& o, int world);
// --deterministic on `device`: the CPU only (named refusal otherwise).
void check_deterministic_device(const TrainOptions& o, const Device& device);
// --zero: a stage 0-3, and with 2/3 nothing they do not support (each refusal names the flag and the way out).
// has_gather_group: the caller gave train() a second group for ZeRO-3's gathers (required at world > 1).
void check_zero_options(const TrainOptions& o, int world, bool has_gather_group);

// Creates --checkpoint-dir (rank 0) and checks that it and the folder of --trace (every rank) are writable,
// before anything is trained. All ranks take part; when any rank fails, every rank throws (the failing one
// with its reason, the others naming it).
void check_output_paths(const TrainOptions& o, dist::ProcessGroup& pg);

// The checkpoint --resume names: the file itself, or with "auto" the one --checkpoint-dir/latest names.
std::string resume_path(const TrainOptions& o);

// Watches the training loss. mean_loss() all-reduces this rank's loss of one step (one double: every step
// costs one tiny collective, which the log line reuses) and returns the mean over ranks; when it is NaN or
// Inf on any rank, every rank throws the same ddp::Error naming the step, the first such rank and the last
// checkpoint whose parameters gave a finite loss.
class LossGuard {
 public:
  LossGuard(dist::ProcessGroup& pg, std::string resumed_from);
  double mean_loss(double local_loss, int64_t step);
  // A checkpoint was written after the step just checked (its parameters are checked by the next step).
  void saved(const std::string& path) { pending_ = path; }

 private:
  dist::ProcessGroup& pg_;
  std::string good_;     // last checkpoint known to give a finite loss
  std::string pending_;  // written, not yet confirmed by a step
};

// `text` with bytes that are not printable UTF-8 (control characters other than newline and tab, invalid
// or truncated UTF-8 sequences) written as \xNN, so a sample of a byte-level model prints as text.
std::string printable_text(const std::string& text);

}  // namespace ddp::models
