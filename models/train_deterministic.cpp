// train_deterministic.cpp - dropout streams, world-independent loader positions and the parameter checksum
// of `train --deterministic` (see the header).
#include "models/train_deterministic.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::models {

void set_dropout_streams(nn::Module& model, int64_t micro_batch) {
  for (auto& b : model.named_buffers()) {
    const std::string& n = b.name;
    const bool is_rng = n == "rng" || (n.size() > 4 && n.compare(n.size() - 4, 4, ".rng") == 0);
    if (!is_rng || b.tensor.dtype() != DType::I64 || b.tensor.numel() != 2 || !b.tensor.device().is_cpu())
      continue;
    b.tensor.data<int64_t>()[1] = static_cast<int64_t>(static_cast<uint64_t>(micro_batch) << 32);
  }
}

int64_t global_micro_batches_consumed(int64_t rank_batches_consumed, int64_t rank_micro_batches,
                                      int64_t micro_batches) {
  DDP_CHECK(rank_micro_batches >= 1 && rank_batches_consumed % rank_micro_batches == 0,
            "--deterministic: the loader stopped inside a step (", rank_batches_consumed,
            " micro-batches consumed, ", rank_micro_batches, " per step)");
  return rank_batches_consumed / rank_micro_batches * micro_batches;
}

int64_t rank_batches_consumed(int64_t global_consumed, int64_t rank_micro_batches, int64_t micro_batches) {
  DDP_CHECK(global_consumed % micro_batches == 0, "--deterministic: the checkpoint's batches_in_epoch ",
            global_consumed, " is not a whole number of steps of --micro-batches ", micro_batches,
            "; it was written with another --micro-batches or without --deterministic: resume with the "
            "settings it was written with");
  return global_consumed / micro_batches * rank_micro_batches;
}

void check_resume_mode(const std::string& saved_config, bool deterministic, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(saved_config, nullptr, /*allow_exceptions=*/false);
  const bool saved = j.is_object() && j.contains("deterministic") && j["deterministic"].is_boolean() &&
                     j["deterministic"].get<bool>();
  DDP_CHECK(saved == deterministic, "checkpoint '", path, "' was written ",
            saved ? "with --deterministic" : "without --deterministic", ", this run is ",
            deterministic ? "with it" : "without it",
            ": the two modes count the data loader's position differently (docs/determinism.md); resume ",
            saved ? "with --deterministic and the checkpoint's --micro-batches" : "without --deterministic",
            ", or start a new run without --resume");
}

uint64_t parameter_checksum(const nn::Module& model) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const auto& p : model.named_parameters()) {
    Tensor t = p.tensor.device().is_cpu() ? p.tensor : p.tensor.to(Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) {
      h ^= bytes[i];
      h *= 0x100000001B3ull;
    }
  }
  return h;
}

}  // namespace ddp::models
