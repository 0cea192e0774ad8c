// train_ft.cpp - the fault-tolerant training loop (see train_ft.h; the protocol: docs/fault-tolerance.md).
#include "models/train_ft.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "models/make_model.h"
#include "models/train_ft_zero.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/training_checkpoint.h"
#include "models/train_setup.h"
#include "runtime/autograd/engine.h"
#include "runtime/core/env_number.h"
#include "runtime/core/error.h"
#include "runtime/data/distributed_sampler.h"
#include "runtime/data/elastic_sampler.h"
#include "runtime/ddp/distributed_data_parallel.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/ft_client.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/tensor_comm_buffer.h"
#include "runtime/distributed/process_group_factory.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/trace/trace.h"

namespace ddp::models {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A whole-number setting from the environment (a bad value is an error naming it), or `fallback` when unset.
int env_int(const char* name, int fallback) {
  return static_cast<int>(integer_from_env(name, 0, 1 << 30, "a non-negative whole number").value_or(fallback));
}

// The collective timeout of each epoch's process group (DDP_COLLECTIVE_TIMEOUT_S, default 60 s).
std::chrono::milliseconds collective_timeout() {
  return std::chrono::seconds(env_int("DDP_COLLECTIVE_TIMEOUT_S", 60));
}

// The run's record (FtRunOptions::log_dir): one file per process, each line written with one write() on an
// O_APPEND descriptor, so a process killed with SIGKILL leaves every line it wrote before.
class FtRecord {
 public:
  FtRecord(const std::string& dir, int slot, int incarnation) {
    if (dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    path_ = dir + "/ft.slot" + std::to_string(slot) + ".inc" + std::to_string(incarnation) + ".log";
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    DDP_CHECK(fd_ >= 0, "--ft-log: cannot create ", path_, ": ", std::strerror(errno));
  }
  ~FtRecord() {
    if (fd_ >= 0) ::close(fd_);
  }
  FtRecord(const FtRecord&) = delete;
  FtRecord& operator=(const FtRecord&) = delete;
  void line(const std::string& s) {
    if (fd_ < 0) return;
    const std::string l = s + "\n";
    (void)!::write(fd_, l.data(), l.size());
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

optim::WarmupCosine ft_schedule(const TrainOptions& o, int64_t epoch_size, int launch_world) {
  const int64_t per_epoch = (epoch_size + launch_world * o.batch_size - 1) / (launch_world * o.batch_size);
  const int64_t total = o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs) * per_epoch;
  return optim::WarmupCosine{o.lr, o.lr * o.min_lr_ratio, std::min(o.warmup_steps, total), total,
                             o.schedule != "constant"};
}

namespace {

void check_ft_options(const TrainOptions& o) {
  auto refuse = [](bool bad, const char* flag, const char* why) {
    DDP_CHECK(!bad, "--fault-tolerant does not take ", flag, ": ", why);
  };
  refuse(o.zero >= 2, "--zero 2/3",
         "ZeRO-2/3 keep gradient (and parameter) shards on one rank only, so a lost rank would take them with "
         "it; use --zero 1 (each optimizer shard also lives on a buddy rank) or no --zero");
  refuse(o.zero == 1 && (!o.checkpoint_dir.empty() || !o.resume.empty()), "--checkpoint-dir or --resume with --zero 1",
         "not yet: a ZeRO-1 checkpoint gathers the shards, a collective the writer cannot make alone; "
         "without --zero they work");
  refuse(o.grad_accum != 1, "--grad-accum > 1", "a step is one micro-batch per rank; raise --batch-size instead");
  refuse(o.sync_bn, "--sync-bn", "SyncBatchNorm's statistics all-reduce in forward is a second collective per "
         "step the recovery does not cover yet");
  refuse(o.deterministic, "--deterministic", "the two modes deal data differently (docs/determinism.md)");
  refuse(o.comm_hook != "allreduce", "--comm-hook", "PowerSGD's error feedback is per-rank state a replacement "
         "could not receive; use the default allreduce");
  refuse(o.uneven_steps != 0, "--uneven-steps", "every member runs every step (the sampler deals the data)");
  refuse(o.reset_optimizer, "--reset-optimizer", "a fault-tolerant resume takes the whole state of its checkpoint");
  refuse(o.gradient_as_bucket_view, "--gradient-as-bucket-view", "the buckets are rebuilt with every group");
}

class FtTrainer {
 public:
  FtTrainer(const TrainOptions& o, const dist::DistEnv& env, std::string backend, const FtRunOptions& ft)
      : o_(o),
        env_(env),
        backend_(std::move(backend)),
        ft_(ft),
        slot_(env_int("DDP_FT_SLOT", env.rank)),
        incarnation_(env_int("DDP_FT_INCARNATION", 0)),
        deadline_(env_int("DDP_FT_HEARTBEAT_TIMEOUT_MS", 2000)),
        record_(ft.log_dir, slot_, incarnation_) {}

  TrainResult run();

 private:
  void connect();
  void build_model();
  bool done() const { return o_.steps > 0 ? step_ >= o_.steps : data_epoch_ >= std::max<int64_t>(1, o_.epochs); }
  // Builds the group of membership `m`, heals the state from the member with the most committed steps, and
  // rebuilds DDP. Throws when the membership moves on meanwhile (the caller starts over with the new one).
  void recover(const dist::ft::Membership& m);
  void wait_for_members(const dist::ft::Membership& m);
  void sync_state(dist::ProcessGroup& pg, int64_t epoch);
  double attempt_step();
  // A step or a recovery failed: the membership change that explains it (bounded wait), or the error.
  void after_failure(const std::exception& e, int64_t epoch);
  void die_if(const char* phase, int64_t step);
  void die_now(const char* phase, int64_t step);
  void zero_grad() {
    if (zero1_)
      zero1_->zero_grad();
    else
      optimizer_->zero_grad();
  }
  void set_group(std::shared_ptr<dist::ProcessGroup> pg, int64_t epoch);
  void write_final(TrainResult& result);
  // The coordinator saw every member of this rank's epoch finished (ft_membership.h, kFinishedKey).
  bool coordinator_says_finished();
  // --checkpoint-dir: rank 0 of the current group writes the state it holds (every member holds the same),
  // atomically; no collective, so a writer that dies mid-write costs the others nothing.
  void save_checkpoint();
  // --resume: every member that starts with the job reads the same file (a replacement heals from a peer).
  void resume();

  const TrainOptions& o_;
  dist::DistEnv env_;
  std::string backend_;
  FtRunOptions ft_;
  int slot_, incarnation_;
  std::chrono::milliseconds deadline_;
  FtRecord record_;

  std::shared_ptr<dist::Store> store_;
  std::unique_ptr<dist::ft::Client> client_;
  TrainData data_;
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu();
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;   // without --zero
  std::unique_ptr<FtZeroOne> zero1_;              // --zero 1 (rebuilt over each epoch's group)
  optim::WarmupCosine schedule_;

  std::mutex group_mu_;                    // pg_ and pg_epoch_: the heartbeat thread aborts the group
  std::shared_ptr<dist::ProcessGroup> pg_;
  int64_t pg_epoch_ = -1;
  int64_t group_epoch_ = -1;               // the epoch whose recovery completed (the main thread's)
  std::unique_ptr<DistributedDataParallel> ddp_;
  bool holds_state_ = true;                // a replacement holds none until its first recovery
  int64_t step_ = 0, data_epoch_ = 0, position_ = 0;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
  int last_world_ = 0;

  bool job_finished_ = false;  // a replacement that came too late: the job ended before it could join
  // DDP_FT_TEST_STEP_SLEEP_MS (tests only): each step sleeps this long, so a replacement that takes a second to
  // start joins a run of a tiny model mid-way.
  int test_step_sleep_ms_ = env_int("DDP_FT_TEST_STEP_SLEEP_MS", 0);
  int64_t attempts_lost_ = 0;
  std::vector<double> recover_s_;
  Clock::time_point failure_seen_{};
  bool failure_pending_ = false;
};

void FtTrainer::die_now(const char* phase, int64_t step) {
  std::fprintf(stderr, "fault injection: rank %d (incarnation %d) kills itself in %s of step %lld\n", slot_,
               incarnation_, phase, static_cast<long long>(step));
  std::fflush(stderr);
  std::fflush(stdout);
  ::raise(SIGKILL);
}

void FtTrainer::die_if(const char* phase, int64_t step) {
  for (const auto& f : ft_.faults) {
    const bool at_step = std::string(phase) == "recovery" ? step >= f.step : step == f.step;
    if (f.slot == slot_ && f.incarnation == incarnation_ && f.step == step && f.phase == "stall" &&
        std::string(phase) == "forward") {
      // Slow but alive: longer than the heartbeat deadline, in the step; the heartbeat thread goes on beating.
      std::fprintf(stderr, "fault injection: rank %d stalls for %lld ms in step %lld\n", slot_,
                   static_cast<long long>(3 * deadline_.count()), static_cast<long long>(step));
      std::this_thread::sleep_for(3 * deadline_);
    }
    if (f.slot == slot_ && f.incarnation == incarnation_ && at_step && f.phase == phase) die_now(phase, step);
  }
}

void FtTrainer::connect() {
  DDP_CHECK(env_.launcher_hosts_store,
            "--fault-tolerant needs the store of `ddprun --fault-tolerant` (DDP_STORE=agent): a store hosted by "
            "rank 0 would die with it. Run: ddprun --fault-tolerant --nproc-per-node N train --fault-tolerant ...");
  dist::StoreAddress a;
  a.host = env_.master_addr;
  a.port = env_.master_port;
  a.token = env_.token;
  a.job_id = env_.job_id;
  try {
    store_ = std::make_shared<dist::Store>(a, std::max(std::chrono::milliseconds(2000), 5 * deadline_));
  } catch (const std::exception& e) {
    DDP_FAIL("fault tolerance: rank ", slot_, " (incarnation ", incarnation_, ") cannot reach ddprun's store at ",
             a.host, ":", a.port, ": ", e.what());
  }
  dist::ft::ClientOptions co;
  co.slot = slot_;
  co.incarnation = incarnation_;
  co.deadline = deadline_;
  // A twentieth of the deadline (100 ms by default); DDP_FT_HEARTBEAT_PERIOD_MS (benchmarks) sets it.
  co.period = std::chrono::milliseconds(
      env_int("DDP_FT_HEARTBEAT_PERIOD_MS", static_cast<int>(std::max<int64_t>(10, deadline_.count() / 20))));
  client_ = std::make_unique<dist::ft::Client>(store_->clone(), co);
  client_->on_change([this](const std::string& why) {
    const int64_t newest = client_->latest().epoch;
    std::lock_guard<std::mutex> lock(group_mu_);
    if (pg_ && (pg_epoch_ < newest || !client_->coordinator_lost().empty())) pg_->abort(why);
  });
  holds_state_ = incarnation_ == 0;
  record_.line("start " + std::to_string(env_.world_size) + " " + std::to_string(data_.train->size()));
}

void FtTrainer::build_model() {
  data_ = load_data(o_);
  dtype_ = o_.dtype == "float64" ? DType::F64 : DType::F32;
  // --device: this local rank's GPU for cuda/auto (the group is NCCL then: the same recovery, abort by
  // ncclCommAbort); the CPU otherwise.
  device_ = device_for_rank(o_.device, train_local_rank(env_.local_rank), cuda_device_count());
  if (device_.is_cuda()) set_current_cuda_device(device_.index);
  nn::manual_seed(o_.seed);
  model_ = make_model(o_, dtype_);
  model_->to(device_);
  if (o_.zero == 1)
    zero1_ = std::make_unique<FtZeroOne>(o_, model_);
  else
    optimizer_ = make_train_optimizer(o_, model_->named_parameters());
  schedule_ = ft_schedule(o_, data_.train->size(), env_.world_size);
}

void FtTrainer::set_group(std::shared_ptr<dist::ProcessGroup> pg, int64_t epoch) {
  std::lock_guard<std::mutex> lock(group_mu_);
  pg_ = std::move(pg);
  pg_epoch_ = epoch;
  if (pg_ && client_->latest().epoch > epoch) pg_->abort("membership epoch " + std::to_string(client_->latest().epoch));
}

// Every member says it is here before anyone builds the group: the group's rendezvous waits on store keys
// and cannot be interrupted, so a member lost before it would hold the others until the timeout; this wait
// polls and gives up as soon as a newer epoch is published.
void FtTrainer::wait_for_members(const dist::ft::Membership& m) {
  const std::string base = "ft/here/" + std::to_string(m.epoch) + "/";
  store_->set(base + std::to_string(slot_), "1");
  const auto wait = dist::ft::member_arrival_wait(deadline_, collective_timeout());
  const auto limit = Clock::now() + wait;
  for (const auto& member : m.members) {
    while (!store_->try_get(base + std::to_string(member.slot))) {
      DDP_CHECK(client_->latest().epoch == m.epoch, "membership epoch ", m.epoch, " was replaced while its members gathered");
      DDP_CHECK(client_->coordinator_lost().empty(), client_->coordinator_lost());
      DDP_CHECK(Clock::now() < limit, "fault tolerance: rank ", member.slot, " did not arrive for membership epoch ",
                m.epoch, " within ", std::chrono::duration_cast<std::chrono::seconds>(wait).count(), " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

void FtTrainer::recover(const dist::ft::Membership& m) {
  const auto t0 = Clock::now();
  DDP_CHECK(!m.failed, "fault tolerance: ", m.reason);
  const auto me = m.member_of(slot_);
  if (!me || me->incarnation != incarnation_) {
    DDP_CHECK(!holds_state_, "fault tolerance: rank ", slot_, " (incarnation ", incarnation_,
              ") was removed from the job at membership epoch ", m.epoch, " (", m.reason, "); it stops here");
    // A replacement waits to be let in at a step boundary - unless the job is ending (a member finished).
    const auto limit = Clock::now() + std::chrono::seconds(120);
    while (!client_->wait_for_epoch_after(m.epoch, std::chrono::milliseconds(50))) {
      DDP_CHECK(client_->coordinator_lost().empty(), client_->coordinator_lost());
      for (const auto& member : m.members) {
        const auto hb = store_->try_get(dist::ft::heartbeat_key(member.slot));
        const auto beat = hb ? dist::ft::Heartbeat::decode(*hb) : std::nullopt;
        if (beat && beat->beat == dist::ft::Heartbeat::kFinished) {
          // The job is finishing. Leave - unless the coordinator let this rank in first (then an epoch with it
          // is on its way, and the members, finished or not, will recover with it).
          const std::string admit = dist::ft::admit_key(slot_, incarnation_);
          if (store_->compare_set(admit, "", dist::ft::kGaveUp) == dist::ft::kGaveUp) {
            job_finished_ = true;
            return;
          }
          break;
        }
      }
      DDP_CHECK(Clock::now() < limit, "fault tolerance: replacement rank ", slot_, " (incarnation ", incarnation_,
                ") was not let in within 120 s (newest epoch ", m.epoch, ": ", m.reason, ")");
    }
    return;
  }
  const int rank = m.rank_of(slot_), world = m.size();
  // The group of the epoch before: aborted (its collectives end now), then destroyed with DDP.
  {
    std::lock_guard<std::mutex> lock(group_mu_);
    if (pg_) pg_->abort("membership epoch " + std::to_string(m.epoch) + ": " + m.reason);
  }
  ddp_.reset();
  set_group(nullptr, -1);
  zero_grad();
  wait_for_members(m);
  dist::DistEnv e = env_;
  e.rank = rank;
  e.world_size = world;
  e.local_world_size = std::min(env_.local_world_size, world);
  e.local_rank = std::min(env_.local_rank, e.local_world_size - 1);
  dist::ProcessGroupOptions po;
  po.name = dist::ft::group_name_of_epoch(m.epoch);
  po.timeout = collective_timeout();
  auto pg = dist::new_process_group(e, store_, backend_, po);
  set_group(pg, m.epoch);
  sync_state(*pg, m.epoch);
  DDPOptions dopt;
  dopt.bucket_cap_mb = o_.bucket_cap_mb;
  dopt.first_bucket_mb = o_.first_bucket_mb;
  dopt.find_unused_parameters = o_.find_unused_parameters;
  dopt.static_graph = o_.static_graph;
  dopt.advice.iteration = "step";
  ddp_ = std::make_unique<DistributedDataParallel>(model_, pg, dopt);
  ddp_->reducer().number_iterations_from(step_ + 1);
  group_epoch_ = m.epoch;
  const double took = seconds_since(t0);
  if (m.epoch > 0) {
    recover_s_.push_back(took);
    const std::string since_failure =
        failure_pending_ ? ", " + std::to_string(seconds_since(failure_seen_)).substr(0, 5) + " s after the failure" : "";
    failure_pending_ = false;
    record_.line("recovered " + std::to_string(m.epoch) + " " + std::to_string(step_) + " " + std::to_string(world));
    if (rank == 0 && !o_.quiet) {
      std::printf("step %lld: %s; step %lld %s over world %d (recovered in %.3f s%s)\n",
                  static_cast<long long>(step_), m.reason.c_str(), static_cast<long long>(step_ + 1),
                  last_world_ > 0 ? "redone" : "runs", world, took, since_failure.c_str());
      std::fflush(stdout);
    }
    trace::trace_instant("membership epoch " + std::to_string(m.epoch) + ": " + m.reason, "ft");
  }
  last_world_ = world;
}

void FtTrainer::sync_state(dist::ProcessGroup& pg, int64_t epoch) {
  die_if("recovery", epoch > 0 ? step_ + 1 : -1);
  dist::FlightIssuer who("ft state sync");
  auto agree = [&](int64_t v, dist::ReduceOp op) {
    Tensor t = Tensor::from_data<int64_t>({v}, {1});
    host_allreduce(pg, t, op);
    return t.data<int64_t>()[0];
  };
  const int64_t newest = agree(holds_state_ ? step_ : -1, dist::ReduceOp::Max);
  DDP_CHECK(newest >= 0, "fault tolerance: no member of membership epoch ", epoch,
            " holds the training state (every rank that trained before was lost); restart the job");
  const int64_t source = agree(holds_state_ && step_ == newest ? pg.rank() : pg.size(), dist::ReduceOp::Min);
  const int root = static_cast<int>(source);
  // --zero 1: what this rank holds of the optimizer state at `newest` (which may put its parameters back to
  // before a step nobody committed) - before anything is broadcast.
  std::map<std::string, Tensor> held;
  if (zero1_) held = zero1_->state_at(newest, holds_state_ ? step_ : -2);
  const int64_t opt_steps = zero1_ ? zero1_->steps() : optimizer_->steps();
  Tensor scalars = Tensor::from_data<int64_t>({step_, data_epoch_, position_, opt_steps}, {4});
  // A rank behind the source is about to have its parameters overwritten; should this transfer break off
  // half-way, they are a mix of two steps, and it must not be anyone's source in the next try.
  if (pg.rank() != root && step_ != newest) holds_state_ = false;
  host_broadcast(pg, scalars, root);
  for (auto& p : model_->named_parameters()) broadcast_tensor(pg, p.tensor, root);
  for (auto& b : model_->named_buffers()) broadcast_tensor(pg, b.tensor, root);
  const int64_t* s = scalars.data<int64_t>();
  if (!zero1_) {
    // The whole optimizer state from the source (a replacement has none yet).
    auto received = broadcast_state_map(pg, optimizer_->state(), root, device_);
    if (pg.rank() != root) optimizer_->load_state(received, s[3]);
  } else {
    // ZeRO-1: every parameter's state from the lowest rank that holds it at `newest` (its owner or its buddy
    // of the world before), then ZeRO-1 and the buddy shard over this group.
    std::map<std::string, Tensor> full;
    for (int r = 0; r < pg.size(); ++r)
      for (auto& [k, t] : broadcast_state_map(pg, held, r, device_)) full.emplace(k, t);
    if (newest > 0) {
      std::vector<std::string> lost;
      const bool stateful = !full.empty();
      for (auto& p : model_->named_parameters()) {
        bool has = false;
        for (auto it = full.lower_bound(p.name + "."); it != full.end() && it->first.rfind(p.name + ".", 0) == 0; ++it)
          has = has || it->first.find('.', p.name.size() + 1) == std::string::npos;
        if (stateful && !has) lost.push_back(p.name);
      }
      DDP_CHECK(lost.empty(), "fault tolerance, --zero 1: the optimizer state of ", lost.size(), " parameter(s) (",
                lost.front(), ", ...) is lost: the rank that owned it and its buddy were both lost in membership "
                "epoch ", epoch, ". Restart the job (or run without --zero: every rank then holds the whole state)");
    }
    zero1_->rebuild(pg_, full, s[3]);
  }
  step_ = s[0];
  data_epoch_ = s[1];
  position_ = s[2];
  holds_state_ = true;
  client_->set_committed_step(step_);
}

double FtTrainer::attempt_step() {
  const int world = pg_->size(), rank = pg_->rank();
  const int64_t n = data_.train->size();
  if (order_epoch_ != data_epoch_) {
    order_ = data::DistributedSampler::permutation(n, o_.seed + static_cast<uint64_t>(data_epoch_));
    order_epoch_ = data_epoch_;
  }
  const data::ElasticShare share = data::elastic_share(n, position_, world, rank, o_.batch_size);
  const double weight = share.loss_weight(world);
  std::vector<int64_t> ids(order_.begin() + share.begin, order_.begin() + share.end);
  if (ids.empty()) ids.push_back(order_[static_cast<size_t>(share.step_begin)]);  // weight 0: takes part only
  const int64_t number = step_ + 1;
  {
    std::string l = "attempt " + std::to_string(group_epoch_) + " " + std::to_string(number) + " " +
                    std::to_string(data_epoch_) + " " + std::to_string(world) + " " + std::to_string(rank) + " " +
                    std::to_string(share.step_rows()) + " :";
    for (int64_t i = share.begin; i < share.end; ++i) {
      l.push_back(' ');
      l.append(std::to_string(order_[static_cast<size_t>(i)]));
    }
    record_.line(l);
  }
  dist::set_flight_iteration(number);
  die_if("forward", number);
  if (test_step_sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_step_sleep_ms_));
  const double lr = schedule_.at(step_);
  if (optimizer_) optimizer_->set_lr(lr);
  data::DatasetBatch b = data_.train->get_batch(ids);
  Tensor x = b.x, y = b.y;
  if (!data_.tokens && x.dtype() != dtype_) x = x.to(dtype_);
  if (device_.is_cuda()) {
    x = x.to(device_);
    y = y.to(device_);
  }
  Tensor loss = ops::cross_entropy(ddp_->forward(x), y);
  const double value = loss.item();
  if (weight != 1.0) loss = loss * weight;
  bool kill_in_backward = false;
  for (const auto& f : ft_.faults)
    kill_in_backward |= f.slot == slot_ && f.incarnation == incarnation_ && f.step == number && f.phase == "backward";
  Tensor first = model_->parameters().front();
  if (kill_in_backward)  // the first layer's gradient comes last: the later layers' buckets are in flight
    first.impl()->add_post_accumulate_hook(this, [this, number](TensorImpl&) { die_if("backward", number); });
  autograd::backward(loss);
  if (kill_in_backward) first.impl()->remove_post_accumulate_hooks(this);
  if (o_.clip_grad > 0) optim::clip_grad_norm_tensor_(model_->parameters(), o_.clip_grad);  // not read
  die_if("optimizer", number);
  if (zero1_) {
    zero1_->step(lr);  // the buddy shard, then ZeRO-1's own shard and its broadcasts
  } else {
    optimizer_->step();
  }
  zero_grad();
  die_if("commit", number);
  if (zero1_) zero1_->committed();
  step_ = number;
  position_ = share.step_end;
  if (position_ == n) {
    ++data_epoch_;
    position_ = 0;
  }
  client_->set_committed_step(step_);
  record_.line("commit " + std::to_string(group_epoch_) + " " + std::to_string(number));
  return value;
}

void FtTrainer::after_failure(const std::exception& e, int64_t epoch) {
  if (!failure_pending_) {
    failure_pending_ = true;
    failure_seen_ = Clock::now();
  }
  const std::string lost = client_->coordinator_lost();
  DDP_CHECK(lost.empty(), "fault tolerance: ", lost, "; the job cannot go on without it (the store lives there)");
  const auto wait = 2 * deadline_ + std::chrono::seconds(2);
  if (client_->wait_for_epoch_after(epoch, wait)) return;
  const std::string lost_now = client_->coordinator_lost();
  DDP_CHECK(lost_now.empty(), "fault tolerance: ", lost_now);
  DDP_FAIL(e.what(), "\n(fault tolerance: no rank was lost or joined within ",
           std::chrono::duration_cast<std::chrono::milliseconds>(wait).count(),
           " ms of this error, so it is not one a membership change repairs)");
}


void FtTrainer::save_checkpoint() {
  const std::string name = "ckpt-step" + std::to_string(step_) + ".safetensors";
  const std::string file = o_.checkpoint_dir + "/" + name;
  std::thread killer;
  for (const auto& f : ft_.faults) {
    if (f.slot != slot_ || f.incarnation != incarnation_ || f.step != step_ || f.phase != "checkpoint") continue;
    // The fault lands while the file is being written: as soon as its temp file (or the file) exists.
    killer = std::thread([file, this] {
      const std::string temp = checkpoint::atomic_temp_path(file);
      for (int i = 0; i < 250000; ++i) {
        std::error_code ec;
        if (std::filesystem::exists(temp, ec) || std::filesystem::exists(file, ec)) break;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      die_now("checkpoint", step_);
    });
  }
  std::filesystem::create_directories(o_.checkpoint_dir);
  checkpoint::remove_stale_temp_files(o_.checkpoint_dir);
  checkpoint::TrainingState st{step_, data_epoch_, 0, o_.seed, options_json(o_),
                               {{"data_rule", "elastic"}, {"ft_position", std::to_string(position_)}}, {}};
  checkpoint::save_training_checkpoint(file, *model_, optimizer_.get(), st);
  checkpoint::write_latest(o_.checkpoint_dir, name);
  record_.line("checkpoint " + std::to_string(step_) + " " + name);
  if (killer.joinable()) killer.join();
}

void FtTrainer::resume() {
  const std::string path =
      o_.resume == "auto" ? checkpoint::read_latest(o_.checkpoint_dir) : o_.resume;
  checkpoint::LoadOptions load;
  load.live_config = options_json(o_);
  const checkpoint::TrainingState st = checkpoint::load_training_checkpoint(path, *model_, optimizer_.get(), load);
  const auto rule = st.extra.find("data_rule");
  const auto pos = st.extra.find("ft_position");
  DDP_CHECK(rule != st.extra.end() && rule->second == "elastic" && pos != st.extra.end(), "checkpoint '", path,
            "' was not written by train --fault-tolerant: the two modes count the data position differently; "
            "resume it without --fault-tolerant");
  DDP_CHECK(st.seed == o_.seed, "checkpoint ", path, " was written with --seed ", st.seed, ", this run has --seed ",
            o_.seed, "; resume with the same seed");
  step_ = st.step;
  data_epoch_ = st.epoch;
  position_ = std::stoll(pos->second);
  record_.line("resumed " + std::to_string(step_) + " " + path);
  if (slot_ == 0 && !o_.quiet) {
    std::printf("resumed from %s at step %lld (epoch %lld, sample %lld of its order)\n", path.c_str(),
                static_cast<long long>(step_), static_cast<long long>(data_epoch_), static_cast<long long>(position_));
    std::fflush(stdout);
  }
}

bool FtTrainer::coordinator_says_finished() {
  const auto text = store_->try_get(dist::ft::kFinishedKey);
  return text && std::stoll(*text) == group_epoch_;
}

void FtTrainer::write_final(TrainResult& result) {
  std::vector<double> all;
  for (auto& p : model_->named_parameters()) {
    result.final_params.push_back(p.tensor.to_double_vector());
    all.insert(all.end(), result.final_params.back().begin(), result.final_params.back().end());
  }
  if (ft_.log_dir.empty()) return;
  const std::string path = ft_.log_dir + "/final.slot" + std::to_string(slot_) + ".inc" + std::to_string(incarnation_) + ".bin";
  FILE* f = std::fopen(path.c_str(), "wb");
  DDP_CHECK(f != nullptr, "--ft-log: cannot write ", path);
  std::fwrite(all.data(), sizeof(double), all.size(), f);
  std::fclose(f);
}

TrainResult FtTrainer::run() {
  const auto t_start = Clock::now();
  check_ft_options(o_);
  ops::Bf16Compute bf16_compute(o_.dtype == "bfloat16");  // --dtype bfloat16: bf16 matmul/linear/attention
  // Data and model first: a replacement is let in once it beats, and the others wait for it from then on.
  build_model();
  connect();
  if (!o_.resume.empty() && holds_state_) resume();
  std::vector<double> step_times;
  double last_loss = 0;
  // --trace: each process writes its own Chrome trace (trace.rank<slot>[.inc<i>].json: a replacement is another
  // process), with the steps as iterations and an instant event at each membership change; not merged (merging
  // is a collective, and the membership may be down to one).
  auto& tracer = trace::global_tracer();
  if (!o_.trace.empty()) {
    tracer.set_rank(slot_);
    tracer.set_world_size(env_.world_size);
    tracer.set_enabled(true);
  }
  Clock::time_point finished_at{};
  while (!job_finished_) {
    const dist::ft::Membership m = client_->latest();
    if (m.epoch != group_epoch_) {
      try {
        recover(m);
      } catch (const std::exception& e) {
        after_failure(e, m.epoch);
      }
      continue;
    }
    if (done()) {
      // Finished here - but a member may still need this rank's state: one aborted in the last step (by a
      // change that came at the very end) heals from the ranks that committed it. So this rank says it has
      // finished (no one joins any more) and leaves only once the coordinator says every member of its epoch
      // has, taking part in any recovery meanwhile.
      if (finished_at == Clock::time_point{}) {
        finished_at = Clock::now();
        client_->mark_finished();
      }
      if (coordinator_says_finished() || !client_->coordinator_lost().empty() ||
          Clock::now() - finished_at > std::chrono::seconds(120))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const auto t0 = Clock::now();
    if (!o_.trace.empty()) tracer.begin_iteration(step_ + 1);
    try {
      last_loss = attempt_step();
      if (!o_.trace.empty()) tracer.end_iteration(step_);
    } catch (const std::exception& e) {
      ++attempts_lost_;
      zero_grad();
      after_failure(e, group_epoch_);
      continue;
    }
    step_times.push_back(seconds_since(t0));
    if (!o_.checkpoint_dir.empty() && pg_->rank() == 0 &&
        ((o_.checkpoint_interval > 0 && step_ % o_.checkpoint_interval == 0) || done()))
      save_checkpoint();
    const bool log_now = o_.log_interval > 0 && step_ % o_.log_interval == 0;
    if (log_now && pg_->rank() == 0 && !o_.quiet) {
      std::printf("step %5lld  loss %.4f (rank %d)  world %d  epoch %lld  step %.1f ms\n",
                  static_cast<long long>(step_), last_loss, slot_, pg_->size(),
                  static_cast<long long>(data_epoch_), step_times.back() * 1e3);
      std::fflush(stdout);
    }
  }
  if (!o_.trace.empty()) {
    std::string path = trace::rank_trace_path(o_.trace, slot_);
    if (incarnation_ > 0) path += ".inc" + std::to_string(incarnation_) + ".json";
    tracer.write_chrome_trace(path);
    tracer.set_enabled(false);
  }
  TrainResult result;
  if (job_finished_) {
    std::printf("fault tolerance: replacement rank %d (incarnation %d): the job finished before it could join\n",
                slot_, incarnation_);
    client_->finish();
    return result;
  }
  result.steps_done = step_;
  result.final_train_loss = last_loss;
  result.wall_s = seconds_since(t_start);
  write_final(result);
  const bool talk = pg_ && pg_->rank() == 0 && !o_.quiet;
  if (talk) {
    double recovered_total = 0, recovered_max = 0;
    for (double s : recover_s_) {
      recovered_total += s;
      recovered_max = std::max(recovered_max, s);
    }
    std::vector<double> sorted = step_times;
    std::sort(sorted.begin(), sorted.end());
    std::printf("\n== summary (fault-tolerant): %s, %lld steps in %.1f s, final world %d\n", o_.model.c_str(),
                static_cast<long long>(step_), result.wall_s, pg_->size());
    std::printf("   membership changes seen by rank %d: %zu; step attempts lost here: %lld; recovery %.3f s in all "
                "(longest %.3f s); median step %.1f ms\n",
                slot_, recover_s_.size(), static_cast<long long>(attempts_lost_), recovered_total, recovered_max,
                sorted.empty() ? 0.0 : sorted[sorted.size() / 2] * 1e3);
    std::printf("   heartbeats: %lld, %.1f ms of CPU on their thread (%.3f%% of the run's wall time)\n",
                static_cast<long long>(client_->beats()), client_->cpu_seconds() * 1e3,
                100 * client_->cpu_seconds() / std::max(1e-9, result.wall_s));
    std::fflush(stdout);
  }
  ddp_.reset();
  set_group(nullptr, -1);
  client_->finish();
  return result;
}
}  // namespace

std::vector<FtFault> parse_ft_faults(const std::string& spec) {
  std::vector<FtFault> out;
  std::istringstream all(spec);
  std::string one;
  while (std::getline(all, one, ';')) {
    if (one.empty()) continue;
    FtFault f;
    std::istringstream fields(one);
    std::string kv;
    while (std::getline(fields, kv, ',')) {
      const size_t eq = kv.find('=');
      DDP_CHECK(eq != std::string::npos, "--ft-fault: '", kv, "' in '", one, "' is not key=value");
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (k == "slot" || k == "rank")
        f.slot = std::stoi(v);
      else if (k == "incarnation")
        f.incarnation = std::stoi(v);
      else if (k == "step")
        f.step = std::stoll(v);
      else if (k == "phase")
        f.phase = v;
      else
        DDP_FAIL("--ft-fault: unknown key '", k, "' (expected slot, incarnation, step, phase)");
    }
    DDP_CHECK(f.slot >= 0, "--ft-fault: '", one, "' names no slot=");
    DDP_CHECK(f.phase == "forward" || f.phase == "backward" || f.phase == "optimizer" || f.phase == "commit" ||
                  f.phase == "recovery" || f.phase == "checkpoint" || f.phase == "stall",
              "--ft-fault: phase '", f.phase,
              "' is not forward, backward, optimizer, commit, recovery, checkpoint or stall");
    out.push_back(f);
  }
  return out;
}

TrainResult train_fault_tolerant(const TrainOptions& o, const dist::DistEnv& env, const std::string& backend,
                                 const FtRunOptions& ft) {
  FtTrainer t(o, env, backend, ft);
  return t.run();
}

}  // namespace ddp::models
