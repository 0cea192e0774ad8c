// backend.cpp - each torch.distributed collective of the ddpcpp backend as ddp.cpp shm collectives (the tensor
// checks, staging and reduce-op plans they use: staging.h), the copy-back after completion, set-up, split and
// coalescing.
#include "backend.h"

#include <Python.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "c10d_group.h"
#include "c10d_store_client.h"
#include "staging.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/core/error.h"
#include "runtime/distributed/shm/hier_group.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store.h"

namespace ddp_torch {

namespace dist = ddp::dist;

namespace {

// Lets go of the GIL for a scope when this thread holds it: set-up waits for the peers, and the Completer may
// need the GIL for a future's Python callback while this thread waits for it.
class GilRelease {
 public:
  explicit GilRelease(bool when = true)
      : state_(when && Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~GilRelease() {
    if (state_) PyEval_RestoreThread(state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// A collective's own `timeout` (c10d's options; kUnsetTimeout: the group's) for the ddp.cpp collectives
// issued while this lives.
class CallTimeout {
 public:
  explicit CallTimeout(std::chrono::milliseconds t) {
    if (t != c10d::kUnsetTimeout) {
      TORCH_CHECK_VALUE(t.count() > 0, "ddpcpp: a collective's timeout must be positive, got ", t.count(), " ms");
      guard_.emplace(t);
    }
  }

 private:
  std::optional<dist::ScopedCollectiveTimeout> guard_;
};

// DDP_TORCH_COLLECTIVES: "caller" runs each collective on the thread that issues it (the Work returned is
// complete), "thread" on the group's background thread, "auto" (the default) picks "caller" when this host's
// ranks keep every core this process may use busy: ranks on this host x torch's intra-op threads >= those cores.
// Then no core is left for the background thread to overlap on, and each hand-off costs a wake-up.
bool collectives_on_caller(int local_ranks) {
  const char* env = std::getenv("DDP_TORCH_COLLECTIVES");
  const std::string mode = env && *env ? env : "auto";
  if (mode == "caller") return true;
  if (mode == "thread") return false;
  TORCH_CHECK_VALUE(mode == "auto", "ddpcpp: DDP_TORCH_COLLECTIVES=", mode,
                    " is not a mode; use caller (run each collective on the thread that issues it), thread (on "
                    "the group's background thread) or auto (caller when the ranks keep every core busy)");
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return static_cast<int64_t>(local_ranks) * at::get_num_threads() >= cores;
}

// The ranks of this rank's host (all of them when `hosts` is empty).
int ranks_on_my_host(const std::vector<int>& hosts, int rank, int size) {
  if (hosts.empty()) return size;
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[rank]));
}

}  // namespace

// ------------------------------------------------------------------------------------------------ set-up

DdpCppBackend::DdpCppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout, std::vector<int> hosts,
                             c10::intrusive_ptr<c10d::Backend> leaders)
    : c10d::Backend(rank, size),
      options_(c10::make_intrusive<Options>("ddpcpp", timeout)),
      on_caller_(collectives_on_caller(ranks_on_my_host(hosts, rank, size))) {
  TORCH_CHECK_VALUE(store, "ddpcpp: no store was given to the backend");
  TORCH_CHECK_VALUE(timeout.count() > 0, "ddpcpp: the timeout must be positive, got ", timeout.count(), " ms");
  TORCH_CHECK_VALUE(hosts.empty() || static_cast<int>(hosts.size()) == size, "ddpcpp: ", hosts.size(),
                    " host indices for a group of ", size, " ranks");
  auto ddp_store = std::make_shared<dist::Store>(std::make_unique<C10dStoreClient>(store), timeout);
  dist::ProcessGroupOptions options;
  options.timeout = timeout;
  options.name = "ddpcpp";  // the store is already this group's own (torch.distributed prefixes it)
  options.run_on_caller = on_caller_;
  const bool one_host = hosts.empty() || std::count(hosts.begin(), hosts.end(), hosts[0]) == size;
  // Completes the works of the background-thread mode; with run_on_caller each work completes on its caller.
  if (!on_caller_) completer_ = std::make_unique<Completer>();
  if (!one_host) {
    hosts_ = hosts;
    // Several hosts: shm inside each, the leaders' collectives on PyTorch's Gloo (made by ddp_cpp/torch.py).
    try {
      group_ = std::make_unique<dist::HierProcessGroup>(
          ddp_store, rank, size, options,
          [leaders, timeout](std::shared_ptr<dist::Store>, int host, int n_hosts, const dist::ProcessGroupOptions&)
              -> std::unique_ptr<dist::ProcessGroup> {
            DDP_CHECK(leaders && leaders->getRank() == host && leaders->getSize() == n_hosts,
                      "ddpcpp: the leaders' Gloo group must be rank ", host, " of ", n_hosts);
            return std::make_unique<C10dGroup>(leaders, timeout);
          },
          std::move(hosts));
    } catch (const std::exception& e) {
      TORCH_CHECK_WITH(DistBackendError, false, "ddpcpp: rank ", rank, " of ", size,
                       " could not set up the group across hosts (shared memory inside each host, Gloo between "
                       "their leaders): ", e.what());
    }
    return;
  }
  try {
    group_ = std::make_unique<dist::ShmProcessGroup>(ddp_store, rank, size, options);
  } catch (const std::exception& e) {
    TORCH_CHECK_WITH(DistBackendError, false, "ddpcpp: rank ", rank, " of ", size,
                     " could not set up the shared-memory group: ", e.what(),
                     ". These ranks reported one host identity, so they must share /dev/shm (a container "
                     "without the host's /dev/shm counts as another host only when its namespaces differ)");
  }
}

DdpCppBackend::~DdpCppBackend() {
  // Python drops the last reference with the GIL held, and the Completer may be running a Python callback
  // of a future (a comm hook's then()) that needs it: let go of the GIL while the threads finish.
  GilRelease nogil;
  completer_.reset();  // completes what is queued (each collective ends by its timeout at the latest)
  group_.reset();
}

c10::intrusive_ptr<c10d::Backend> DdpCppBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::vector<int>& ranks,
                                                       const c10::intrusive_ptr<Options>& opts) {
  const auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) return nullptr;  // not in this split
  if (!hosts_.empty()) {
    for (int r : ranks)
      TORCH_CHECK_VALUE(r >= 0 && r < getSize() && hosts_[r] == hosts_[getRank()], "ddpcpp: split_group: ranks ",
                        getRank(), " and ", r, " are on different hosts; a split across hosts is not supported "
                        "(each split's ranks must share a host): make that subgroup with dist.new_group(ranks, "
                        "backend='ddpcpp')");
  }
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : options_->timeout;
  GilRelease nogil;
  return c10::make_intrusive<DdpCppBackend>(store, static_cast<int>(me - ranks.begin()),
                                            static_cast<int>(ranks.size()), timeout);
}

uint64_t DdpCppBackend::getSequenceNumberForGroup() { return group_->next_sequence_number(); }

void DdpCppBackend::abort() {
  GilRelease nogil;  // the Completer may be running a Python callback of a collective that now fails
  group_->abort("torch.distributed aborted the process group (Backend::abort)");
}

std::string DdpCppBackend::flight_record_json() const {
  const dist::FlightRecorder* r = group_->flight_recorder();
  return r ? r->to_json("demand") : "{}";
}

c10::intrusive_ptr<TorchWork> DdpCppBackend::start(c10d::OpType op, const char* name,
                                                   std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<TorchWork>(getRank(), op, name, std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::submit(c10::intrusive_ptr<TorchWork> w) {
  if (coalescing_) {  // before the Completer may touch w
    coalesced_parts_.insert(coalesced_parts_.end(), w->parts.begin(), w->parts.end());
    for (auto& t : w->result()) coalesced_outputs_.push_back(t);
  }
  finish(w);
  return w;
}

void DdpCppBackend::finish(const c10::intrusive_ptr<TorchWork>& w) {
  if (on_caller_) {
    w->complete();  // its collectives ran on this thread already: copy back and complete the future here
  } else {
    completer_->push(w);
  }
}

void DdpCppBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "ddpcpp: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_parts_.clear();
  coalesced_outputs_.clear();
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "ddpcpp: endCoalescing without startCoalescing");
  coalescing_ = false;
  // Completes after every coalesced work: the Completer runs works in order, and this one comes last.
  auto done = start(c10d::OpType::COALESCED, "coalesced", std::move(coalesced_outputs_));
  done->parts = std::move(coalesced_parts_);
  coalesced_parts_.clear();
  coalesced_outputs_.clear();
  finish(done);
  return done;
}

// ------------------------------------------------------------------------------------------ collectives

void DdpCppBackend::add_allreduce(TorchWork& w, const at::Tensor& t, const c10d::ReduceOp& op) {
  const char* name = w.name.c_str();
  check_tensor(t, name, "the tensor");
  const OpPlan plan = plan_for(op, t.scalar_type(), name);
  at::Tensor comm = travel_tensor(t, name);
  const bool staged = is_staged(comm, t);
  if (plan.kind == OpPlan::Fold) {
    const int64_t n = comm.numel();
    at::Tensor gathered = at::empty({getSize() * n}, comm.options());
    w.parts.push_back(group_->allgather(buffer(comm), buffer(gathered)));
    const auto fold = plan.fold;
    const int world = getSize();
    auto previous = std::move(w.after);
    w.after = [previous, gathered, t, n, fold, world] {
      if (previous) previous();
      at::Tensor acc = gathered.narrow(0, 0, n).clone();
      for (int r = 1; r < world; ++r) fold_into(acc, gathered.narrow(0, r * n, n), fold);
      t.copy_(acc.view(t.sizes()));
    };
    return;
  }
  if (plan.kind == OpPlan::Premul) premultiply(comm, plan);  // in place: the all-reduce overwrites it anyway
  w.parts.push_back(group_->allreduce(buffer(comm), plan.kind == OpPlan::Premul ? dist::ReduceOp::Sum : plan.op));
  if (staged) {
    auto previous = std::move(w.after);
    w.after = [previous, comm, t] {
      if (previous) previous();
      t.copy_(comm.view(t.sizes()));
    };
  }
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  auto w = start(c10d::OpType::ALLREDUCE, "allreduce", tensors);
  for (const auto& t : tensors) add_allreduce(*w, t, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  auto w = start(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors);
  for (const auto& t : tensors) add_allreduce(*w, t, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "ddpcpp: broadcast from rank ",
                    opts.rootRank, ", which is not in this group of ", getSize(), " ranks");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ddpcpp: broadcast takes one tensor per rank (rootTensor 0), got "
                    "rootTensor ", opts.rootTensor);
  auto w = start(c10d::OpType::BROADCAST, "broadcast", tensors);
  for (const auto& t : tensors) {
    check_tensor(t, "broadcast", "the tensor");
    at::Tensor comm = travel_tensor(t, "broadcast");
    w->parts.push_back(group_->broadcast(buffer(comm), static_cast<int>(opts.rootRank)));
    if (is_staged(comm, t)) {
      auto previous = std::move(w->after);
      w->after = [previous, comm, t] {
        if (previous) previous();
        t.copy_(comm.view(t.sizes()));
      };
    }
  }
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  TORCH_CHECK_VALUE(inputs.size() == 1 && outputs.size() == 1, "ddpcpp: allgather takes one input tensor and "
                    "one output list per rank, got ", inputs.size(), " inputs and ", outputs.size(), " lists");
  const at::Tensor& in = inputs[0];
  check_tensor(in, "allgather", "the input");
  auto& outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == getSize(), "ddpcpp: allgather: the output list has ",
                    outs.size(), " tensors; expected one per rank of this group (", getSize(), ")");
  for (size_t i = 0; i < outs.size(); ++i) {
    check_tensor(outs[i], "allgather", "an output tensor");
    TORCH_CHECK_VALUE(outs[i].numel() == in.numel() && outs[i].scalar_type() == in.scalar_type(),
                      "ddpcpp: allgather: output tensor ", i, " is ", outs[i].numel(), " x ", py_name(outs[i].scalar_type()),
                      " but the input is ", in.numel(), " x ", py_name(in.scalar_type()),
                      "; every output must match the input's element count and dtype");
  }
  auto w = start(c10d::OpType::ALLGATHER, "allgather", outs);
  at::Tensor comm = travel_tensor(in, "allgather");
  const int64_t n = comm.numel();
  at::Tensor flat = at::empty({getSize() * n}, comm.options());
  w->parts.push_back(group_->allgather(buffer(comm), buffer(flat)));
  std::vector<at::Tensor> targets = outs;
  w->after = [flat, targets, n] {
    for (size_t i = 0; i < targets.size(); ++i)
      targets[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(targets[i].sizes()));
  };
  return submit(w);
}

void DdpCppBackend::add_allgather_base(TorchWork& w, const at::Tensor& output, const at::Tensor& input) {
  const char* name = w.name.c_str();
  check_pair(name, output, "output", input, "input", getSize());
  at::Tensor in = travel_tensor(input, name);
  at::Tensor out = travel_tensor(output, name, /*with_values=*/false);
  w.parts.push_back(group_->allgather(buffer(in), buffer(out)));
  if (is_staged(out, output)) {
    auto previous = std::move(w.after);
    w.after = [previous, out, output] {
      if (previous) previous();
      output.copy_(out.view(output.sizes()));
    };
  }
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  auto w = start(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output});
  add_allgather_base(*w, output, input);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ddpcpp: allgather_into_tensor_coalesced got ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs; expected one output per input");
  auto w = start(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", outputs);
  for (size_t i = 0; i < inputs.size(); ++i) add_allgather_base(*w, outputs[i], inputs[i]);
  return submit(w);
}

void DdpCppBackend::add_reduce_scatter_base(TorchWork& w, const at::Tensor& output, const at::Tensor& input,
                                            const c10d::ReduceOp& op) {
  const char* name = w.name.c_str();
  check_pair(name, input, "input", output, "output", getSize());
  const OpPlan plan = plan_for(op, input.scalar_type(), name);
  at::Tensor in = travel_tensor(input, name);
  const int64_t n = output.numel();
  if (plan.kind == OpPlan::Fold) {
    at::Tensor gathered = at::empty({getSize() * in.numel()}, in.options());
    w.parts.push_back(group_->allgather(buffer(in), buffer(gathered)));
    const auto fold = plan.fold;
    const int world = getSize();
    const int64_t stride = in.numel();
    const int64_t offset = getRank() * n;
    auto previous = std::move(w.after);
    w.after = [previous, gathered, output, n, fold, world, stride, offset] {
      if (previous) previous();
      at::Tensor acc = gathered.narrow(0, offset, n).clone();
      for (int r = 1; r < world; ++r) fold_into(acc, gathered.narrow(0, r * stride + offset, n), fold);
      output.copy_(acc.view(output.sizes()));
    };
    return;
  }
  if (plan.kind == OpPlan::Premul) {
    if (!is_staged(in, input)) in = in.clone();  // the caller's input stays as it was
    premultiply(in, plan);
  }
  at::Tensor out = travel_tensor(output, name, /*with_values=*/false);
  w.parts.push_back(
      group_->reduce_scatter(buffer(in), buffer(out), plan.kind == OpPlan::Premul ? dist::ReduceOp::Sum : plan.op));
  if (is_staged(out, output)) {
    auto previous = std::move(w.after);
    w.after = [previous, out, output] {
      if (previous) previous();
      output.copy_(out.view(output.sizes()));
    };
  }
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1, "ddpcpp: reduce_scatter takes one output tensor "
                    "and one input list per rank, got ", outputs.size(), " outputs and ", inputs.size(), " lists");
  auto& ins = inputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(ins.size()) == getSize(), "ddpcpp: reduce_scatter: the input list has ",
                    ins.size(), " tensors; expected one per rank of this group (", getSize(), ")");
  const at::Tensor& out = outputs[0];
  check_tensor(out, "reduce_scatter", "the output");
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < ins.size(); ++i) {
    check_tensor(ins[i], "reduce_scatter", "an input tensor");
    TORCH_CHECK_VALUE(ins[i].numel() == out.numel() && ins[i].scalar_type() == out.scalar_type(),
                      "ddpcpp: reduce_scatter: input tensor ", i, " is ", ins[i].numel(), " x ",
                      py_name(ins[i].scalar_type()), " but the output is ", out.numel(), " x ", py_name(out.scalar_type()),
                      "; every input must match the output's element count and dtype");
    flat.push_back(ins[i].reshape({-1}));
  }
  auto w = start(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  add_reduce_scatter_base(*w, out, at::cat(flat), opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  auto w = start(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output});
  add_reduce_scatter_base(*w, output, input, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ddpcpp: reduce_scatter_tensor_coalesced got ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs; expected one output per input");
  auto w = start(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs);
  for (size_t i = 0; i < inputs.size(); ++i) add_reduce_scatter_base(*w, outputs[i], inputs[i], opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::barrier(const c10d::BarrierOptions& opts) {
  GilRelease nogil(on_caller_);  // with run_on_caller the collective runs (and waits) here
  CallTimeout timeout(opts.timeout);
  auto w = start(c10d::OpType::BARRIER, "barrier", {});
  w->parts.push_back(group_->barrier());
  return submit(w);
}

}  // namespace ddp_torch
