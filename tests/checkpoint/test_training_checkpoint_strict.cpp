// test_training_checkpoint_strict.cpp - loading a training checkpoint is all or nothing: a flipped data byte
// (CRC-32 per tensor), a renamed, deleted or extra optimizer tensor, another optimizer, another run
// configuration or a negative step is an error naming the file, the tensor or field and the fix, and leaves
// the model untouched; --reset-optimizer (LoadOptions::reset_optimizer) drops the optimizer state on purpose;
// version 1 files without checksums still load.
#include <gtest/gtest.h>

#include <algorithm>

#include "checkpoint_test_util.h"
#include "models/mlp.h"
#include "runtime/autograd/engine.h"
#include "runtime/checkpoint/checksum.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/ops/loss.h"

using namespace ddp;
using namespace ddp::checkpoint;
using namespace ddp::checkpoint::testing;

namespace {

std::shared_ptr<models::MLP> make_mlp() {
  return std::make_shared<models::MLP>(models::MLPConfig{4, {3}, 2, DType::F32});
}

// One AdamW step on a fixed batch, so every parameter has exp_avg, exp_avg_sq and step.
void one_step(nn::Module& m, optim::Optimizer& opt) {
  Tensor x = Tensor::uniform({5, 4}, 7, -1, 1);
  Tensor y = Tensor::from_data<int64_t>({0, 1, 1, 0, 1}, {5});
  autograd::backward(ops::cross_entropy(m.forward(x), y));
  opt.step();
  opt.zero_grad();
}

struct Saved {
  ScratchDir dir;
  std::string path = dir.file("ckpt.safetensors");
  Saved() {
    auto m = make_mlp();
    optim::AdamW opt(m->named_parameters(), {});
    one_step(*m, opt);
    TrainingState st;
    st.step = 1;
    st.seed = 5;
    st.config_json = R"({"model":"mlp","batch_size":16,"lr":0.003})";
    save_training_checkpoint(path, *m, &opt, st);
  }
};

// Rewrites the file through `edit`, with checksums recomputed for every tensor (an editor that knows the
// format), so the checks after the checksum stage are what is tested.
void rewrite(const std::string& path, const std::function<void(SafetensorsContent&)>& edit,
             bool fix_checksums = true) {
  rewrite_training_checkpoint(path, edit, fix_checksums);
}

void rename_tensor(SafetensorsContent& c, const std::string& from, const std::string& to) {
  for (NamedBuffer& t : c.tensors)
    if (t.name == from) t.name = to;
}

// The error of loading `path` into a fresh MLP with the given optimizer ("" when it loads); checks that a
// failed load changed no parameter.
std::string load_error(const std::string& path, const std::string& optimizer = "adamw",
                       const LoadOptions& options = {}) {
  auto m = make_mlp();
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "adamw") opt = std::make_unique<optim::AdamW>(m->named_parameters(), optim::AdamWOptions{});
  if (optimizer == "sgd") opt = std::make_unique<optim::SGD>(m->named_parameters(), optim::SGDOptions{});
  std::vector<std::vector<double>> before;
  for (auto& p : m->named_parameters()) before.push_back(p.tensor.to_double_vector());
  try {
    load_training_checkpoint(path, *m, opt.get(), options);
  } catch (const Error& e) {
    size_t i = 0;
    for (auto& p : m->named_parameters())
      EXPECT_EQ(p.tensor.to_double_vector(), before[i++]) << "a failed load modified " << p.name;
    return e.what();
  }
  return "";
}

void expect_error(const std::string& msg, const std::vector<std::string>& parts) {
  ASSERT_FALSE(msg.empty()) << "loaded, expected an error with: " << parts[0];
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

}  // namespace

TEST(TrainingCheckpointStrict, AnUneditedCheckpointLoadsWithItsOptimizerState) {
  Saved s;
  auto m = make_mlp();
  optim::AdamW opt(m->named_parameters(), {});
  TrainingState st = load_training_checkpoint(s.path, *m, &opt);
  EXPECT_EQ(st.step, 1);
  EXPECT_EQ(st.optimizer, "adamw");
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_EQ(opt.state().size(), 3 * m->named_parameters().size());
}

TEST(TrainingCheckpointStrict, AFlippedDataByteIsNamedByFileAndTensor) {
  Saved s;
  const SafetensorsContent c = read_safetensors(s.path);
  auto bytes = read_raw(s.path);
  // Flip one byte of each tensor in turn (found from the end of the file backwards: the data section).
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<size_t>(i)];
  size_t at = 8 + header_len;
  for (const NamedBuffer& t : c.tensors) {
    if (!t.bytes.empty()) {
      auto flipped = bytes;
      flipped[at + t.bytes.size() / 2] ^= 0x10;
      write_raw(s.path, flipped);
      expect_error(load_error(s.path), {"checkpoint '" + s.path + "'", "tensor '" + t.name + "' is corrupt",
                                        "CRC-32", "resume from another checkpoint"});
    }
    at += t.bytes.size();
  }
  write_raw(s.path, bytes);
  EXPECT_EQ(load_error(s.path), "");
}

TEST(TrainingCheckpointStrict, ATensorWithoutItsChecksumOrAChecksumWithoutItsTensorIsAnError) {
  Saved s;
  rewrite(s.path, [](SafetensorsContent& c) { c.metadata.erase(checksum_key("model.layers.0.bias")); }, false);
  expect_error(load_error(s.path), {"tensor 'model.layers.0.bias' has no checksum"});
  Saved t;
  rewrite(t.path, [](SafetensorsContent& c) {
    c.metadata[checksum_key("optim.layers.0.bias.exp_avg")] = "00000000";
    c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                   [](const NamedBuffer& b) { return b.name == "optim.layers.0.bias.exp_avg"; }),
                    c.tensors.end());
  }, false);
  expect_error(load_error(t.path), {"checksum for tensor 'optim.layers.0.bias.exp_avg' but holds no such tensor"});
}

TEST(TrainingCheckpointStrict, RenamedDeletedOrExtraOptimizerStateIsAnError) {
  {
    Saved s;  // renamed: the state of one parameter is incomplete, the new name is unknown
    rewrite(s.path, [](SafetensorsContent& c) {
      rename_tensor(c, "optim.layers.0.weight.exp_avg", "optim.layers.0.weight.exp_avg_old");
    });
    expect_error(load_error(s.path), {"'optim.layers.0.weight.exp_avg_old' is not state of adamw",
                                      "--reset-optimizer", s.path});
  }
  {
    Saved s;  // renamed onto another parameter that does not exist
    rewrite(s.path, [](SafetensorsContent& c) {
      rename_tensor(c, "optim.layers.0.weight.exp_avg", "optim.layers.9.weight.exp_avg");
    });
    expect_error(load_error(s.path), {"parameter 'layers.9.weight' this model does not have"});
  }
  {
    Saved s;  // deleted: the parameter's state would restart from zero
    rewrite(s.path, [](SafetensorsContent& c) {
      c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                     [](const NamedBuffer& b) { return b.name == "optim.layers.2.bias.exp_avg_sq"; }),
                      c.tensors.end());
    });
    expect_error(load_error(s.path), {"state of parameter 'layers.2.bias' is incomplete",
                                      "'optim.layers.2.bias.exp_avg_sq' is missing", "--reset-optimizer"});
  }
  {
    Saved s;  // all optimizer state stripped after a step
    rewrite(s.path, [](SafetensorsContent& c) {
      c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                     [](const NamedBuffer& b) { return b.name.rfind("optim.", 0) == 0; }),
                      c.tensors.end());
    });
    expect_error(load_error(s.path), {"records 1 optimizer steps but holds no adamw state"});
  }
  {
    Saved s;  // a tensor of neither kind
    rewrite(s.path, [](SafetensorsContent& c) { rename_tensor(c, "optim.layers.2.bias.step", "extra.step"); });
    expect_error(load_error(s.path), {"'extra.step' is neither model state"});
  }
}

TEST(TrainingCheckpointStrict, AnotherOptimizerIsAnErrorUnlessTheStateIsResetOnPurpose) {
  Saved s;
  expect_error(load_error(s.path, "sgd"), {"holds the state of optimizer adamw, but this run uses sgd",
                                           "resume with --optimizer adamw", "--reset-optimizer"});
  LoadOptions reset;
  reset.reset_optimizer = true;
  auto m = make_mlp();
  optim::SGD sgd(m->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  TrainingState st = load_training_checkpoint(s.path, *m, &sgd, reset);
  EXPECT_EQ(st.step, 1);
  EXPECT_TRUE(sgd.state().empty()) << "the adamw state must not leak into sgd";
  EXPECT_EQ(sgd.steps(), 0);
  // The model itself was loaded.
  auto reference = make_mlp();
  load_training_checkpoint(s.path, *reference, nullptr);
  EXPECT_EQ(m->named_parameters()[0].tensor.to_double_vector(),
            reference->named_parameters()[0].tensor.to_double_vector());
}

TEST(TrainingCheckpointStrict, NegativeOrGarbledPositionFieldsNameTheFieldAndFile) {
  for (const char* field : {"step", "epoch", "batches_in_epoch", "optimizer_steps"}) {
    Saved s;
    rewrite(s.path, [&](SafetensorsContent& c) { c.metadata[field] = "-5"; });
    expect_error(load_error(s.path), {"checkpoint '" + s.path + "'", std::string("metadata field '") + field +
                                      "' = -5 is negative", "resume from another checkpoint"});
  }
  Saved s;
  rewrite(s.path, [](SafetensorsContent& c) { c.metadata["epoch"] = "3x"; });
  expect_error(load_error(s.path), {"metadata field 'epoch' = '3x' is not an integer"});
}

TEST(TrainingCheckpointStrict, AnotherRunConfigurationIsAnErrorNamingEachFlag) {
  Saved s;
  LoadOptions live;
  live.live_config = R"({"model":"mlp","batch_size":32,"lr":0.01,"new_key":1})";
  expect_error(load_error(s.path, "adamw", live),
               {"written by a run with other settings", "--batch-size 16 (this run: 32)", "--lr 0.003 (this run: 0.01)",
                "Resume with the checkpoint's settings (--batch-size 16 --lr 0.003)"});
  live.config_keys_may_differ = {"lr"};
  std::string m = load_error(s.path, "adamw", live);
  expect_error(m, {"--batch-size 16"});
  EXPECT_EQ(m.find("--lr"), std::string::npos) << m;
  live.live_config = R"({"model":"mlp","batch_size":16,"lr":0.003})";
  EXPECT_EQ(load_error(s.path, "adamw", live), "");
  // A config that is not a flat object (edited) is refused without parsing deep input.
  rewrite(s.path, [](SafetensorsContent& c) { c.metadata["config"] = std::string(100000, '[') + std::string(100000, ']'); });
  expect_error(load_error(s.path, "adamw", live), {"metadata field 'config' is not a flat JSON object"});
}

TEST(TrainingCheckpointStrict, Version1FilesWithoutChecksumsStillLoad) {
  Saved s;
  rewrite(s.path, [](SafetensorsContent& c) {
    for (auto it = c.metadata.begin(); it != c.metadata.end();)
      it = it->first.rfind(kChecksumKeyPrefix, 0) == 0 ? c.metadata.erase(it) : std::next(it);
    c.metadata.erase("optimizer");
    c.metadata.erase(std::string(kHeaderChecksumKey));
    c.metadata["format"] = "ddp.cpp training checkpoint v1";
  }, false);
  EXPECT_EQ(load_error(s.path), "");
  // The kind is inferred from the state names, so the optimizer check still works on old files.
  expect_error(load_error(s.path, "sgd"), {"holds the state of optimizer adamw"});
}

TEST(TrainingCheckpointStrict, Crc32MatchesZlibsKnownValue) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32_text(crc32_of(text.data(), text.size())), "cbf43926");  // the CRC-32 check value
}
