// train_checks.cpp - option ranges, output paths, resume path, the loss guard and printable text for the
// training loop (see train_checks.h).
#include "models/train_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/error.h"
#include "runtime/distributed/host_collectives.h"

namespace ddp::models {
namespace {

// "" when a file can be created in `dir` (tried with a probe file), else why not.
std::string unwritable_reason(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return "the folder '" + dir + "' does not exist";
  if (!std::filesystem::is_directory(dir, ec)) return "'" + dir + "' is not a folder";
  const std::string probe = dir + "/.ddp-write-test." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create a file in '" + dir + "': " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

// The smallest rank whose `failed` is true (world size when none), agreed by all ranks.
int first_failing_rank(dist::ProcessGroup& pg, bool failed) {
  Tensor t = Tensor::from_data<double>({failed ? static_cast<double>(pg.rank()) : pg.size()}, {1});
  host_allreduce(pg, t, dist::ReduceOp::Min);
  return static_cast<int>(t.data<double>()[0]);
}

}  // namespace

void check_deterministic_options(const TrainOptions& o, int world) {
  if (!o.deterministic) return;
  const char* why = " (docs/determinism.md)";
  DDP_CHECK(o.micro_batches >= 1, "--micro-batches must be >= 1, got ", o.micro_batches);
  DDP_CHECK(world <= o.micro_batches, "--deterministic: world ", world, " is larger than --micro-batches ",
            o.micro_batches, ", so some rank would hold no micro-batch of any step; use --micro-batches >= ",
            world, " (a multiple of the world size keeps the ranks' work even)", why);
  DDP_CHECK(o.grad_accum == 1, "--deterministic: --grad-accum ", o.grad_accum,
            " is not used: each step is --micro-batches micro-batches over all ranks (",
            o.micro_batches, " now), which is the accumulation; drop --grad-accum and raise --micro-batches",
            why);
  DDP_CHECK(o.comm_hook == "allreduce", "--deterministic: --comm-hook ", o.comm_hook,
            " compresses each rank's gradient sum, which changes with the world size; the mode moves exact "
            "64-bit integers instead: drop --comm-hook", why);
  DDP_CHECK(!o.sync_bn, "--deterministic: --sync-bn takes BatchNorm's statistics over all ranks' rows, which "
            "change with the world size; without it each micro-batch is normalized by its own statistics (the "
            "same wherever it runs) and the running statistics are averaged exactly: drop --sync-bn", why);
  DDP_CHECK(!o.gradient_as_bucket_view, "--deterministic: --gradient-as-bucket-view has no buckets to view: "
            "the mode's gradients come from its exact mean, not from DDP's buckets; drop the flag", why);
}

void check_deterministic_device(const TrainOptions& o, const Device& device) {
  DDP_CHECK(!o.deterministic || device.is_cpu(), "--deterministic runs on the CPU (its fixed-point kernels "
            "have no CUDA twin yet); use --device cpu (docs/determinism.md)");
}

void validate_options(const TrainOptions& o) {
  auto at_least = [](const char* flag, int64_t v, int64_t min) {
    DDP_CHECK(v >= min, flag, " must be >= ", min, ", got ", v);
  };
  at_least("--batch-size", o.batch_size, 1);
  at_least("--grad-accum", o.grad_accum, 1);
  at_least("--steps", o.steps, 0);
  at_least("--epochs", o.epochs, 0);
  at_least("--warmup-steps", o.warmup_steps, 0);
  at_least("--log-interval", o.log_interval, 0);
  at_least("--eval-interval", o.eval_interval, 0);
  at_least("--eval-batches", o.eval_batches, 0);
  at_least("--checkpoint-interval", o.checkpoint_interval, 0);
  at_least("--sample-tokens", o.sample_tokens, 0);
  at_least("--hidden", o.hidden, 1);
  at_least("--depth", o.depth, 0);
  at_least("--context", o.context, 1);
  at_least("--d-model", o.d_model, 1);
  at_least("--n-head", o.n_head, 1);
  at_least("--n-layer", o.n_layer, 1);
  at_least("--synthetic-samples", o.synthetic_samples, 1);
  auto finite_in = [](const char* flag, double v, double lo, double hi, const char* range) {
    DDP_CHECK(std::isfinite(v) && v >= lo && v <= hi, flag, " must be ", range, ", got ", v);
  };
  constexpr double kAny = std::numeric_limits<double>::max();
  finite_in("--lr", o.lr, 0, kAny, "a finite number >= 0");
  finite_in("--min-lr-ratio", o.min_lr_ratio, 0, 1, "in [0, 1]");
  finite_in("--momentum", o.momentum, 0, 1, "in [0, 1)");
  DDP_CHECK(o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  finite_in("--weight-decay", o.weight_decay, 0, kAny, "a finite number >= 0");
  finite_in("--clip-grad", o.clip_grad, 0, kAny, "a finite number >= 0 (0: off)");
  DDP_CHECK(std::isfinite(o.bucket_cap_mb) && o.bucket_cap_mb > 0, "--bucket-cap-mb must be > 0, got ",
            o.bucket_cap_mb);
  DDP_CHECK(std::isfinite(o.first_bucket_mb) && o.first_bucket_mb > 0, "--first-bucket-mb must be > 0, got ",
            o.first_bucket_mb);
  finite_in("--dropout", o.dropout, 0, 1, "in [0, 1)");
  DDP_CHECK(o.dropout < 1, "--dropout must be in [0, 1), got ", o.dropout);
  DDP_CHECK(o.resume != "auto" || !o.checkpoint_dir.empty(),
            "--resume auto looks for the newest checkpoint in --checkpoint-dir, which is not set: pass "
            "--checkpoint-dir DIR, or give --resume the path of a checkpoint file");
}

void check_zero_options(const TrainOptions& o, int world, bool has_gather_group) {
  DDP_CHECK(o.zero >= 0 && o.zero <= 3, "--zero must be 0, 1, 2 or 3, got ", o.zero);
  if (o.zero < 2) return;
  const std::string z = "--zero " + std::to_string(o.zero);
  DDP_CHECK(o.comm_hook == "allreduce", z, " does not take --comm-hook ", o.comm_hook,
            ": its gradients are reduce-scattered into shards, no hook runs; drop --comm-hook, or use --zero 0 "
            "or 1 with it");
  DDP_CHECK(!o.gradient_as_bucket_view, z,
            " does not take --gradient-as-bucket-view: no rank holds a whole gradient to view (only its shard); "
            "drop the flag, or use --zero 0 or 1 with it");
  DDP_CHECK(!o.sync_bn, z,
            " does not take --sync-bn (not supported with sharded parameters yet); drop --sync-bn, "
            "or use --zero 0 or 1 with it");
  DDP_CHECK(!(o.zero == 3 && world > 1 && !has_gather_group),
            "--zero 3 needs a second process group for the parameter gathers; this caller of train() gave none "
            "(the train program makes one): pass one to train(options, pg, gather_group), or use --zero 2");
}

void check_output_paths(const TrainOptions& o, dist::ProcessGroup& pg) {
  std::string problem;
  if (!o.checkpoint_dir.empty() && pg.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    std::string why = ec ? "cannot create the folder '" + o.checkpoint_dir + "': " + ec.message()
                         : unwritable_reason(o.checkpoint_dir);
    if (!why.empty()) problem = "--checkpoint-dir " + o.checkpoint_dir + ": " + why + "; choose a writable folder";
  }
  if (problem.empty() && !o.trace.empty()) {
    std::filesystem::path parent = std::filesystem::path(o.trace).parent_path();
    const std::string why = unwritable_reason(parent.empty() ? "." : parent.string());
    if (!why.empty())
      problem = "--trace " + o.trace + ": " + why + "; create the folder or write the trace elsewhere";
  }
  const int failing = first_failing_rank(pg, !problem.empty());
  if (!problem.empty()) DDP_FAIL(problem, " (checked before the first step)");
  DDP_CHECK(failing >= pg.size(), "rank ", failing,
            " cannot write its output files (see its message); nothing was trained");
}

std::string resume_path(const TrainOptions& o) {
  return o.resume == "auto" ? checkpoint::read_latest(o.checkpoint_dir) : o.resume;
}

LossGuard::LossGuard(dist::ProcessGroup& pg, std::string resumed_from)
    : pg_(pg), good_(std::move(resumed_from)) {}

double LossGuard::mean_loss(double local_loss, int64_t step) {
  Tensor t = Tensor::from_data<double>({local_loss}, {1});
  host_allreduce(pg_, t);
  const double mean = t.data<double>()[0] / pg_.size();
  if (std::isfinite(mean)) {
    if (!pending_.empty()) good_ = pending_, pending_.clear();
    return mean;
  }
  const bool mine = !std::isfinite(local_loss);
  const int bad = first_failing_rank(pg_, mine);
  std::string where = bad < pg_.size() ? "rank " + std::to_string(bad) : "the mean over ranks";
  if (mine && bad == pg_.rank()) where += " (loss " + std::to_string(local_loss) + ")";
  DDP_FAIL("training stopped at step ", step, ": the loss is not finite on ", where,
           "; the parameters have diverged. Last good checkpoint: ",
           good_.empty() ? std::string("none (with --checkpoint-dir and --checkpoint-interval a run keeps one)")
                         : good_ + " (resume it with --resume " + good_ + " and a lower --lr or --clip-grad)");
}

std::string printable_text(const std::string& text) {
  std::string out;
  auto escape = [&out](unsigned char c) {
    static const char* hex = "0123456789abcdef";
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: lead byte 110xxxxx / 1110xxxx / 11110xxx and that many 10xxxxxx continuation bytes.
    size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool valid = len > 0 && c >= 0xc2 && c <= 0xf4 && i + len <= text.size();
    for (size_t k = 1; valid && k < len; ++k)
      valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (valid) {
      out.append(text, i, len);
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

}  // namespace ddp::models
