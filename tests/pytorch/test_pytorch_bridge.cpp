// test_pytorch_bridge.cpp - ddp.cpp checkpoints and PyTorch agree (tools/ddp_torch.py, docs/pytorch.md): for
// each reference model, `train` writes a float64 checkpoint; ddp.cpp (tools/checkpoint_loss) and PyTorch (the
// twin loaded by ddp_torch.py) compute the loss of one fixed batch, take one optimizer step from the
// checkpoint's optimizer state and compute it again: both pairs agree to 1e-12. Then the reverse: PyTorch's
// stepped model and optimizer, converted back to a ddp.cpp checkpoint, give ddp.cpp the same losses.
// Skipped, with the reason, when no python3 with PyTorch (Debian: python3-torch) is found.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;
using ddp::testing::run_process;

ProcessResult run(const std::vector<std::string>& argv) {
  return run_process(
      argv, {.set_env = {{"OPENBLAS_NUM_THREADS", "1"}, {"OMP_NUM_THREADS", "1"}}, .timeout_s = 120});
}
std::string output(const ProcessResult& r) { return r.out + r.err + (r.timed_out ? "\n(timed out)" : ""); }

// Debian's interpreter first (a pyenv or venv python3 on PATH usually lacks the Debian package).
std::string python_with_torch() {
  for (const char* py : {"/usr/bin/python3", "python3"})
    if (run({py, "-c", "import torch"}).exit_code == 0) return py;
  return "";
}

struct Losses {
  double before = NAN, after = NAN;
};
Losses parse_losses(const std::string& out) {
  Losses l;
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(loss ([-+0-9.eE]+|nan|inf))"))) l.before = std::stod(m[1]);
  if (std::regex_search(out, m, std::regex(R"(loss_after_step ([-+0-9.eE]+|nan|inf))")))
    l.after = std::stod(m[1]);
  return l;
}

void expect_close(double cpp, double torch, const std::string& what) {
  ASSERT_TRUE(std::isfinite(cpp) && std::isfinite(torch))
      << what << ": ddp.cpp " << cpp << ", PyTorch " << torch;
  EXPECT_LE(std::abs(cpp - torch), 1e-12 * std::max(1.0, std::abs(cpp)))
      << what << ": ddp.cpp " << cpp << " vs PyTorch " << torch << " (difference " << cpp - torch << ")";
}

class PyTorchBridge : public ::testing::TestWithParam<const char*> {};

TEST_P(PyTorchBridge, LossOfOneBatchAgreesInFloat64BothWays) {
  const std::string py = python_with_torch();
  if (py.empty())
    GTEST_SKIP() << "no python3 with PyTorch: apt-get install python3-torch (tools/ddp test does)";
  const std::string model = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("ddp_torch_" + model + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string script = DDP_SOURCE_DIR "/tools/ddp_torch.py";
  const std::string ckpt_dir = (dir / "ckpt").string(), batch = (dir / "batch.safetensors").string();

  // A float64 checkpoint after 2 steps, so the optimizer has state (momentum, AdamW moments and steps).
  std::vector<std::string> train = {DDP_BIN_DIR "/train",
                                    "--model",
                                    model,
                                    "--data",
                                    "synthetic",
                                    "--dtype",
                                    "float64",
                                    "--steps",
                                    "2",
                                    "--batch-size",
                                    "8",
                                    "--synthetic-samples",
                                    "64",
                                    "--eval-batches",
                                    "1",
                                    "--log-interval",
                                    "0",
                                    "--sample-tokens",
                                    "0",
                                    "--weight-decay",
                                    "0.01",
                                    "--lr",
                                    "0.01",
                                    "--checkpoint-dir",
                                    ckpt_dir,
                                    "--threads",
                                    "1"};
  if (model == "mlp") train.insert(train.end(), {"--hidden", "32", "--depth", "2", "--optimizer", "sgd"});
  if (model == "cnn") train.insert(train.end(), {"--optimizer", "sgd", "--momentum", "0.8"});
  if (model == "gpt")
    train.insert(train.end(), {"--context", "16", "--d-model", "32", "--n-head", "2", "--n-layer", "2",
                               "--optimizer", "adamw"});
  ProcessResult r = run(train);
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const std::string ckpt = ckpt_dir + "/ckpt-step2.safetensors";
  ASSERT_TRUE(fs::exists(ckpt)) << output(r);
  r = run({py, script, "batch", "--model", model, "--rows", "6", "--context", "16", "--seed", "3", batch});
  ASSERT_EQ(r.exit_code, 0) << output(r);

  // ddp.cpp -> PyTorch.
  r = run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", ckpt, "--batch", batch, "--step"});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses cpp = parse_losses(r.out);
  const std::string stepped_pt = (dir / "stepped.pt").string();
  r = run({py, script, "loss", ckpt, batch, "--step", "--save-after", stepped_pt});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses torch = parse_losses(r.out);
  expect_close(cpp.before, torch.before, model + ": loss of the batch under the checkpoint");
  expect_close(cpp.after, torch.after, model + ": loss after one optimizer step from the checkpoint's state");
  EXPECT_NE(cpp.before, cpp.after) << "the step changed nothing: the comparison would prove nothing";

  // PyTorch -> ddp.cpp: the model and optimizer PyTorch stepped, as a ddp.cpp checkpoint.
  const std::string back = (dir / "from_torch.safetensors").string();
  r = run({py, script, "from-torch", stepped_pt, back});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  r = run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", back, "--batch", batch, "--step"});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses cpp_back = parse_losses(r.out);
  r = run({py, script, "loss", stepped_pt, batch, "--step"});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses torch_back = parse_losses(r.out);
  expect_close(cpp_back.before, torch.after, model + ": PyTorch's stepped model loaded into ddp.cpp");
  expect_close(cpp_back.after, torch_back.after, model + ": one more step from PyTorch's optimizer state");
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, PyTorchBridge, ::testing::Values("mlp", "cnn", "gpt"));

}  // namespace
