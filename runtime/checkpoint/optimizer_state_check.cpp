// optimizer_state_check.cpp - the optimizer half of a checkpoint load's checks (see optimizer_state_check.h).
#include "runtime/checkpoint/optimizer_state_check.h"

#include <algorithm>
#include <map>

#include "runtime/checkpoint/safetensors_header.h"
#include "runtime/core/error.h"

namespace ddp::checkpoint {
namespace {

constexpr std::string_view kOptimPrefix = "optim.";
constexpr const char* kResetHint = "pass --reset-optimizer to resume the model with a fresh optimizer state";

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

std::string shape_list(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace

std::vector<std::string> optimizer_state_names(const std::string& kind) {
  if (kind == "adamw") return {"exp_avg", "exp_avg_sq", "step"};
  if (kind == "sgd") return {"momentum_buffer"};
  return {};
}

std::string infer_optimizer_kind(const std::vector<const NamedBuffer*>& optim_tensors) {
  for (const NamedBuffer* t : optim_tensors) {
    const std::string state = t->name.substr(t->name.rfind('.') + 1);
    for (const char* kind : {"adamw", "sgd"}) {
      auto names = optimizer_state_names(kind);
      if (std::find(names.begin(), names.end(), state) != names.end()) return kind;
    }
  }
  return "";
}

void check_optimizer_kind(const std::string& path, const std::string& saved_kind, const std::string& live_kind) {
  if (saved_kind.empty() || saved_kind == live_kind) return;
  DDP_FAIL("checkpoint '", path, "': it holds the state of optimizer ", saved_kind, ", but this run uses ",
           live_kind.empty() ? "another one" : live_kind, ": resume with --optimizer ", saved_kind, ", or ",
           kResetHint, " (", live_kind.empty() ? "the new optimizer" : live_kind, " from zero)");
}

void check_optimizer_state(const std::string& path, int64_t optimizer_steps,
                           const std::vector<const NamedBuffer*>& optim_tensors,
                           const optim::Optimizer& live, const std::string& live_kind) {
  const std::string where = "checkpoint '" + path + "': ";
  const std::vector<std::string> names = optimizer_state_names(live_kind);
  DDP_CHECK(!names.empty() || optim_tensors.empty(), where,
            "cannot check its optimizer state against an optimizer of unknown kind; ", kResetHint);

  std::map<std::string, const nn::NamedTensor*> params;
  for (const nn::NamedTensor& p : live.params()) params.emplace(p.name, &p);
  std::map<std::string, std::vector<std::string>> found;  // parameter -> its state names in the file
  for (const NamedBuffer* t : optim_tensors) {
    const std::string rest = t->name.substr(kOptimPrefix.size());
    const size_t dot = rest.rfind('.');
    const std::string param = dot == std::string::npos ? "" : rest.substr(0, dot);
    const std::string state = dot == std::string::npos ? rest : rest.substr(dot + 1);
    auto p = params.find(param);
    DDP_CHECK(p != params.end(), where, "tensor '", message_excerpt(t->name),
              "' is optimizer state of a parameter '", message_excerpt(param),
              "' this model does not have (edited, or written by another model); ", kResetHint);
    DDP_CHECK(std::find(names.begin(), names.end(), state) != names.end(), where, "tensor '",
              message_excerpt(t->name), "' is not state of ", live_kind, " (its state per parameter is ", join(names),
              "): the file was edited or written by another optimizer; ", kResetHint);
    const std::vector<int64_t> want = state == "step" ? std::vector<int64_t>{} : p->second->tensor.shape();
    DDP_CHECK(t->shape == want, where, "optimizer state '", t->name, "' has shape ", shape_list(t->shape),
              " but ", state == "step" ? "a step count is a scalar ()" : "the parameter has " + shape_list(want),
              "; ", kResetHint);
    if (state == "step")
      DDP_CHECK(t->dtype == DType::I64, where, "optimizer state '", t->name, "' must be an I64 step count, got ",
                dtype_name(t->dtype));
    else  // checked here, with the model: the optimizer's own check comes after the model was loaded
      DDP_CHECK(t->dtype == p->second->tensor.dtype(), where, "optimizer state '", t->name, "' has dtype ",
                dtype_name(t->dtype), " but the parameter has ", dtype_name(p->second->tensor.dtype()),
                " (use the same --dtype); ", kResetHint);
    found[param].push_back(state);
  }
  for (const auto& [param, states] : found) {
    if (states.size() == names.size()) continue;
    for (const std::string& n : names)
      DDP_CHECK(std::find(states.begin(), states.end(), n) != states.end(), where, "the ", live_kind,
                " state of parameter '", param, "' is incomplete: tensor 'optim.", param, ".", n,
                "' is missing (renamed or deleted?), so its state would silently restart from zero; ",
                kResetHint);
  }
  // AdamW keeps state for every parameter that ever had a gradient: none at all after steps means it was
  // stripped. (SGD without momentum keeps no state, so this holds for AdamW only.)
  DDP_CHECK(!(live_kind == "adamw" && optimizer_steps > 0 && optim_tensors.empty()), where,
            "it records ", optimizer_steps, " optimizer steps but holds no adamw state (stripped?); ",
            kResetHint);
}

}  // namespace ddp::checkpoint
