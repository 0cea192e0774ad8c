// make_model.cpp - the reference models by name, and the checkpoint's JSON of the training options.
#include "models/make_model.h"

#include <nlohmann/json.hpp>

#include "models/branchy.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "runtime/core/error.h"

namespace ddp::models {

std::shared_ptr<nn::Module> make_model(const TrainOptions& o, DType dtype) {
  if (o.model == "mlp") {
    MLPConfig c;
    c.hidden.assign(static_cast<size_t>(o.depth), o.hidden);
    c.dtype = dtype;
    return std::make_shared<MLP>(c);
  }
  if (o.model == "cnn") {
    CNNConfig c;
    c.dtype = dtype;
    return std::make_shared<CNN>(c);
  }
  if (o.model == "branchy") {
    BranchyConfig c;
    c.dtype = dtype;
    return std::make_shared<Branchy>(c);
  }
  if (o.model == "gpt") {
    GPTConfig c;
    c.context = o.context;
    c.d_model = o.d_model;
    c.n_head = o.n_head;
    c.n_layer = o.n_layer;
    c.dropout = o.dropout;
    c.dtype = dtype;
    return std::make_shared<GPT>(c);
  }
  DDP_FAIL("--model ", o.model, ": expected mlp, cnn, gpt or branchy");
}

DType train_dtype(const std::string& name) {
  DDP_CHECK(name == "float32" || name == "float64", "--dtype ", name, ": expected float32 or float64");
  return name == "float64" ? DType::F64 : DType::F32;
}

std::string options_json(const TrainOptions& o) {
  nlohmann::ordered_json j = {{"model", o.model},
                              {"data", o.data},
                              {"dtype", o.dtype},
                              {"batch_size", o.batch_size},
                              {"grad_accum", o.grad_accum},
                              {"optimizer", o.optimizer},
                              {"lr", o.lr},
                              {"momentum", o.momentum},
                              {"weight_decay", o.weight_decay},
                              {"seed", o.seed},
                              {"context", o.context},
                              {"d_model", o.d_model},
                              {"n_layer", o.n_layer},
                              {"n_head", o.n_head},
                              {"dropout", o.dropout},
                              {"hidden", o.hidden},
                              {"depth", o.depth}};
  if (o.deterministic) {  // its batch is micro_batches x batch_size over all ranks (docs/determinism.md)
    j["deterministic"] = true;
    j["micro_batches"] = o.micro_batches;
  }
  return j.dump();
}

TrainOptions options_from_json(const std::string& json, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  DDP_CHECK(j.is_object(), source, ": the training configuration is not a JSON object: ", json);
  TrainOptions o;
  auto read = [&](const char* key, auto* field) {
    if (!j.contains(key)) return;
    try {
      *field = j.at(key).get<std::remove_pointer_t<decltype(field)>>();
    } catch (const nlohmann::json::exception&) {
      DDP_FAIL(source, ": configuration field '", key, "' has the wrong type: ", j.at(key).dump());
    }
  };
  read("model", &o.model);
  read("data", &o.data);
  read("dtype", &o.dtype);
  read("batch_size", &o.batch_size);
  read("grad_accum", &o.grad_accum);
  read("optimizer", &o.optimizer);
  read("lr", &o.lr);
  read("momentum", &o.momentum);
  read("weight_decay", &o.weight_decay);
  read("seed", &o.seed);
  read("context", &o.context);
  read("d_model", &o.d_model);
  read("n_layer", &o.n_layer);
  read("n_head", &o.n_head);
  read("dropout", &o.dropout);
  read("hidden", &o.hidden);
  read("depth", &o.depth);
  return o;
}

}  // namespace ddp::models
