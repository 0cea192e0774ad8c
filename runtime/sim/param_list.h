// param_list.h - the simulator's parameter list from names, shapes and dtypes (of a built model or a
// safetensors checkpoint), with each parameter's relative backward cost estimated from its shape:
//   a weight or bias: numel (a matmul weight costs 4 * numel FLOPs per input row in backward: grad of the
//   input and of the weight; biases and norms are small next to it either way)
//   an embedding table (name containing "wte", "wpe" or "embed"): its last dimension (backward is a
//   scatter-add of one row per token, not a matmul over the whole table)
// Order is kept: it must be the model's registration order (the reducer buckets in reverse of it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/sim/bucket_sim.h"

namespace ddp::sim {

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
};

bool is_embedding_name(const std::string& name);
std::vector<SimParam> sim_params_from_shapes(const std::vector<ParamShape>& shapes);

}  // namespace ddp::sim
