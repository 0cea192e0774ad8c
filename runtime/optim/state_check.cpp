// state_check.cpp - the whole-state check every optimizer state loader runs first (see state_check.h).
#include "runtime/optim/state_check.h"

#include <algorithm>

#include "runtime/optim/optimizer.h"

namespace ddp::optim {

namespace {
constexpr const char* kFix =
    "pass the state of this model and optimizer, as its state() (or ShardedOptimizer::consolidated_state()) "
    "returned it";

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}
}  // namespace

StateKinds state_kinds_of(const Optimizer& optimizer) {
  if (dynamic_cast<const AdamW*>(&optimizer)) return {{"exp_avg", "exp_avg_sq"}, "step"};
  if (dynamic_cast<const SGD*>(&optimizer)) return {{"momentum_buffer"}, ""};
  return {};
}

void check_whole_state(const std::string& who, const std::vector<nn::NamedTensor>& params,
                       const StateKinds& kinds, const std::map<std::string, Tensor>& state, int64_t steps) {
  DDP_CHECK(steps >= 0, who, ": step count ", steps, " < 0");
  std::vector<std::string> all = kinds.tensors;
  if (!kinds.scalar.empty()) all.push_back(kinds.scalar);
  std::map<std::string, const nn::NamedTensor*> by_name;
  for (const nn::NamedTensor& p : params) by_name.emplace(p.name, &p);
  std::map<std::string, size_t> found;  // parameter -> how many of its states the input has
  for (const auto& [name, t] : state) {
    const size_t dot = name.rfind('.');
    const std::string param = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string kind = dot == std::string::npos ? name : name.substr(dot + 1);
    auto p = by_name.find(param);
    DDP_CHECK(p != by_name.end(), who, ": state '", name, "' names no parameter '", param,
              "' of this model (misspelled, or the state of another model?); ", kFix);
    DDP_CHECK(std::find(all.begin(), all.end(), kind) != all.end(), who, ": state '", name,
              "' is not a state of ", "this optimizer (its state per parameter is ", join(all), "); ", kFix);
    DDP_CHECK(t.defined(), who, ": state '", name, "' is an undefined tensor; ", kFix);
    const Tensor& live = p->second->tensor;
    if (kind == kinds.scalar) {
      DDP_CHECK(t.dtype() == DType::I64 && t.shape().empty(), who, ": state '", name, "' has dtype ",
                dtype_name(t.dtype()), " and shape ", shape_str(t.shape()),
                " but a step count is an I64 scalar of shape (); ", kFix);
    } else {
      DDP_CHECK(t.shape() == live.shape(), who, ": state '", name, "' has shape ", shape_str(t.shape()),
                " but the parameter has ", shape_str(live.shape()), "; ", kFix);
      DDP_CHECK(t.dtype() == live.dtype(), who, ": state '", name, "' has dtype ", dtype_name(t.dtype()),
                " but the parameter has ", dtype_name(live.dtype()), "; convert it with .to(",
                dtype_name(live.dtype()), ") first, or ", kFix);
    }
    ++found[param];
  }
  for (const auto& [param, n] : found) {
    if (n == all.size()) continue;
    for (const std::string& kind : all)
      DDP_CHECK(state.count(param + "." + kind), who, ": the state of parameter '", param,
                "' is incomplete: '", param, ".", kind,
                "' is missing (renamed or deleted?), so it would silently restart from zero; "
                "give all of ",
                join(all), " or none (a parameter that never stepped)");
  }
}

}  // namespace ddp::optim
