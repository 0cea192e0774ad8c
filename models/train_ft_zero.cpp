// train_ft_zero.cpp - ZeRO-1 with a buddy copy of each shard, and the state-map broadcast of recoveries (see
// train_ft_zero.h).
#include "models/train_ft_zero.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "models/train_setup.h"
#include "runtime/autograd/node.h"
#include "runtime/core/error.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/distributed/tensor_comm_buffer.h"

namespace ddp::models {

void broadcast_tensor(dist::ProcessGroup& pg, Tensor& t, int root) {
  if (t.device().is_cpu()) {
    host_broadcast(pg, t, root);
    return;
  }
  pg.broadcast(comm_buffer_of(t), root)->wait();
}

std::map<std::string, Tensor> broadcast_state_map(dist::ProcessGroup& pg, const std::map<std::string, Tensor>& mine,
                                                  int root, Device device) {
  std::string header;
  if (pg.rank() == root) {
    std::ostringstream h;
    for (const auto& [name, t] : mine) {
      h << name << ' ' << static_cast<int>(t.dtype()) << ' ' << (t.device().is_cpu() ? 0 : 1) << ' '
        << t.shape().size();
      for (int64_t d : t.shape()) h << ' ' << d;
      h << '\n';
    }
    header = h.str();
  }
  // One character per int64 (collectives take no bytes; a header is a few kilobytes at most).
  Tensor length = Tensor::from_data<int64_t>({static_cast<int64_t>(header.size())}, {1});
  host_broadcast(pg, length, root);
  Tensor chars = Tensor::zeros({length.data<int64_t>()[0]}, DType::I64);
  for (size_t i = 0; pg.rank() == root && i < header.size(); ++i)
    chars.data<int64_t>()[i] = static_cast<unsigned char>(header[i]);
  if (chars.numel() > 0) host_broadcast(pg, chars, root);
  header.resize(static_cast<size_t>(chars.numel()));
  for (size_t i = 0; i < header.size(); ++i) header[i] = static_cast<char>(chars.data<int64_t>()[i]);
  std::map<std::string, Tensor> out;
  std::istringstream in(header);
  std::string name;
  int dtype = 0, on_device = 0;
  size_t dims = 0;
  while (in >> name >> dtype >> on_device >> dims) {
    Shape shape(dims);
    for (auto& d : shape) in >> d;
    Tensor t = pg.rank() == root ? mine.at(name)
                                 : Tensor::zeros(shape, static_cast<DType>(dtype), on_device ? device : Device::cpu());
    broadcast_tensor(pg, t, root);
    out.emplace(name, t);
  }
  return out;
}

void FtZeroOne::rebuild(std::shared_ptr<dist::ProcessGroup> pg, const std::map<std::string, Tensor>& full,
                        int64_t steps) {
  buddy_.reset();
  zero_.reset();
  pg_ = std::move(pg);
  auto inner = [this](std::vector<nn::NamedTensor> params) { return make_train_optimizer(o_, std::move(params)); };
  auto params = model_->named_parameters();
  zero_ = std::make_unique<optim::ZeroRedundancyOptimizer>(params, pg_, inner);
  if (!full.empty() || steps > 0) zero_->load_state(full, steps);
  // This rank is the buddy of the owning rank before it (cyclically, among the ranks that own a partition).
  const std::vector<int>& owner = zero_->owners();
  std::set<int> owning(owner.begin(), owner.end());
  const int me = pg_->rank();
  if (owning.size() > 1 && owning.count(me)) {
    auto it = owning.find(me);
    const int before = it == owning.begin() ? *owning.rbegin() : *std::prev(it);
    std::vector<nn::NamedTensor> mine;
    std::map<std::string, Tensor> subset;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner[i] != before) continue;
      mine.push_back(params[i]);
      for (auto s = full.lower_bound(params[i].name + "."); s != full.end(); ++s) {
        if (s->first.compare(0, params[i].name.size() + 1, params[i].name + ".") != 0) break;
        if (s->first.find('.', params[i].name.size() + 1) == std::string::npos) subset.emplace(s->first, s->second);
      }
    }
    buddy_ = make_train_optimizer(o_, mine);
    if (!subset.empty() || steps > 0) buddy_->load_state(subset, steps);
  }
  attempted_ = false;
}

void FtZeroOne::step(double lr) {
  autograd::NoGradGuard no_grad;
  params_before_.clear();
  for (auto& p : model_->parameters()) params_before_.push_back(p.detach().clone());
  state_before_.clear();
  for (auto& [k, t] : zero_->local_state()) state_before_.emplace(k, t.clone());
  if (buddy_)
    for (auto& [k, t] : buddy_->state()) state_before_.emplace(k, t.clone());
  attempted_ = true;
  if (buddy_) {
    buddy_->set_lr(lr);
    buddy_->step();
  }
  zero_->set_lr(lr);
  zero_->step();
}

std::map<std::string, Tensor> FtZeroOne::state_at(int64_t target, int64_t committed) {
  // No side effect but putting the copied parameters back: a recovery that fails half-way asks again (with the
  // same or an older target), and the copies stay until rebuild().
  if (!zero_) return {};  // a replacement holds nothing yet
  if (attempted_ && target == committed) {
    // Nobody committed the step this rank attempted: back to before it, parameters included.
    autograd::NoGradGuard no_grad;
    auto params = model_->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor p = params[i].detach();
      p.copy_from(params_before_[i]);
    }
    return state_before_;
  }
  if ((attempted_ && target == committed + 1) || (!attempted_ && target == committed)) {
    std::map<std::string, Tensor> s = zero_->local_state();
    if (buddy_)
      for (auto& [k, t] : buddy_->state()) s.emplace(k, t);
    return s;
  }
  return {};  // behind the target: its shards are stale
}

}  // namespace ddp::models
