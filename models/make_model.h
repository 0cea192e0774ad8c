// make_model.h - a reference model built from training options, and the options as the JSON a checkpoint
// carries (metadata "config") and back, so `train`, tools/checkpoint_loss and tests build models one way.
#pragma once
#include <memory>
#include <string>

#include "models/train.h"
#include "runtime/nn/module.h"

namespace ddp::models {

// mlp | cnn | gpt | branchy with the shapes of `o` (hidden/depth, context/d_model/n_head/n_layer/dropout).
std::shared_ptr<nn::Module> make_model(const TrainOptions& o, DType dtype);

// "float32" -> F32, "float64" -> F64; anything else is an error naming the flag.
DType train_dtype(const std::string& name);

// The options a checkpoint records: model, data, dtype, batch, optimizer and its settings, seed and shapes.
std::string options_json(const TrainOptions& o);
// The inverse: fields absent from `json` keep their defaults; not JSON or a wrongly typed field is an error
// naming `source` and the field.
TrainOptions options_from_json(const std::string& json, const std::string& source);

}  // namespace ddp::models
