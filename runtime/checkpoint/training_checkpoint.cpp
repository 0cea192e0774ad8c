// training_checkpoint.cpp - module/optimizer <-> safetensors, with strict checks on load.
#include "runtime/checkpoint/training_checkpoint.h"

#include <cstring>
#include <set>

#include "runtime/autograd/node.h"
#include "runtime/checkpoint/safetensors.h"

namespace ddp::checkpoint {

namespace {
constexpr const char* kFormat = "ddp.cpp training checkpoint v1";

Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

int64_t meta_int(const SafetensorsContent& c, const std::string& path, const std::string& key) {
  auto it = c.metadata.find(key);
  DDP_CHECK(it != c.metadata.end(), "checkpoint ", path, ": metadata key '", key, "' is missing");
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    DDP_CHECK(used == it->second.size(), "trailing characters");
    return v;
  } catch (...) {
    DDP_FAIL("checkpoint ", path, ": metadata '", key, "' = '", it->second, "' is not an integer");
  }
}

Tensor tensor_from(const NamedBuffer& b) {
  Tensor t = Tensor::empty(b.shape, b.dtype);
  if (!b.bytes.empty()) std::memcpy(t.raw_data(), b.bytes.data(), b.bytes.size());
  return t;
}
}  // namespace

void save_training_checkpoint(const std::string& path, const nn::Module& module,
                              const optim::Optimizer* optimizer, const TrainingState& state) {
  std::vector<Tensor> keep;  // host copies must outlive the write
  std::vector<TensorView> views;
  auto add = [&](const std::string& name, const Tensor& t) {
    Tensor h = host_copy(t);
    keep.push_back(h);
    views.push_back({name, h.dtype(), h.shape(), h.raw_data(), h.nbytes()});
  };
  for (auto& p : module.named_parameters()) add("model." + p.name, p.tensor);
  for (auto& b : module.named_buffers()) add("model." + b.name, b.tensor);
  if (optimizer)
    for (auto& [k, t] : optimizer->state()) add("optim." + k, t);
  std::map<std::string, std::string> meta = state.extra;
  meta["format"] = kFormat;
  meta["step"] = std::to_string(state.step);
  meta["epoch"] = std::to_string(state.epoch);
  meta["batches_in_epoch"] = std::to_string(state.batches_in_epoch);
  meta["seed"] = std::to_string(state.seed);
  meta["optimizer_steps"] = std::to_string(optimizer ? optimizer->steps() : 0);
  meta["config"] = state.config_json;
  write_safetensors(path, views, meta);
}

TrainingState load_training_checkpoint(const std::string& path, nn::Module& module,
                                       optim::Optimizer* optimizer) {
  SafetensorsContent c = read_safetensors(path);
  auto fmt = c.metadata.find("format");
  DDP_CHECK(fmt != c.metadata.end() && fmt->second == kFormat, "checkpoint ", path,
            ": not a ddp.cpp training checkpoint (metadata 'format' is ",
            fmt == c.metadata.end() ? std::string("missing") : "'" + fmt->second + "'", ")");
  std::set<std::string> expected;
  autograd::NoGradGuard ng;
  auto load_into = [&](const std::string& key, Tensor& live) {
    expected.insert(key);
    const NamedBuffer* b = c.find(key);
    DDP_CHECK(b != nullptr, "checkpoint ", path, ": tensor '", key,
              "' is missing (was it written by a different model or configuration?)");
    DDP_CHECK(b->shape == live.shape(), "checkpoint ", path, ": tensor '", key, "' has shape ",
              shape_str(b->shape), " but the model has ", shape_str(live.shape()));
    DDP_CHECK(b->dtype == live.dtype(), "checkpoint ", path, ": tensor '", key, "' has dtype ",
              dtype_name(b->dtype), " but the model has ", dtype_name(live.dtype()));
    live.copy_from(tensor_from(*b));
  };
  for (auto& p : module.named_parameters()) load_into("model." + p.name, p.tensor);
  for (auto& b : module.named_buffers()) load_into("model." + b.name, b.tensor);
  for (auto& t : c.tensors) {
    if (t.name.rfind("model.", 0) == 0)
      DDP_CHECK(expected.count(t.name), "checkpoint ", path, ": tensor '", t.name,
                "' does not exist in this model (a different model or configuration?)");
  }
  TrainingState s;
  s.step = meta_int(c, path, "step");
  s.epoch = meta_int(c, path, "epoch");
  s.batches_in_epoch = meta_int(c, path, "batches_in_epoch");
  s.seed = static_cast<uint64_t>(meta_int(c, path, "seed"));
  if (auto it = c.metadata.find("config"); it != c.metadata.end()) s.config_json = it->second;
  for (auto& [k, v] : c.metadata) s.extra[k] = v;
  if (optimizer) {
    std::map<std::string, Tensor> state;
    for (auto& t : c.tensors)
      if (t.name.rfind("optim.", 0) == 0) state[t.name.substr(6)] = tensor_from(t);
    optimizer->load_state(state, meta_int(c, path, "optimizer_steps"));
  }
  return s;
}

}  // namespace ddp::checkpoint
