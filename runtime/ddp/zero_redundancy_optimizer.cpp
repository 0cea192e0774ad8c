// zero_redundancy_optimizer.cpp - the partition, the sharded step with its per-rank broadcasts (and its
// shadow on a rank that joined), and the consolidation of the shards for checkpoints.
#include "runtime/ddp/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime/autograd/node.h"
#include "runtime/ddp/join.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/ops/bf16_weight_cast.h"
#include "runtime/optim/state_check.h"
#include "runtime/optim/state_serialization.h"

namespace ddp::optim {

std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world) {
  DDP_CHECK(world >= 1, "partition_parameters: world size must be >= 1, got ", world);
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(world, 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());  // lowest on ties
    owner[i] = r;
    load[r] += numels[i];
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<nn::NamedTensor> params,
                                                 std::shared_ptr<dist::ProcessGroup> pg,
                                                 OptimizerFactory make_inner)
    : Optimizer(std::move(params), 0.0), pg_(std::move(pg)) {
  DDP_CHECK(pg_ != nullptr, "ZeroRedundancyOptimizer: no process group");
  DDP_CHECK(make_inner != nullptr, "ZeroRedundancyOptimizer: no inner optimizer factory");
  DDP_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: no parameters");
  DDP_CHECK(!join_attached_to(*pg_),
            "ZeroRedundancyOptimizer: a ddp::Join is already attached over this process group, and a rank "
            "that joins would not shadow this optimizer's broadcasts. Build the optimizer first and pass it "
            "to the Join: ddp::Join join(ddp, {.joinables = {&optimizer}})");
  const Tensor& first = params_.front().tensor;
  std::vector<int64_t> numels;
  for (auto& p : params_) {
    DDP_CHECK(p.tensor.dtype() == first.dtype() && p.tensor.device() == first.device(),
              "ZeroRedundancyOptimizer: parameter ", p.name, " is ", dtype_name(p.tensor.dtype()), " on ",
              p.tensor.device().str(), " but ", params_.front().name, " is ", dtype_name(first.dtype()), " on ",
              first.device().str(), "; the per-rank flat buffers need one dtype and device for all parameters");
    numels.push_back(p.tensor.numel());
  }
  owner_ = partition_parameters(numels, pg_->size());
  owned_.assign(pg_->size(), {});
  for (size_t i = 0; i < params_.size(); ++i) owned_[owner_[i]].push_back(i);
  std::vector<nn::NamedTensor> mine;
  for (size_t i : owned_[pg_->rank()]) mine.push_back(params_[i]);
  inner_ = make_inner(std::move(mine));
  DDP_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer");
  lr_ = inner_->lr();
  register_join_participant(*pg_, this);
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() { unregister_join_participant(this); }

int64_t ZeroRedundancyOptimizer::owned_numel(int rank) const {
  int64_t n = 0;
  for (size_t i : owned_.at(rank)) n += params_[i].tensor.numel();
  return n;
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  int64_t n = 0;
  for (auto& [k, t] : inner_->state()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

void ZeroRedundancyOptimizer::step() {
  ops::check_no_bf16_weight_cast("ZeroRedundancyOptimizer::step");  // before any collective
  step_shard(/*training=*/true);
}

void ZeroRedundancyOptimizer::step_shard(bool training) {
  autograd::NoGradGuard ng;
  dist::FlightIssuer who("zero");
  if (under_join_ && pg_->size() > 1) {
    join_exchange(*pg_, JoinPoint::Step, training);  // every rank at a step (else a named error on each)
    // The learning rate of the ranks still training (a schedule moves only there); a joined rank's is stale.
    Tensor lr = Tensor::from_data<double>({training ? lr_ : -std::numeric_limits<double>::infinity()}, {1});
    host_allreduce(*pg_, lr, dist::ReduceOp::Max);
    lr_ = lr.data<double>()[0];
    if (!training && join_transform_) join_transform_();
  }
  ++steps_;
  consolidated_.reset();  // a consolidated state is stale once the parameters moved on
  inner_->set_lr(lr_);
  inner_->step();
  const int world = pg_->size(), me = pg_->rank();
  if (world == 1) return;
  // Every rank's partition travels as one flat buffer, broadcast from its owner; all issued, then waited.
  const Tensor& first = params_.front().tensor;
  std::vector<Tensor> flats(world);
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int r = 0; r < world; ++r) {
    const int64_t n = owned_numel(r);
    if (n == 0) continue;  // the same on every rank: the partition is deterministic
    flats[r] = Tensor::empty({n}, first.dtype(), first.device());
    if (r == me) {
      int64_t off = 0;
      for (size_t i : owned_[r]) {
        const Tensor& p = params_[i].tensor;
        flats[r].slice0(off, off + p.numel()).copy_from(p.detach().view({p.numel()}));
        off += p.numel();
      }
    }
    works.push_back(pg_->broadcast(comm_buffer_of(flats[r]), r));
  }
  for (auto& w : works) w->wait();
  for (int r = 0; r < world; ++r) {
    if (r == me || !flats[r].defined()) continue;
    int64_t off = 0;
    for (size_t i : owned_[r]) {
      Tensor p = params_[i].tensor.detach().view({params_[i].tensor.numel()});
      p.copy_from(flats[r].slice0(off, off + p.numel()));
      off += p.numel();
    }
  }
}

std::map<std::string, Tensor> ZeroRedundancyOptimizer::state() const {
  DDP_CHECK(consolidated_.has_value(), "ZeroRedundancyOptimizer::state() on rank ", pg_->rank(),
            ": this rank holds only its shard of the optimizer state. Call consolidate_state_dict(to) on every "
            "rank first, then read state() on rank `to` (before the next step); local_state() is the shard");
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  // The whole state against every parameter - not only this rank's - so that every rank gives the same
  // verdict; then the inner optimizer gets the entries of the parameters this rank owns.
  const StateKinds kinds = state_kinds_of(*inner_);
  if (!kinds.tensors.empty())
    check_whole_state("ZeroRedundancyOptimizer::load_state", params_, kinds, state, steps);
  std::map<std::string, Tensor> mine;
  for (size_t i : owned_[pg_->rank()])
    for (auto it = state.lower_bound(params_[i].name + "."); it != state.end(); ++it) {
      const std::string& k = it->first;
      if (k.compare(0, params_[i].name.size() + 1, params_[i].name + ".") != 0) break;
      if (k.find('.', params_[i].name.size() + 1) == std::string::npos) mine.emplace(k, it->second);
    }
  inner_->load_state(kinds.tensors.empty() ? state : mine, steps);
  steps_ = steps;
  consolidated_.reset();
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const int world = pg_->size(), me = pg_->rank();
  DDP_CHECK(to >= 0 && to < world, "consolidate_state_dict: rank ", to, " is not in the group of ", world);
  std::map<std::string, Tensor> all;
  dist::FlightIssuer who("zero consolidate");
  for (int r = 0; r < world; ++r) {
    std::vector<char> bytes;
    if (r == me) bytes = serialize_state(inner_->state());
    Tensor len = Tensor::from_data<int64_t>({static_cast<int64_t>(bytes.size())}, {1});
    host_broadcast(*pg_, len, r);
    const int64_t n = len.data<int64_t>()[0];
    // Collectives take no uint8: the bytes travel as int64 words.
    Tensor words = Tensor::zeros({(n + 7) / 8}, DType::I64);
    if (r == me && n > 0) std::memcpy(words.raw_data(), bytes.data(), static_cast<size_t>(n));
    if (n > 0) host_broadcast(*pg_, words, r);
    if (me != to) continue;
    auto shard = r == me ? inner_->state()
                         : deserialize_state(static_cast<const char*>(words.raw_data()), static_cast<size_t>(n));
    for (auto& [k, t] : shard) all[k] = r == me ? t.to(Device::cpu()).clone() : t;
  }
  if (me == to) consolidated_ = std::move(all);
}

}  // namespace ddp::optim
