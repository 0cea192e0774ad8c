// param_list.cpp - bytes and estimated backward cost of each parameter.
#include "runtime/sim/param_list.h"

#include "runtime/core/error.h"

namespace ddp::sim {

bool is_embedding_name(const std::string& name) {
  return name.find("wte") != std::string::npos || name.find("wpe") != std::string::npos ||
         name.find("embed") != std::string::npos;
}

std::vector<SimParam> sim_params_from_shapes(const std::vector<ParamShape>& shapes) {
  std::vector<SimParam> out;
  for (const auto& s : shapes) {
    int64_t numel = 1;
    for (int64_t d : s.shape) {
      DDP_CHECK(d >= 0, "parameter ", s.name, " has a negative dimension ", d);
      numel *= d;
    }
    SimParam p;
    p.name = s.name;
    p.dtype = s.dtype;
    p.bytes = numel * static_cast<int64_t>(dtype_size(s.dtype));
    const bool embedding = is_embedding_name(s.name) && s.shape.size() == 2;
    p.backward_cost = static_cast<double>(embedding ? s.shape.back() : numel);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace ddp::sim
