// train_ft_check.cpp - `train --ft-check DIR`: reads the record a fault-tolerant run left in DIR (--ft-log) and
// checks what the mode promises (see check_fault_tolerant_run in train_ft.h): each step committed once, each
// sample of each finished epoch used exactly once, the final parameters bitwise equal on every process that
// finished, and equal to one process trained on the same global batches in float64.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "models/make_model.h"
#include "models/train_ft.h"
#include "models/train_setup.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/error.h"
#include "runtime/data/distributed_sampler.h"
#include "runtime/ops/loss.h"
#include "runtime/optim/lr_schedule.h"

namespace ddp::models {

namespace {
struct Attempt {
  int64_t data_epoch = 0;
  int world = 0;
  int64_t step_rows = 0;
  std::vector<int64_t> ids;
};
using StepKey = std::pair<int64_t, int64_t>;  // (membership epoch, step)
}  // namespace

int check_fault_tolerant_run(const TrainOptions& o, const std::string& dir, double tolerance) {
  std::map<StepKey, std::map<int, Attempt>> attempts;  // by rank in that epoch's group
  std::set<StepKey> commits;
  std::vector<std::pair<std::string, std::vector<double>>> finals;
  int launch_world = 0;
  int64_t epoch_size = 0;
  int problems = 0;
  auto problem = [&](const std::string& what) {
    ++problems;
    std::printf("ft-check: FAIL: %s\n", what.c_str());
  };
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("final.", 0) == 0) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::vector<double> v((std::filesystem::file_size(entry.path()) / sizeof(double)));
      in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
      finals.emplace_back(name, std::move(v));
      continue;
    }
    if (name.rfind("ft.", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      std::string kind;
      l >> kind;
      if (kind == "start") {
        l >> launch_world >> epoch_size;
      } else if (kind == "commit") {
        StepKey k;
        l >> k.first >> k.second;
        commits.insert(k);
      } else if (kind == "attempt") {
        StepKey k;
        Attempt a;
        int rank = 0;
        std::string colon;
        l >> k.first >> k.second >> a.data_epoch >> a.world >> rank >> a.step_rows >> colon;
        int64_t id;
        while (l >> id) a.ids.push_back(id);
        attempts[k][rank] = std::move(a);
      }
    }
  }
  DDP_CHECK(!ec, "--ft-check: cannot read ", dir, ": ", ec.message());
  DDP_CHECK(launch_world > 0, "--ft-check: ", dir, " holds no record of a fault-tolerant run (ft.slot*.log)");

  // The committed schedule: one global batch per step, 1..S.
  std::map<int64_t, StepKey> by_step;
  for (const auto& k : commits) {
    auto [it, fresh] = by_step.emplace(k.second, k);
    if (!fresh)
      problem("step " + std::to_string(k.second) + " committed under membership epochs " +
              std::to_string(it->second.first) + " and " + std::to_string(k.first));
  }
  const int64_t steps = by_step.empty() ? 0 : by_step.rbegin()->first;
  for (int64_t s = 1; s <= steps; ++s)
    if (!by_step.count(s)) problem("step " + std::to_string(s) + " was never committed");
  std::vector<std::vector<int64_t>> batches;
  std::map<int64_t, std::vector<int64_t>> uses;  // data epoch -> how often each sample was used
  for (const auto& [step, key] : by_step) {
    const auto& ranks = attempts[key];
    std::vector<int64_t> batch;
    int world = ranks.empty() ? 0 : ranks.begin()->second.world;
    if (static_cast<int>(ranks.size()) != world)
      problem("step " + std::to_string(step) + " (epoch " + std::to_string(key.first) + "): attempts of " +
              std::to_string(ranks.size()) + " ranks recorded, world " + std::to_string(world));
    int64_t step_rows = 0, data_epoch = 0;
    for (const auto& [rank, a] : ranks) {
      batch.insert(batch.end(), a.ids.begin(), a.ids.end());
      step_rows = a.step_rows;
      data_epoch = a.data_epoch;
    }
    if (static_cast<int64_t>(batch.size()) != step_rows)
      problem("step " + std::to_string(step) + ": " + std::to_string(batch.size()) + " samples recorded of " +
              std::to_string(step_rows));
    auto& u = uses[data_epoch];
    u.resize(static_cast<size_t>(epoch_size), 0);
    for (int64_t id : batch) ++u[static_cast<size_t>(id)];
    batches.push_back(std::move(batch));
  }
  int64_t complete_epochs = 0;
  for (const auto& [e, u] : uses) {
    int64_t never = 0, twice = 0;
    for (int64_t c : u) {
      never += c == 0;
      twice += c > 1;
    }
    const bool last = e == uses.rbegin()->first;
    const bool complete = never == 0;
    complete_epochs += complete;
    if (twice > 0) problem("epoch " + std::to_string(e) + ": " + std::to_string(twice) + " samples used more than once");
    if (!complete && !last) problem("epoch " + std::to_string(e) + ": " + std::to_string(never) + " samples never used");
  }
  // Every lost step accounted for: an attempt that did not commit was redone under a later epoch, and each
  // epoch lost at most the one step in flight when the membership changed.
  std::map<int64_t, int> lost_per_epoch;
  size_t lost = 0;
  for (const auto& [key, ranks] : attempts) {
    if (commits.count(key)) continue;
    ++lost;
    ++lost_per_epoch[key.first];
    const auto redone = by_step.find(key.second);
    if (redone == by_step.end() || redone->second.first <= key.first)
      problem("the attempt of step " + std::to_string(key.second) + " under membership epoch " +
              std::to_string(key.first) + " did not commit and was not redone under a later epoch");
  }
  for (const auto& [epoch, n] : lost_per_epoch)
    if (n > 1) problem("membership epoch " + std::to_string(epoch) + " lost " + std::to_string(n) + " step attempts");
  std::printf("ft-check: %lld steps committed once each; %lld complete epoch(s) of %lld samples, each sample used "
              "exactly once; %zu attempt(s) not committed\n",
              static_cast<long long>(steps), static_cast<long long>(complete_epochs),
              static_cast<long long>(epoch_size), lost);

  // One process on the same global batches.
  TrainData data = load_data(o);
  const DType dtype = o.dtype == "float64" ? DType::F64 : DType::F32;
  nn::manual_seed(o.seed);
  auto model = make_model(o, dtype);
  auto optimizer = make_train_optimizer(o, model->named_parameters());
  const optim::WarmupCosine schedule = ft_schedule(o, epoch_size, launch_world);
  // --checkpoint-dir: the newest checkpoint (whoever wrote it, killed writers included) must load and equal
  // the reference at its step.
  std::string ckpt_path;
  int64_t ckpt_step = -1;
  std::vector<double> at_ckpt;
  if (!o.checkpoint_dir.empty()) {
    ckpt_path = checkpoint::read_latest(o.checkpoint_dir);
    nn::manual_seed(o.seed);
    auto loaded = make_model(o, dtype);
    auto loaded_opt = make_train_optimizer(o, loaded->named_parameters());
    ckpt_step = checkpoint::load_training_checkpoint(ckpt_path, *loaded, loaded_opt.get()).step;
    for (auto& p : loaded->named_parameters()) {
      auto v = p.tensor.to_double_vector();
      at_ckpt.insert(at_ckpt.end(), v.begin(), v.end());
    }
    nn::manual_seed(o.seed);
    model = make_model(o, dtype);
    optimizer = make_train_optimizer(o, model->named_parameters());
  }
  auto compare_checkpoint = [&] {
    std::vector<double> ref;
    for (auto& p : model->named_parameters()) {
      auto v = p.tensor.to_double_vector();
      ref.insert(ref.end(), v.begin(), v.end());
    }
    double worst = 0;
    for (size_t i = 0; i < ref.size() && i < at_ckpt.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - at_ckpt[i]));
    if (ref.size() != at_ckpt.size() || !(worst <= tolerance))
      problem("checkpoint " + ckpt_path + " (step " + std::to_string(ckpt_step) + ") differs from the reference at that step by " + std::to_string(worst));
    else
      std::printf("ft-check: checkpoint %s (step %lld) loads and equals the reference at its step (max |difference| %.3g)\n",
                  ckpt_path.c_str(), static_cast<long long>(ckpt_step), worst);
  };
  if (ckpt_step == 0) compare_checkpoint();
  for (size_t s = 0; s < batches.size(); ++s) {
    optimizer->set_lr(schedule.at(static_cast<int64_t>(s)));
    data::DatasetBatch b = data.train->get_batch(batches[s]);
    Tensor x = b.x;
    if (!data.tokens && x.dtype() != dtype) x = x.to(dtype);
    Tensor loss = ops::cross_entropy(model->forward(x), b.y);
    autograd::backward(loss);
    if (o.clip_grad > 0) optim::clip_grad_norm_tensor_(model->parameters(), o.clip_grad);  // not read
    optimizer->step();
    optimizer->zero_grad();
    if (static_cast<int64_t>(s) + 1 == ckpt_step) compare_checkpoint();
  }
  if (ckpt_step > static_cast<int64_t>(batches.size())) problem("checkpoint " + ckpt_path + " is at step " + std::to_string(ckpt_step) + ", past the committed steps");
  std::vector<double> reference;
  for (auto& p : model->named_parameters()) {
    auto v = p.tensor.to_double_vector();
    reference.insert(reference.end(), v.begin(), v.end());
  }
  if (finals.empty()) problem("no process wrote its final parameters (final.slot*.bin)");
  for (const auto& [name, v] : finals) {
    if (v.size() != reference.size()) {
      problem(name + ": " + std::to_string(v.size()) + " values, the model has " + std::to_string(reference.size()));
      continue;
    }
    if (v != finals.front().second) problem(name + " differs from " + finals.front().first + " (not bitwise equal)");
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(v[i] - reference[i]));
    if (!(worst <= tolerance))
      problem(name + ": max |difference| to the one-process reference " + std::to_string(worst) + " > " +
              std::to_string(tolerance));
    else
      std::printf("ft-check: %s: bitwise equal to the others; max |difference| to one process on the same "
                  "batches %.3g\n", name.c_str(), worst);
  }
  std::printf("ft-check: %s\n", problems == 0 ? "ok" : "FAILED");
  return problems == 0 ? 0 : 1;
}

}  // namespace ddp::models
