// test_pytorch_bridge.cpp - ddp.cpp checkpoints and PyTorch agree (tools/ddp_torch.py, docs/pytorch.md): for
// each reference model, `train` writes a float64 checkpoint after 2 steps; ddp.cpp (tools/checkpoint_loss)
// and PyTorch (the twin ddp_torch.py loads it into) compute the loss of one fixed batch, take one optimizer
// step from the checkpoint's optimizer state and compute it again: both agree to 1e-12. Then the reverse:
// PyTorch's model and optimizer after its step, written as a ddp.cpp checkpoint, give ddp.cpp PyTorch's loss,
// and one more step on each side agrees again. Also the .pt round trip (to-torch, from-torch) keeps every
// tensor and metadata entry, across the two PyTorch versions when both are installed. Each runs under both
// PyTorch installations (tests/support/torch_python.h: Debian's 1.13, PyPI's 2.x venv), skipped with the
// reason when one is missing. A checkpoint of `train --zero 3` at 2 processes (whole model, consolidated
// optimizer state) gives ddp.cpp and PyTorch the losses of plain DDP's checkpoint (one PyTorch suffices).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/support/run_process.h"
#include "tests/support/torch_python.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;
using ddp::testing::run_process;

ProcessResult run(const std::vector<std::string>& argv) {
  ddp::testing::ProcessOptions options;
  options.set_env = {{"OPENBLAS_NUM_THREADS", "1"}, {"OMP_NUM_THREADS", "1"}};
  options.timeout_s = 120;
  return run_process(argv, options);
}
std::string output(const ProcessResult& r) { return r.out + r.err + (r.timed_out ? "\n(timed out)" : ""); }

// A fixed batch as tools/checkpoint_loss and ddp_torch.py read it: "tokens" (6, 17) for gpt, else "pixels"
// (6, 1, 28, 28) bytes and "labels" (6).
void write_batch(const std::string& path, const std::string& model) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&](uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  };
  if (model == "gpt") {
    std::vector<int64_t> tokens(6 * 17);
    for (auto& t : tokens) t = static_cast<int64_t>(next(256));
    ddp::checkpoint::write_safetensors(
        path, {{"tokens", ddp::DType::I64, {6, 17}, tokens.data(), tokens.size() * 8}});
    return;
  }
  std::vector<uint8_t> pixels(6 * 28 * 28);
  for (auto& p : pixels) p = static_cast<uint8_t>(next(256));
  std::vector<int64_t> labels(6);
  for (auto& l : labels) l = static_cast<int64_t>(next(10));
  ddp::checkpoint::write_safetensors(
      path, {{"pixels", ddp::DType::U8, {6, 1, 28, 28}, pixels.data(), pixels.size()},
             {"labels", ddp::DType::I64, {6}, labels.data(), labels.size() * 8}});
}

struct Losses {
  double before = NAN, after = NAN, after2 = NAN;  // the batch's loss, after one step, after two
};
Losses parse_losses(const std::string& out) {
  Losses l;
  auto value = [&](const char* key) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(std::string("(^|\\n)") + key + " ([-+0-9.eE]+|nan|inf)"))
               ? std::stod(m[2])
               : NAN;
  };
  l.before = value("loss");
  l.after = value("loss_after_step");
  l.after2 = value("loss_after_step2");
  return l;
}

void expect_close(double cpp, double torch, const std::string& what) {
  ASSERT_TRUE(std::isfinite(cpp) && std::isfinite(torch))
      << what << ": ddp.cpp " << cpp << ", PyTorch " << torch;
  EXPECT_LE(std::abs(cpp - torch), 1e-12 * std::max(1.0, std::abs(cpp)))
      << what << ": ddp.cpp " << cpp << " vs PyTorch " << torch << " (difference " << cpp - torch << ")";
}

using ddp::testing::TorchKind;
using ddp::testing::TorchPython;

class PyTorchBridge : public ::testing::TestWithParam<std::tuple<const char*, TorchKind>> {
 protected:
  const TorchPython& torch() const { return ddp::testing::torch_python(std::get<1>(GetParam())); }
  std::string model() const { return std::get<0>(GetParam()); }
  fs::path fresh_dir(const std::string& what) const {
    const fs::path dir = fs::temp_directory_path() / ("ddp_torch_" + what + "_" + model() + "_" +
                                                      torch().label + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
  }
};

// A float64 checkpoint of `model` after 2 steps in `ckpt_dir`, so the optimizer has state (momentum, AdamW
// moments and steps); its path, or "" with the failure recorded. `zero`: the ZeRO stage, `nproc` processes
// (through ddprun when more than 1).
std::string train_checkpoint(const std::string& model, const std::string& ckpt_dir,
                             const std::string& zero = "0", int nproc = 1) {
  std::string flags =
      "--data synthetic --dtype float64 --steps 2 --batch-size 8 --synthetic-samples 64 --eval-batches 1 "
      "--log-interval 0 --sample-tokens 0 --weight-decay 0.01 --lr 0.01 --threads 1";
  if (model == "mlp") flags += " --hidden 32 --depth 2 --optimizer sgd";
  if (model == "cnn") flags += " --optimizer sgd --momentum 0.8";
  if (model == "gpt") flags += " --context 16 --d-model 32 --n-head 2 --n-layer 2 --optimizer adamw";
  std::vector<std::string> train = {
      DDP_BIN_DIR "/train", "--model", model, "--checkpoint-dir", ckpt_dir, "--zero", zero};
  if (nproc > 1)
    train.insert(train.begin(),
                 {ddp::testing::ddprun_path(), "--standalone", "--nproc-per-node", std::to_string(nproc)});
  std::istringstream words(flags);
  for (std::string w; words >> w;) train.push_back(w);
  ProcessResult r = run(train);
  EXPECT_EQ(r.exit_code, 0) << output(r);
  const std::string ckpt = ckpt_dir + "/ckpt-step2.safetensors";
  EXPECT_TRUE(fs::exists(ckpt)) << output(r);
  return r.exit_code == 0 && fs::exists(ckpt) ? ckpt : "";
}

// Every tensor (name, dtype, shape, bytes) and metadata entry of two checkpoints; "" when the same.
std::string checkpoint_difference(const std::string& a, const std::string& b) {
  auto x = ddp::checkpoint::read_safetensors(a);
  auto y = ddp::checkpoint::read_safetensors(b);
  if (x.tensors.size() != y.tensors.size())
    return std::to_string(x.tensors.size()) + " vs " + std::to_string(y.tensors.size()) + " tensors";
  for (auto& t : x.tensors) {
    const ddp::checkpoint::NamedBuffer* o = y.find(t.name);
    if (!o) return "tensor " + t.name + " missing";
    if (t.dtype != o->dtype || t.shape != o->shape || t.bytes != o->bytes)
      return "tensor " + t.name + " differs";
  }
  // The header's checksum last: it differs whenever anything else does, so name that first.
  std::vector<std::string> keys;
  for (auto& [k, v] : x.metadata)
    if (k != "header_crc32") keys.push_back(k);
  keys.push_back("header_crc32");
  for (auto& k : keys) {
    auto a = x.metadata.find(k), b = y.metadata.find(k);
    if (a == x.metadata.end() && b == y.metadata.end()) continue;
    if (a == x.metadata.end() || b == y.metadata.end()) return "metadata " + k + " missing on one side";
    if (a->second != b->second) return "metadata " + k + ": '" + a->second + "' vs '" + b->second + "'";
  }
  if (x.metadata.size() != y.metadata.size()) return "extra metadata entries";
  return "";
}

TEST_P(PyTorchBridge, LossOfOneBatchAgreesInFloat64BothWays) {
  DDP_REQUIRE_TORCH(torch());
  const std::vector<std::string> py = {torch().python};
  const std::string model = this->model();
  const fs::path dir = fresh_dir("loss");
  const std::string script = DDP_SOURCE_DIR "/tools/ddp_torch.py";
  const std::string ckpt_dir = (dir / "ckpt").string(), batch = (dir / "batch.safetensors").string();

  const std::string ckpt = train_checkpoint(model, ckpt_dir);
  ASSERT_FALSE(ckpt.empty());
  ProcessResult r;
  write_batch(batch, model);

  // ddp.cpp: the loss under the checkpoint, and after one step from its optimizer state.
  r = run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", ckpt, "--batch", batch, "--step"});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses cpp = parse_losses(r.out);
  // PyTorch: the same, a second step, and its state after the first step as a ddp.cpp checkpoint.
  const std::string back = (dir / "from_torch.safetensors").string();
  std::vector<std::string> loss_cmd = py;
  loss_cmd.insert(loss_cmd.end(),
                  {script, "loss", ckpt, batch, "--steps", "2", "--save-after-step", "1", back});
  r = run(loss_cmd);
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses torch = parse_losses(r.out);
  expect_close(cpp.before, torch.before, model + ": loss of the batch under the checkpoint");
  expect_close(cpp.after, torch.after, model + ": loss after one optimizer step from the checkpoint's state");
  EXPECT_GT(std::abs(cpp.before - cpp.after), 1e-6)
      << "the step changed nothing: the comparison proves nothing";

  // PyTorch -> ddp.cpp: PyTorch's model and optimizer after its step, loaded and stepped by ddp.cpp.
  r = run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", back, "--batch", batch, "--step"});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const Losses cpp_back = parse_losses(r.out);
  expect_close(cpp_back.before, torch.after, model + ": PyTorch's stepped model loaded into ddp.cpp");
  expect_close(cpp_back.after, torch.after2, model + ": one more step from PyTorch's optimizer state");
  fs::remove_all(dir);
}

// The .pt route of docs/pytorch.md: to-torch then from-torch gives back every tensor and metadata entry of
// the checkpoint (2.x's torch.load defaults to weights_only=True: the dict must hold only what that allows).
// This PyTorch writes the .pt; the other one reads it back when it is installed (so the two instances cover
// both directions and each version's to-torch and from-torch), else this one.
TEST_P(PyTorchBridge, CheckpointRoundTripThroughPtKeepsEveryTensor) {
  DDP_REQUIRE_TORCH(torch());
  const fs::path dir = fresh_dir("roundtrip");
  const std::string script = DDP_SOURCE_DIR "/tools/ddp_torch.py";
  const std::string ckpt = train_checkpoint(model(), (dir / "ckpt").string());
  ASSERT_FALSE(ckpt.empty());
  const std::string pt = (dir / "ckpt.pt").string(), back = (dir / "back.safetensors").string();
  ProcessResult r = run({torch().python, script, "to-torch", ckpt, pt});
  ASSERT_EQ(r.exit_code, 0) << output(r);
  const TorchPython& other = ddp::testing::torch_python(
      torch().kind == TorchKind::Debian113 ? TorchKind::PyPI2 : TorchKind::Debian113);
  const TorchPython& reader = other.available() ? other : torch();
  r = run({reader.python, script, "from-torch", pt, back});
  ASSERT_EQ(r.exit_code, 0) << "a .pt of torch " << torch().version << " read by torch " << reader.version
                            << ": " << output(r);
  EXPECT_EQ(checkpoint_difference(ckpt, back), "")
      << "written by torch " << torch().version << ", read by " << reader.version;
  fs::remove_all(dir);
}

// --zero 3 writes the file plain DDP writes (issue 23): its checkpoint at 2 processes gives checkpoint_loss
// and ddp_torch.py the loss, and the loss after one step from its optimizer state, of --zero 0's at 2
// processes.
TEST(PyTorchBridgeZero, Zero3CheckpointGivesPlainDdpsLossesInDdpCppAndPyTorch) {
  const TorchPython& t1 = ddp::testing::torch_python(TorchKind::Debian113);  // the faster import
  const TorchPython& torch = t1.available() ? t1 : ddp::testing::torch_python(TorchKind::PyPI2);
  DDP_REQUIRE_TORCH(torch);
  for (const std::string model : {"mlp", "cnn", "gpt"}) {  // SGD, SGD with momentum and BatchNorm, AdamW
    SCOPED_TRACE(model);
    const fs::path dir =
        fs::temp_directory_path() / ("ddp_torch_zero3_" + model + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string batch = (dir / "batch.safetensors").string();
    write_batch(batch, model);
    const std::string plain = train_checkpoint(model, (dir / "plain").string(), "0", 2);
    const std::string zero3 = train_checkpoint(model, (dir / "zero3").string(), "3", 2);
    ASSERT_FALSE(plain.empty());
    ASSERT_FALSE(zero3.empty());
    ProcessResult r =
        run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", plain, "--batch", batch, "--step"});
    ASSERT_EQ(r.exit_code, 0) << output(r);
    const Losses want = parse_losses(r.out);
    r = run({DDP_BIN_DIR "/checkpoint_loss", "--checkpoint", zero3, "--batch", batch, "--step"});
    ASSERT_EQ(r.exit_code, 0) << output(r);
    const Losses cpp = parse_losses(r.out);
    r = run({torch.python, DDP_SOURCE_DIR "/tools/ddp_torch.py", "loss", zero3, batch, "--steps", "1"});
    ASSERT_EQ(r.exit_code, 0) << output(r);
    const Losses py = parse_losses(r.out);
    expect_close(cpp.before, want.before, model + ": --zero 3's checkpoint vs --zero 0's, loss of the batch");
    expect_close(cpp.after, want.after, model + ": --zero 3's checkpoint vs --zero 0's, after one step");
    expect_close(cpp.before, py.before, model + ": --zero 3's checkpoint in ddp.cpp vs PyTorch");
    expect_close(cpp.after, py.after,
                 model + ": --zero 3's checkpoint in ddp.cpp vs PyTorch, after one step");
    EXPECT_GT(std::abs(cpp.before - cpp.after), 1e-6)
        << "the step changed nothing: the comparison proves nothing";
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, PyTorchBridge,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "gpt"),
                                            ::testing::ValuesIn(ddp::testing::all_torch_kinds())),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  ddp::testing::torch_kind_label(std::get<1>(info.param));
                         });

}  // namespace
