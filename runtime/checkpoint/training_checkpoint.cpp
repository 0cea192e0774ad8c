// training_checkpoint.cpp - module/optimizer <-> safetensors, with every check done before anything loads.
#include "runtime/checkpoint/training_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "runtime/autograd/node.h"
#include "runtime/checkpoint/checksum.h"
#include "runtime/checkpoint/config_match.h"
#include "runtime/checkpoint/optimizer_state_check.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/core/log.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"

namespace ddp::checkpoint {

namespace {
// v2 added a CRC-32 per tensor and the optimizer's kind, v3 a CRC-32 of the header's content (metadata and
// tensor table). Older files load without the checks they cannot support, with a warning.
constexpr const char* kFormat = "ddp.cpp training checkpoint v3";
constexpr const char* kFormatV2 = "ddp.cpp training checkpoint v2";
constexpr const char* kFormatV1 = "ddp.cpp training checkpoint v1";

// The metadata fields save writes besides the per-tensor checksums (and besides TrainingState::extra).
constexpr std::string_view kKnownFields[] = {"format",           "step",   "epoch",
                                             "batches_in_epoch", "seed",   "optimizer",
                                             "optimizer_steps",  "config", kHeaderChecksumKey};

Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Metadata `key` as an integer >= 0; names the file, the field and the fix otherwise.
int64_t meta_count(const SafetensorsContent& c, const std::string& path, const std::string& key) {
  auto it = c.metadata.find(key);
  DDP_CHECK(it != c.metadata.end(), "checkpoint '", path, "': metadata field '", key,
            "' is missing (not written by ddp.cpp's save, or edited); resume from another checkpoint");
  const std::string& text = it->second;
  long long v = 0;
  size_t used = 0;
  bool ok = !text.empty() && text.size() <= 20;
  try {
    if (ok) v = std::stoll(text, &used);
  } catch (...) {
    ok = false;
  }
  DDP_CHECK(ok && used == text.size(), "checkpoint '", path, "': metadata field '", key, "' = '",
            text.substr(0, 40), "' is not an integer (edited or corrupt); resume from another checkpoint");
  DDP_CHECK(v >= 0, "checkpoint '", path, "': metadata field '", key, "' = ", v,
            " is negative, which no run can reach (edited or corrupt); resume from another checkpoint or "
            "start afresh without --resume");
  return v;
}

uint64_t meta_seed(const SafetensorsContent& c, const std::string& path) {
  auto it = c.metadata.find("seed");
  DDP_CHECK(it != c.metadata.end(), "checkpoint '", path, "': metadata field 'seed' is missing");
  const std::string& text = it->second;
  bool ok = !text.empty() && text.size() <= 20 && text.find_first_not_of("0123456789") == std::string::npos;
  uint64_t v = 0;
  try {
    if (ok) v = std::stoull(text);
  } catch (...) {
    ok = false;
  }
  DDP_CHECK(ok, "checkpoint '", path, "': metadata field 'seed' = '", text.substr(0, 40),
            "' is not an unsigned integer (edited or corrupt)");
  return v;
}

// Every tensor has a checksum and matches it; no checksum names a tensor the file lacks.
void verify_checksums(const SafetensorsContent& c, const std::map<std::string, const NamedBuffer*>& by_name,
                      const std::string& path) {
  for (const NamedBuffer& t : c.tensors) {
    auto it = c.metadata.find(checksum_key(t.name));
    DDP_CHECK(it != c.metadata.end(), "checkpoint '", path, "': tensor '", message_excerpt(t.name),
              "' has no checksum (metadata '", message_excerpt(checksum_key(t.name)),
              "'): the file was edited; resume from another checkpoint");
    const std::string actual = crc32_text(crc32_of(t.bytes.data(), t.bytes.size()));
    DDP_CHECK(it->second == actual, "checkpoint '", path, "': tensor '", message_excerpt(t.name),
              "' is corrupt: its bytes have CRC-32 ", actual, " but the checkpoint recorded ",
              it->second.substr(0, 16), " (disk or copy error); resume from another checkpoint");
  }
  for (auto it = c.metadata.lower_bound(std::string(kChecksumKeyPrefix));
       it != c.metadata.end() && starts_with(it->first, kChecksumKeyPrefix); ++it) {
    const std::string name = it->first.substr(kChecksumKeyPrefix.size());
    DDP_CHECK(by_name.count(name), "checkpoint '", path, "': it records a checksum for tensor '", message_excerpt(name),
              "' but holds no such tensor (deleted or renamed?); resume from another checkpoint");
  }
}

// "--batch-size" for "batch_size".
std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// The checkpoint's run configuration against the live one (see LoadOptions::live_config). A key only one
// side has is not compared but named in a warning.
void check_config(const SafetensorsContent& c, const std::string& path, const LoadOptions& options) {
  const std::string& config = c.metadata.at("config");  // required_field checked it is there
  if (options.live_config.empty()) return;
  const ConfigComparison comparison = compare_configs(config, options.live_config, path);
  std::string unchecked;
  for (const std::string& key : comparison.only_live)
    unchecked += (unchecked.empty() ? "" : ", ") + flag_of(key) + " (the checkpoint has no value for it)";
  for (const std::string& key : comparison.only_saved)
    unchecked += (unchecked.empty() ? "" : ", ") + flag_of(key) + " (only the checkpoint has it)";
  if (!unchecked.empty())
    DDP_LOG(Warn, "checkpoint '", path, "': these settings were not compared with this run's: ", unchecked,
            " (a checkpoint of an older or newer ddp.cpp?)");
  std::string saved, live, listed;
  for (const ConfigDifference& d : comparison.differences) {
    if (std::find(options.config_keys_may_differ.begin(), options.config_keys_may_differ.end(), d.key) !=
        options.config_keys_may_differ.end())
      continue;
    const std::string flag = flag_of(d.key);
    listed += (listed.empty() ? "" : ", ") + flag + " " + d.saved + " (this run: " + d.live + ")";
    std::string value = d.saved;
    if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
    saved += " " + flag + " " + value;
  }
  DDP_CHECK(listed.empty(), "checkpoint '", path, "' was written by a run with other settings: ", listed,
            ". Resume with the checkpoint's settings (", saved.substr(1),
            "), or start a new run without --resume in another --checkpoint-dir");
}

// A field save always writes; missing means the file was edited or damaged (a renamed key is missing too).
const std::string& required_field(const SafetensorsContent& c, const std::string& path,
                                  const std::string& key) {
  auto it = c.metadata.find(key);
  DDP_CHECK(it != c.metadata.end(), "checkpoint '", path, "': metadata field '", key,
            "' is missing (the file was edited or damaged); resume from another checkpoint");
  return it->second;
}

// The header's content matches the CRC-32 the save recorded (format v3 always has one).
void verify_header_checksum(const SafetensorsContent& c, const std::string& path) {
  auto it = c.metadata.find(std::string(kHeaderChecksumKey));
  DDP_CHECK(it != c.metadata.end(), "checkpoint '", path, "': metadata field '", kHeaderChecksumKey,
            "' is missing, which every file of format '", kFormat,
            "' has (the file was edited or damaged); resume from another checkpoint");
  std::vector<TensorView> views;
  for (const NamedBuffer& t : c.tensors) views.push_back(t.view());
  const std::string actual = crc32_text(header_crc32_of(c.metadata, views));
  DDP_CHECK(it->second == actual, "checkpoint '", path,
            "': its header (metadata or tensor table) is corrupt: its content has CRC-32 ", actual,
            " but the checkpoint recorded ", message_excerpt(it->second),
            " (a disk or copy error, or the file was edited); its settings and position cannot be trusted; "
            "resume from another checkpoint");
}

// Files without a header checksum: a field this version does not write may be a renamed one.
void warn_about_unknown_fields(const SafetensorsContent& c, const std::string& path) {
  std::string unknown;
  for (const auto& [key, value] : c.metadata) {
    if (starts_with(key, kChecksumKeyPrefix) ||
        std::find(std::begin(kKnownFields), std::end(kKnownFields), key) != std::end(kKnownFields))
      continue;
    unknown += (unknown.empty() ? "'" : ", '") + message_excerpt(key) + "'";
  }
  if (!unknown.empty())
    DDP_LOG(Warn, "checkpoint '", path, "': unknown metadata field(s) ", unknown,
            ", not used by the load (renamed by corruption, or written by another version?)");
}

Tensor tensor_from(const NamedBuffer& b) {
  Tensor t = Tensor::empty(b.shape, b.dtype);
  if (!b.bytes.empty()) std::memcpy(t.raw_data(), b.bytes.data(), b.bytes.size());
  return t;
}
}  // namespace

std::string optimizer_kind(const optim::Optimizer& optimizer) {
  if (auto* z = dynamic_cast<const optim::ZeroRedundancyOptimizer*>(&optimizer)) return optimizer_kind(z->inner());
  if (dynamic_cast<const optim::AdamW*>(&optimizer)) return "adamw";
  if (dynamic_cast<const optim::SGD*>(&optimizer)) return "sgd";
  return "";
}

namespace {
void save_checkpoint_file(const std::string& path, const nn::Module& module,
                          const OptimizerSnapshot* optimizer, const TrainingState& state) {
  std::vector<Tensor> keep;  // host copies must outlive the write
  std::vector<TensorView> views;
  std::map<std::string, std::string> meta = state.extra;
  auto add = [&](const std::string& name, const Tensor& t) {
    Tensor h = host_copy(t);
    keep.push_back(h);
    views.push_back({name, h.dtype(), h.shape(), h.raw_data(), h.nbytes()});
    meta[checksum_key(name)] = crc32_text(crc32_of(h.raw_data(), h.nbytes()));
  };
  for (auto& p : module.named_parameters()) add("model." + p.name, p.tensor);
  for (auto& b : module.named_buffers()) add("model." + b.name, b.tensor);
  if (optimizer)
    for (auto& [k, t] : optimizer->state) add("optim." + k, t);
  meta["format"] = kFormat;
  meta["step"] = std::to_string(state.step);
  meta["epoch"] = std::to_string(state.epoch);
  meta["batches_in_epoch"] = std::to_string(state.batches_in_epoch);
  meta["seed"] = std::to_string(state.seed);
  meta["optimizer"] = optimizer ? optimizer->kind : "";
  meta["optimizer_steps"] = std::to_string(optimizer ? optimizer->steps : 0);
  meta["config"] = state.config_json;
  meta[std::string(kHeaderChecksumKey)] = crc32_text(header_crc32_of(meta, views));
  write_safetensors(path, views, meta);
}
}  // namespace

void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const optim::Optimizer* optimizer, const TrainingState& state) {
  if (!optimizer) return save_checkpoint_file(path, module, nullptr, state);
  const OptimizerSnapshot snapshot{optimizer_kind(*optimizer), optimizer->steps(), optimizer->state()};
  save_checkpoint_file(path, module, &snapshot, state);
}

void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const OptimizerSnapshot& optimizer, const TrainingState& state) {
  save_checkpoint_file(path, module, &optimizer, state);
}

TrainingState load_training_checkpoint(const std::string& path, nn::Module& module,
                                       optim::Optimizer* optimizer, const LoadOptions& options) {
  SafetensorsContent c = read_safetensors(path);
  auto fmt = c.metadata.find("format");
  const std::string format = fmt == c.metadata.end() ? "" : fmt->second;
  const bool v1 = format == kFormatV1, v2 = format == kFormatV2;
  DDP_CHECK(v1 || v2 || format == kFormat, "checkpoint '", path,
            "': not a ddp.cpp training checkpoint (metadata 'format' is ",
            fmt == c.metadata.end() ? std::string("missing") : "'" + message_excerpt(format) + "'", ")");
  std::map<std::string, const NamedBuffer*> by_name;
  for (const NamedBuffer& t : c.tensors) by_name.emplace(t.name, &t);
  // The header first: it covers the tensor checksums too. Checked whenever present, so a `format` flipped to
  // an older version does not switch the check off.
  if ((v1 || v2) && !c.metadata.count(std::string(kHeaderChecksumKey))) {
    DDP_LOG(Warn, "checkpoint '", path, "' was written by an older ddp.cpp (", format, ") and has no ",
            v1 ? "checksums: neither its data nor its settings and position"
               : "header checksum: its settings and position",
            " can be verified against corruption; the next checkpoint will have ", v1 ? "them" : "one");
    warn_about_unknown_fields(c, path);
  } else {
    verify_header_checksum(c, path);
  }
  if (!v1) verify_checksums(c, by_name, path);

  TrainingState s;
  s.step = meta_count(c, path, "step");
  s.epoch = meta_count(c, path, "epoch");
  s.batches_in_epoch = meta_count(c, path, "batches_in_epoch");
  s.seed = meta_seed(c, path);
  const int64_t optimizer_steps = meta_count(c, path, "optimizer_steps");
  s.config_json = required_field(c, path, "config");

  // Optimizer kind first (its message names --reset-optimizer), then the run's settings. Version 1 did not
  // record the kind: it is inferred from the state's names.
  const bool kind_recorded = !v1 || c.metadata.count("optimizer");
  std::vector<const NamedBuffer*> optim_tensors;
  for (const NamedBuffer& t : c.tensors)
    if (starts_with(t.name, "optim.")) optim_tensors.push_back(&t);
  s.optimizer = kind_recorded ? required_field(c, path, "optimizer") : infer_optimizer_kind(optim_tensors);
  const bool load_optimizer = optimizer && !options.reset_optimizer;
  if (load_optimizer) check_optimizer_kind(path, s.optimizer, optimizer_kind(*optimizer));
  check_config(c, path, options);

  // Model tensors: every one present with the live shape and dtype; nothing unknown in the file.
  std::vector<std::pair<const NamedBuffer*, Tensor>> model_loads;
  std::set<std::string> expected;
  auto plan = [&](const std::string& key, const Tensor& live) {
    expected.insert(key);
    auto it = by_name.find(key);
    DDP_CHECK(it != by_name.end(), "checkpoint '", path, "': tensor '", key,
              "' is missing (was it written by a different model or configuration?)");
    const NamedBuffer* b = it->second;
    DDP_CHECK(b->shape == live.shape(), "checkpoint '", path, "': tensor '", key, "' has shape ",
              shape_str(b->shape), " but the model has ", shape_str(live.shape()));
    DDP_CHECK(b->dtype == live.dtype(), "checkpoint '", path, "': tensor '", key, "' has dtype ",
              dtype_name(b->dtype), " but the model has ", dtype_name(live.dtype()), " (use the same --dtype)");
    model_loads.emplace_back(b, live);
  };
  for (auto& p : module.named_parameters()) plan("model." + p.name, p.tensor);
  for (auto& b : module.named_buffers()) plan("model." + b.name, b.tensor);
  for (const NamedBuffer& t : c.tensors) {
    if (starts_with(t.name, "optim.")) continue;
    DDP_CHECK(starts_with(t.name, "model."), "checkpoint '", path, "': tensor '", message_excerpt(t.name),
              "' is neither model state ('model.*') nor optimizer state ('optim.*'); the file was edited or "
              "is not a training checkpoint");
    DDP_CHECK(expected.count(t.name), "checkpoint '", path, "': tensor '", message_excerpt(t.name),
              "' does not exist in this model (a different model or configuration?)");
  }

  // The optimizer's state: complete for each parameter, unless the caller resets it on purpose.
  if (load_optimizer)
    check_optimizer_state(path, optimizer_steps, optim_tensors, *optimizer, optimizer_kind(*optimizer));

  // Every check passed: now change the live objects.
  {
    autograd::NoGradGuard ng;
    for (auto& [b, live] : model_loads) live.copy_from(tensor_from(*b));
  }
  if (load_optimizer) {
    std::map<std::string, Tensor> state;
    for (const NamedBuffer* t : optim_tensors) state[t->name.substr(6)] = tensor_from(*t);
    optimizer->load_state(state, optimizer_steps);
  }
  for (auto& [k, v] : c.metadata)
    if (!starts_with(k, kChecksumKeyPrefix) && k != kHeaderChecksumKey) s.extra[k] = v;
  return s;
}

}  // namespace ddp::checkpoint
