// ft_agent.cpp - ddprun's store, coordinator and exit reports under --fault-tolerant (see ft_agent.h).
#include "runtime/launch/ft_agent.h"

#include "runtime/core/error.h"
#include "runtime/distributed/socket_io.h"

namespace ddp::launch {

FtAgent::FtAgent(const LaunchConfig& c) : c_(c) {
  dist::StoreAddress address;
  address.host = c.master_addr;
  address.port = c.master_port;
  address.token = c.token;
  address.job_id = c.job_id;
  if (c.node_rank == 0) {
    // Listen where the workers connect: MASTER_ADDR's interface, or every interface when other nodes must
    // reach a loopback name (as rank 0 does without --fault-tolerant, store_setup.h).
    std::string bind = c.master_addr;
    if (c.nnodes > 1 && dist::net::resolves_to_loopback(c.master_addr)) bind = "";
    server_ = std::make_unique<dist::StoreServer>(bind, c.master_port, c.token, dist::StoreServerLimits{}, c.job_id);
    address.host = c.master_addr;
  }
  store_ = std::make_shared<dist::Store>(address, std::chrono::seconds(30));
  if (c.node_rank == 0) {
    dist::ft::CoordinatorOptions o;
    o.slots = c.world_size();
    o.min_ranks = c.min_ranks;
    o.deadline = std::chrono::milliseconds(static_cast<int64_t>(c.heartbeat_timeout_s * 1000));
    coordinator_ = std::make_unique<dist::ft::Coordinator>(store_, o);
    coordinator_->start(Clock::now());
    current_ = coordinator_->current();
  } else {
    current_ = dist::ft::Membership::decode(store_->get(dist::ft::members_key(std::stoll(store_->get(dist::ft::kEpochKey)))));
    // From here on the store is node 0's, across the network: a cut link must not hold ddprun's loop.
    store_->set_timeout(std::chrono::milliseconds(static_cast<int64_t>(c.heartbeat_timeout_s * 1000)));
  }
}

FtAgent::~FtAgent() = default;

void FtAgent::worker_ended(int slot, int incarnation, bool failed, const std::string& what) {
  if (coordinator_) {
    coordinator_->worker_ended(slot, incarnation, failed, what);
  } else if (failed && !unreachable_) {
    try {
      store_->set(dist::ft::exit_key(slot, incarnation), what);
    } catch (const std::exception&) {
      unreachable_ = true;  // the coordinator's node is gone; the workers notice it themselves (ft_client.h)
    }
  }
}

FtAgent::Tick FtAgent::tick() {
  Tick t;
  dist::ft::Membership before = current_;
  if (coordinator_) {
    if (auto m = coordinator_->tick(Clock::now())) t.changed = *m;
  } else if (!unreachable_) {
    try {
      const auto e = store_->try_get(dist::ft::kEpochKey);
      if (e && std::stoll(*e) > current_.epoch)
        t.changed = dist::ft::Membership::decode(store_->get(dist::ft::members_key(std::stoll(*e))));
    } catch (const std::exception&) {
      unreachable_ = true;  // the workers decide on their own that the coordinator is gone
      return t;
    }
  }
  if (!t.changed) return t;
  ++changes_;
  current_ = *t.changed;
  for (const auto& m : before.members) {
    const bool mine = m.slot / c_.nproc_per_node == c_.node_rank;
    const auto now = current_.member_of(m.slot);
    if (mine && (!now || now->incarnation != m.incarnation)) t.removed.push_back(m);
  }
  return t;
}

}  // namespace ddp::launch
