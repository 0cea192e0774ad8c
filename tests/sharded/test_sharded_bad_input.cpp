// test_sharded_bad_input.cpp - one generated corpus of bad inputs run against every loader and constructor of
// ZeRO stages 0-3 at worlds 2 and 3 (issue 36, "same outcome on every rank"). From a good input (whole
// parameters or a whole optimizer state, by name) it derives, for every entry: the entry missing, misnamed,
// reshaped to the same count in another shape, resized, in another dtype; plus two extra entries. Each case
// runs on every rank of the world against each loader of the stage:
//   stage 0: Optimizer::load_state (SGD, AdamW) and load_training_checkpoint into the DDP model;
//   stage 1: ZeroRedundancyOptimizer::load_state and load_training_checkpoint;
//   stages 2, 3: ShardedDataParallel::load_parameters, ShardedOptimizer::load_consolidated_state, and a
//            checkpoint loaded the way `train --zero 2|3` resumes (a whole model, then the two loaders).
// Asserted for every case: every rank has the same outcome (success, or the same message), the outcome is the
// expected one (only an SGD parameter without momentum state is a valid gap), a refusal names the tensor at
// fault, and a refused load left this rank's parameters, optimizer state and step count exactly as they were.
// A second corpus does the same for the constructors (ShardOptions::units and the other options,
// ZeroRedundancyOptimizer). Nothing here runs a collective between the cases, so a rank-dependent outcome
// shows as a failed comparison, not a hang.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "models/mlp.h"
#include "runtime/autograd/node.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "runtime/ddp/comm_hook.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/ddp/sharded/sharded_data_parallel.h"
#include "runtime/ddp/sharded/sharded_optimizer.h"
#include "runtime/ddp/zero_redundancy_optimizer.h"
#include "runtime/distributed/env.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/nn/layers.h"

using namespace ddp;

namespace {

using Map = std::map<std::string, Tensor>;
using Clock = std::chrono::steady_clock;

std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) {
  return std::shared_ptr<dist::ProcessGroup>(std::shared_ptr<dist::ProcessGroup>{}, &pg);
}

// (16, 12), (16), (8, 16), (8), (5, 8), (5): no square weight, so a transposed one is a wrong shape.
std::shared_ptr<nn::Module> mlp() {
  nn::manual_seed(3);
  return std::make_shared<models::MLP>(models::MLPConfig{12, {16, 8}, 5, DType::F64});
}

enum class Opt { AdamW, SGD };
const char* kind_of(Opt o) { return o == Opt::AdamW ? "adamw" : "sgd"; }
std::unique_ptr<optim::Optimizer> make_optimizer(Opt o, std::vector<nn::NamedTensor> ps) {
  if (o == Opt::AdamW) return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{});
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

// Good inputs; `seed` picks the values (the corpus uses other values than the live state, so that a half
// load shows).
Map whole_params(uint64_t seed) {
  Map m;
  for (auto& p : mlp()->named_parameters()) m[p.name] = Tensor::randn(p.tensor.shape(), seed++, DType::F64);
  return m;
}
Map whole_state(Opt o, uint64_t seed) {
  Map s;
  for (auto& p : mlp()->named_parameters()) {
    const auto& shape = p.tensor.shape();
    if (o == Opt::SGD) {
      s[p.name + ".momentum_buffer"] = Tensor::randn(shape, seed++, DType::F64);
      continue;
    }
    s[p.name + ".exp_avg"] = Tensor::randn(shape, seed++, DType::F64);
    s[p.name + ".exp_avg_sq"] = Tensor::randn(shape, seed++, DType::F64);
    s[p.name + ".step"] = Tensor::from_data<int64_t>({static_cast<int64_t>(seed++ % 7 + 1)}, {});
  }
  return s;
}

// ---- the corpus ----

struct Bad {
  std::string what;  // "missing layers.0.bias"
  Map input;
  std::vector<std::string> names;  // a refusal's message names one of these
  bool valid = false;              // a load that must succeed
};

// "layers.0.weight.exp_avg" -> "layers.0.weight.Exp_avg": one letter off.
std::string misspelled(const std::string& k) {
  std::string s = k;
  const size_t i = s.rfind('.') + 1;
  s[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
  return s;
}

Tensor reshaped_same_count(const Tensor& t) {
  Shape s = t.shape();
  if (s.size() >= 2 && s.front() != s.back()) {
    std::reverse(s.begin(), s.end());
  } else {
    s = {t.numel(), 1};
  }
  return t.clone().view(s);
}

Tensor resized(const Tensor& t) {
  Shape s = t.shape().empty() ? Shape{2} : t.shape();
  if (!t.shape().empty()) s[0] += 1;
  return Tensor::zeros(s, t.dtype());
}

// may_be_missing(k): whether the input without k is still valid.
std::vector<Bad> corpus_of(const Map& good, const std::function<bool(const std::string&)>& may_be_missing) {
  std::vector<Bad> out;
  for (const auto& [k, t] : good) {
    Map m = good;
    m.erase(k);
    out.push_back({"missing " + k, m, {k}, may_be_missing(k)});
    m = good;
    m.erase(k);
    m[misspelled(k)] = t;
    out.push_back({"misnamed " + k, m, {k, misspelled(k)}});
    m = good;
    m[k] = reshaped_same_count(t);
    out.push_back({"reshaped " + k + " to " + shape_str(m[k].shape()), m, {k}});
    m = good;
    m[k] = resized(t);
    out.push_back({"resized " + k + " to " + shape_str(m[k].shape()), m, {k}});
    m = good;
    m[k] = t.to(t.dtype() == DType::I64 ? DType::F64 : DType::F32);
    out.push_back({"dtype of " + k + " " + std::string(dtype_name(m[k].dtype())), m, {k}});
  }
  const std::string first = good.begin()->first;
  // Copies: a module lists a tensor registered twice once (tied weights), so a checkpoint would drop it.
  Map m = good;
  m[first + "_extra"] = good.begin()->second.clone();
  out.push_back({"extra " + first + "_extra", m, {first + "_extra"}});
  m = good;
  m["nosuch." + first.substr(first.find('.') + 1)] = good.begin()->second.clone();
  out.push_back({"extra nosuch.*", m, {"nosuch"}});
  return out;
}

std::vector<Bad> param_corpus() {
  return corpus_of(whole_params(100), [](const std::string&) { return false; });
}
std::vector<Bad> state_corpus(Opt o) {
  // A parameter with no state at all never stepped: valid. AdamW's three entries come together or not at all.
  return corpus_of(whole_state(o, 200), [o](const std::string&) { return o == Opt::SGD; });
}

// A module holding exactly the given tensors as parameters ("a.b.c" -> child "a", its child "b", tensor "c"):
// checkpoints of models that differ from the live one by one tensor.
class Bag : public nn::Module {
 public:
  explicit Bag(const Map& tensors) {
    std::map<std::string, Map> children;
    for (const auto& [name, t] : tensors) {
      const size_t dot = name.find('.');
      if (dot == std::string::npos) {
        register_parameter(name, t);
      } else {
        children[name.substr(0, dot)][name.substr(dot + 1)] = t;
      }
    }
    for (const auto& [name, m] : children) register_module(name, std::make_shared<Bag>(m));
  }
  Tensor forward(const Tensor& x) override { return x; }
};

// The checkpoint files of one optimizer kind: the model corpus with the good state, the state corpus with the
// good model. Written once, read by every rank of every world and stage.
struct CheckpointCase {
  Bad bad;
  std::string path;
};
std::vector<CheckpointCase> checkpoint_corpus(Opt o, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<CheckpointCase> out;
  auto write = [&](const Bad& bad, const Map& model, const Map& state) {
    const std::string path = dir + "/" + std::to_string(out.size()) + ".safetensors";
    checkpoint::OptimizerSnapshot snap{kind_of(o), 3, state};
    checkpoint::save_training_checkpoint(path, Bag(model), snap, checkpoint::TrainingState{});
    out.push_back({bad, path});
  };
  for (Bad& b : param_corpus()) write(b, b.input, whole_state(o, 200));
  for (Bad& b : state_corpus(o)) write(b, whole_params(100), b.input);
  return out;
}

// ---- one rank's loaders ----

// Everything a load may change on this rank, read without any collective.
using Fingerprint = std::map<std::string, std::vector<double>>;

struct Rank {
  int stage = 0;
  Opt opt = Opt::AdamW;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<DistributedDataParallel> ddp;  // stages 0, 1
  std::unique_ptr<optim::Optimizer> optimizer;   // stage 0: plain; stage 1: ZeroRedundancyOptimizer
  std::unique_ptr<ShardedDataParallel> sdp;      // stages 2, 3
  std::unique_ptr<ShardedOptimizer> sharded;

  Fingerprint fingerprint() {
    Fingerprint f;
    if (sdp) {
      for (size_t b = 0; b < sdp->buckets().size(); ++b) {
        auto& bk = sdp->buckets()[b];
        f["params " + std::to_string(b)] = (stage == 2 ? bk.full : bk.shard_params).to_double_vector();
      }
      for (auto& [k, t] : sharded->state()) f["state " + k] = t.to_double_vector();
      f["steps"] = {static_cast<double>(sharded->steps())};
      return f;
    }
    for (auto& p : model->named_parameters()) f["param " + p.name] = p.tensor.to_double_vector();
    auto* zero = dynamic_cast<optim::ZeroRedundancyOptimizer*>(optimizer.get());
    for (auto& [k, t] : zero ? zero->local_state() : optimizer->state())
      f["state " + k] = t.to_double_vector();
    f["steps"] = {static_cast<double>(optimizer->steps())};
    return f;
  }

  void load_params(const Map& m) { sdp->load_parameters(m); }
  void load_state(const Map& m) {
    if (sharded) {
      sharded->load_consolidated_state(m, 5);
    } else {
      optimizer->load_state(m, 5);
    }
  }
  void load_checkpoint(const std::string& path) {
    if (!sdp) {
      checkpoint::load_training_checkpoint(path, *model, optimizer.get());
      return;
    }
    // As `train --zero 2|3` resumes: the file into a whole model and a plain optimizer, then the shards.
    auto whole = mlp();
    auto plain = make_optimizer(opt, whole->named_parameters());
    checkpoint::load_training_checkpoint(path, *whole, plain.get());
    Map params;
    for (auto& p : whole->named_parameters()) params[p.name] = p.tensor;
    sdp->load_parameters(params);
    sharded->load_consolidated_state(plain->state(), plain->steps());
  }
  // The live state the corpus is compared against (other values than the corpus's).
  void load_start() {
    if (sdp) {
      load_params(whole_params(1));
    } else {
      autograd::NoGradGuard ng;
      const Map p = whole_params(1);
      for (auto& q : model->named_parameters()) q.tensor.copy_from(p.at(q.name));
    }
    load_state(whole_state(opt, 50));
  }
};

// What a rank saw for one case: "ok" or the message, and whether its state survived a refusal unchanged.
struct Seen {
  std::string outcome;
  bool unchanged = true;
};

Seen attempt(Rank& r, const std::function<void()>& load) {
  const Fingerprint before = r.fingerprint();
  Seen s;
  try {
    load();
    s.outcome = "ok";
  } catch (const Error& e) {
    s.outcome = e.what();
    s.unchanged = r.fingerprint() == before;
  }
  if (s.outcome == "ok") r.load_start();  // the next case starts from the same state
  return s;
}

// A second group over the world's ranks (ZeRO-3 gathers); `name` unique on the store.
std::shared_ptr<dist::ProcessGroup> gather_group(int rank, int world, dist::Store& store,
                                                 const std::string& name = "gather") {
  dist::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  dist::ProcessGroupOptions po;
  po.name = name;
  return dist::new_process_group(env, store, "gloo", po);
}

struct Tally {
  int cases = 0;  // (case, loader, stage, world, optimizer) combinations, each run on every rank
  int refused = 0;
};

// Runs every case of the corpus on every rank of (stage, world, optimizer) and checks what each rank saw.
void run_corpus(int stage, int world, Opt o, const std::vector<CheckpointCase>& files, Tally& tally) {
  struct Named {
    std::string loader;
    const Bad* bad;
    std::function<void(Rank&)> load;
  };
  const auto params = param_corpus();
  const auto states = state_corpus(o);
  std::vector<Named> plan;
  const std::string state_loader = stage == 0   ? "Optimizer::load_state"
                                   : stage == 1 ? "ZeroRedundancyOptimizer::load_state"
                                                : "ShardedOptimizer::load_consolidated_state";
  for (const Bad& b : states) plan.push_back({state_loader, &b, [&b](Rank& r) { r.load_state(b.input); }});
  if (stage >= 2)
    for (const Bad& b : params)
      plan.push_back({"ShardedDataParallel::load_parameters", &b, [&b](Rank& r) { r.load_params(b.input); }});
  for (const CheckpointCase& c : files)
    plan.push_back({"checkpoint", &c.bad, [&c](Rank& r) { r.load_checkpoint(c.path); }});

  std::vector<std::vector<Seen>> seen(world);
  dist::run_threads(
      world,
      [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
        Rank r;
        r.stage = stage;
        r.opt = o;
        r.model = mlp();
        if (stage >= 2) {
          ShardOptions so;
          so.stage = stage;
          if (stage == 3) so.gather_group = gather_group(rank, world, store);
          r.sdp = std::make_unique<ShardedDataParallel>(r.model, borrow(pg), so);
          r.sharded =
              std::make_unique<ShardedOptimizer>(*r.sdp, [o](auto ps) { return make_optimizer(o, ps); });
        } else {
          r.ddp = std::make_unique<DistributedDataParallel>(r.model, borrow(pg));
          if (stage == 0) {
            r.optimizer = make_optimizer(o, r.model->named_parameters());
          } else {
            r.optimizer = std::make_unique<optim::ZeroRedundancyOptimizer>(
                r.model->named_parameters(), borrow(pg), [o](auto ps) { return make_optimizer(o, ps); });
          }
        }
        r.load_start();
        for (auto& n : plan) seen[rank].push_back(attempt(r, [&] { n.load(r); }));
      },
      dist::ProcessGroupOptions{}, "gloo");

  for (size_t i = 0; i < plan.size(); ++i) {
    const Bad& b = *plan[i].bad;
    SCOPED_TRACE("zero" + std::to_string(stage) + " world " + std::to_string(world) + " " + kind_of(o) + " " +
                 plan[i].loader + ": " + b.what);
    ++tally.cases;
    for (int rank = 1; rank < world; ++rank)
      EXPECT_EQ(seen[rank][i].outcome, seen[0][i].outcome) << "rank " << rank << " and rank 0 differ";
    for (int rank = 0; rank < world; ++rank) {
      const Seen& s = seen[rank][i];
      if (b.valid) {
        EXPECT_EQ(s.outcome, "ok") << "rank " << rank << " refused a valid input";
        continue;
      }
      EXPECT_NE(s.outcome, "ok") << "rank " << rank << " accepted it";
      bool named = false;
      for (const auto& n : b.names) named = named || s.outcome.find(n) != std::string::npos;
      EXPECT_TRUE(named) << "rank " << rank << ": the message does not name '" << b.names.front()
                         << "': " << s.outcome;
      EXPECT_TRUE(s.unchanged) << "rank " << rank << ": a refused load changed the state (" << s.outcome
                               << ")";
    }
    if (!b.valid) ++tally.refused;
  }
}

}  // namespace

TEST(BadInputCorpus, EveryLoaderGivesTheSameOutcomeOnEveryRankAndARefusalChangesNothing) {
  const auto t0 = Clock::now();
  const std::string dir = ::testing::TempDir() + "/bad_input_corpus_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Tally tally;
  for (Opt o : {Opt::AdamW, Opt::SGD}) {
    const auto files = checkpoint_corpus(o, dir + "/" + kind_of(o));
    for (int stage : {0, 1, 2, 3})
      for (int world : {2, 3}) run_corpus(stage, world, o, files, tally);
  }
  std::filesystem::remove_all(dir);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("bad-input corpus: %d cases (%d refused, %d valid), each on every rank, in %.1f s\n",
              tally.cases, tally.refused, tally.cases - tally.refused, s);
}

// ---- constructors ----

// Sequential{ "0": Sequential{ "0.0": Linear, "0.1": ReLU }, "1": Linear }.
std::shared_ptr<nn::Module> nested() {
  nn::manual_seed(3);
  auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 8, true, DType::F64), std::make_shared<nn::ReLU>()});
  return std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{inner, std::make_shared<nn::Linear>(8, 5, true, DType::F64)});
}

TEST(BadInputCorpus, EveryConstructorGivesTheSameOutcomeOnEveryRank) {
  struct Ctor {
    std::string what;
    std::function<void(int rank, int world, dist::ProcessGroup&, dist::Store&, const std::string& tag)> build;
    std::string refusal;  // words of the message; "" = must succeed
  };
  std::vector<Ctor> cases;
  auto sharded = [&](const std::string& what, ShardOptions base, bool with_gather_group,
                     std::string refusal) {
    cases.push_back({what,
                     [base, with_gather_group](int rank, int world, dist::ProcessGroup& pg,
                                               dist::Store& store, const std::string& tag) {
                       ShardOptions o = base;
                       if (with_gather_group)
                         o.gather_group = gather_group(rank, world, store, "gather" + tag);
                       ShardedDataParallel sdp(nested(), borrow(pg), o);
                     },
                     std::move(refusal)});
  };
  // ShardOptions::units, generated over the model's module names: every single name, every pair, and each
  // name misspelled; the expected outcome from what the name is.
  const std::vector<std::string> names = {"0", "0.0", "0.1", "1"};
  auto holds_params = [](const std::string& n) { return n != "0.1"; };
  auto inside = [](const std::string& a, const std::string& b) { return a.rfind(b + ".", 0) == 0; };
  for (const auto& a : names) {
    ShardOptions o;
    o.stage = 3;
    o.units = {a};
    sharded("units {" + a + "}", o, true, holds_params(a) ? "" : "\"" + a + "\", which holds no parameters");
    o.units = {a + "x"};
    sharded("units {" + a + "x}", o, true, "\"" + a + "x\", which is no module of the model");
    o.stage = 2;
    o.units = {a};
    sharded("zero2 units {" + a + "}", o, false, "");  // ZeRO-3's option, unused by ZeRO-2 (as prefetch)
    for (const auto& b : names) {
      if (a >= b) continue;
      o.stage = 3;
      o.units = {a, b};
      std::string refusal;
      if (inside(b, a))
        refusal = "\"" + b + "\", which is inside unit \"" + a + "\"";
      else if (!holds_params(a))
        refusal = "\"" + a + "\", which holds no parameters";
      else if (!holds_params(b))
        refusal = "\"" + b + "\", which holds no parameters";
      sharded("units {" + a + ", " + b + "}", o, true, refusal);
    }
  }
  for (int stage : {-1, 0, 1, 4}) {
    ShardOptions o;
    o.stage = stage;
    sharded("stage " + std::to_string(stage), o, false, "ZeRO stage " + std::to_string(stage));
  }
  {
    ShardOptions o;
    o.stage = 3;
    o.prefetch = -1;
    sharded("prefetch -1", o, true, "prefetch -1");
    o.prefetch = 1;
    sharded("zero3 without a gather group", o, false, "ZeRO-3 needs ShardOptions::gather_group");
    o.stage = 2;
    o.gather_bf16 = true;
    sharded("zero2 gather_bf16", o, false, "gather_bf16 is for ZeRO-3 only");
    o.gather_bf16 = false;
    o.ddp.gradient_as_bucket_view = true;
    sharded("zero2 gradient_as_bucket_view", o, false, "gradient_as_bucket_view");
    o.ddp.gradient_as_bucket_view = false;
    o.ddp.comm_hook = std::make_shared<AllreduceHook>();
    sharded("zero2 comm hook", o, false, "comm hook");
  }
  auto zero1 = [&](const std::string& what, std::function<std::vector<nn::NamedTensor>()> params,
                   std::string refusal) {
    cases.push_back({what,
                     [params](int, int, dist::ProcessGroup& pg, dist::Store&, const std::string&) {
                       optim::ZeroRedundancyOptimizer z(
                           params(), borrow(pg), [](auto ps) { return make_optimizer(Opt::AdamW, ps); });
                     },
                     std::move(refusal)});
  };
  zero1(
      "zero1 over the model", [] { return mlp()->named_parameters(); }, "");
  zero1(
      "zero1 over no parameters", [] { return std::vector<nn::NamedTensor>{}; }, "no parameters");
  zero1(
      "zero1 over mixed dtypes",
      [] {
        auto ps = mlp()->named_parameters();
        ps.push_back({"f32", Tensor::zeros({4}, DType::F32)});
        return ps;
      },
      "parameter f32 is float32");

  const auto t0 = Clock::now();
  int runs = 0;
  for (int world : {2, 3}) {
    std::vector<std::vector<std::string>> seen(world, std::vector<std::string>(cases.size()));
    dist::run_threads(
        world,
        [&](int rank, dist::ProcessGroup& pg, dist::Store& store) {
          for (size_t i = 0; i < cases.size(); ++i) {
            try {
              cases[i].build(rank, world, pg, store, std::to_string(i));
              seen[rank][i] = "ok";
            } catch (const Error& e) {
              seen[rank][i] = e.what();
            }
          }
        },
        dist::ProcessGroupOptions{}, "gloo");
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("world " + std::to_string(world) + ": " + cases[i].what);
      ++runs;
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(seen[rank][i], seen[0][i]) << "rank " << rank << " and rank 0 differ";
        if (cases[i].refusal.empty())
          EXPECT_EQ(seen[rank][i], "ok") << "rank " << rank;
        else
          EXPECT_NE(seen[rank][i].find(cases[i].refusal), std::string::npos)
              << "rank " << rank << ": " << seen[rank][i];
      }
    }
  }
  std::printf("constructor corpus: %d cases, each on every rank, in %.1f s\n", runs,
              std::chrono::duration<double>(Clock::now() - t0).count());
}
