// checkpoint_loss.cpp - the loss of one batch under a training checkpoint: ddp.cpp's side of the PyTorch
// bridge (tools/ddp_torch.py computes the same in PyTorch; docs/pytorch.md). Builds the model the
// checkpoint's configuration names, loads it, and prints the loss of the batch in evaluation mode. With
// --step it then loads the optimizer state too, takes one optimizer step on the batch (training mode, the
// configuration's optimizer at its base learning rate) and prints the loss again.
//
// The batch file is safetensors: "tokens" int64 (B, T+1) for gpt (inputs tokens[:, :-1], targets
// tokens[:, 1:]), or "pixels" uint8 (N, 1, 28, 28) with "labels" int64 (N) for mlp and cnn (pixels get the
// Fashion-MNIST normalisation, then the model's dtype).
#include <cstdio>
#include <cstring>
#include <memory>

#include "models/make_model.h"
#include "runtime/autograd/engine.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/shape.h"
#include "runtime/optim/optimizer.h"

namespace {
using namespace ddp;

Tensor tensor_of(const checkpoint::NamedBuffer& b) {
  Tensor t = Tensor::empty(b.shape, b.dtype);
  std::memcpy(t.raw_data(), b.bytes.data(), b.bytes.size());
  return t;
}

struct Batch {
  Tensor x, y;
};

Batch read_batch(const std::string& path, const std::string& model, DType dtype) {
  checkpoint::SafetensorsContent c = checkpoint::read_safetensors(path);
  if (model == "gpt") {
    const checkpoint::NamedBuffer* tokens = c.find("tokens");
    DDP_CHECK(tokens && tokens->dtype == DType::I64 && tokens->shape.size() == 2 && tokens->shape[1] >= 2,
              "batch file ", path, ": a gpt batch needs a tensor 'tokens' of int64 and shape (B, T+1)");
    Tensor t = tensor_of(*tokens);
    const int64_t T = t.size(1) - 1;
    Batch b;
    b.x = ops::slice(t, 1, 0, T);
    b.y = ops::slice(t, 1, 1, T + 1);
    return b;
  }
  const checkpoint::NamedBuffer* pixels = c.find("pixels");
  const checkpoint::NamedBuffer* labels = c.find("labels");
  DDP_CHECK(pixels && pixels->dtype == DType::U8 && labels && labels->dtype == DType::I64, "batch file ",
            path, ": an ", model, " batch needs 'pixels' (uint8, (N, 1, 28, 28)) and 'labels' (int64, (N))");
  Batch b;
  b.x = data::normalize_fashion_mnist(pixels->bytes.data(), pixels->shape).to(dtype);
  b.y = tensor_of(*labels);
  return b;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const models::TrainOptions& o, nn::Module& model) {
  if (o.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        model.named_parameters(),
        optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  DDP_CHECK(o.optimizer == "adamw", "checkpoint optimizer '", o.optimizer, "': expected sgd or adamw");
  return std::make_unique<optim::AdamW>(model.named_parameters(),
                                        optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
}

double eval_loss(nn::Module& model, const Batch& b) {
  autograd::NoGradGuard ng;
  model.eval();
  return ops::cross_entropy(model.forward(b.x), b.y).item();
}
}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint_path, batch_path;
  bool step = false;
  cli::Parser p("checkpoint_loss", "Prints the loss of one batch under a ddp.cpp training checkpoint.");
  p.disable_local_rank();  // a file tool: no launcher passes it a rank
  p.add("checkpoint", &checkpoint_path, "training checkpoint (.safetensors) written by train");
  p.add("batch", &batch_path, "batch file (.safetensors): 'tokens', or 'pixels' and 'labels'");
  p.add("step", &step, "then take one optimizer step on the batch and print the loss again");
  try {
    p.parse(argc, argv);
    if (checkpoint_path.empty() || batch_path.empty())
      throw cli::UsageError("checkpoint_loss: give --checkpoint FILE and --batch FILE");
    checkpoint::SafetensorsContent c = checkpoint::read_safetensors(checkpoint_path);
    auto config = c.metadata.find("config");
    DDP_CHECK(config != c.metadata.end(), "checkpoint ", checkpoint_path,
              ": metadata 'config' is missing; it was not written by train");
    const models::TrainOptions o = models::options_from_json(config->second, checkpoint_path);
    const DType dtype = models::train_dtype(o.dtype);
    auto model = models::make_model(o, dtype);
    std::unique_ptr<optim::Optimizer> opt = step ? make_optimizer(o, *model) : nullptr;
    checkpoint::load_training_checkpoint(checkpoint_path, *model, opt.get());
    const Batch b = read_batch(batch_path, o.model, dtype);
    std::printf("loss %.17g\n", eval_loss(*model, b));
    if (step) {
      model->train();
      autograd::backward(ops::cross_entropy(model->forward(b.x), b.y));
      opt->step();
      std::printf("loss_after_step %.17g\n", eval_loss(*model, b));
    }
    return 0;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", log::for_user(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_loss: error: %s\n", log::for_user(e.what()).c_str());
    return 1;
  }
}
