// backend.cpp - each torch.distributed collective of the ddpcpp backend as ddp.cpp shm collectives: argument
// checks with errors that name the collective and the fix, staging of dtypes and layouts ddp.cpp does not move,
// the reduce-op plan (direct, pre-multiplied, or gathered and folded), and the copy-back after completion.
#include "backend.h"

#include <Python.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "c10d_store_client.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/shm/shm_group.h"
#include "runtime/distributed/store.h"

namespace ddp_torch {

namespace dist = ddp::dist;

namespace {

std::optional<ddp::DType> native_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ddp::DType::F32;
    case at::kDouble:
      return ddp::DType::F64;
    case at::kBFloat16:
      return ddp::DType::BF16;
    case at::kInt:
      return ddp::DType::I32;
    case at::kLong:
      return ddp::DType::I64;
    default:
      return std::nullopt;
  }
}

// "torch.float32": the name Python users write.
std::string py_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// The dtype a tensor travels in: its own when ddp.cpp moves it, else a wider one that holds every value.
at::ScalarType travel_dtype(at::ScalarType t, const char* name) {
  if (native_dtype(t)) return t;
  switch (t) {
    case at::kHalf:
      return at::kFloat;
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
      return at::kInt;
    default:
      TORCH_CHECK_VALUE(false, "ddpcpp: ", name, " got a tensor of dtype ", py_name(t),
                        ", which the ddpcpp backend does not move; it moves float32, float64, bfloat16, float16, "
                        "int64, int32, int16, int8, uint8 and bool. Convert the tensor, or use gloo for this "
                        "group (dist.new_group(backend='gloo'))");
  }
}

void check_tensor(const at::Tensor& t, const char* name, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "ddpcpp: ", name, ": ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "ddpcpp: ", name, ": ", what, " is on ", t.device(),
                    " but the ddpcpp backend moves CPU tensors; for GPU tensors use "
                    "init_process_group('cpu:ddpcpp,cuda:nccl') so that CUDA tensors go to NCCL");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "ddpcpp: ", name, ": ", what, " has layout ", t.layout(),
                    "; the ddpcpp backend moves dense (strided) tensors only - call .to_dense() first");
  travel_dtype(t.scalar_type(), name);
}

// The two tensors of an all-gather or reduce-scatter: CPU, dense, one dtype, `big` world times `small`.
void check_pair(const char* name, const at::Tensor& big, const char* big_name, const at::Tensor& small,
                const char* small_name, int world) {
  check_tensor(big, name, big_name);
  check_tensor(small, name, small_name);
  TORCH_CHECK_VALUE(big.scalar_type() == small.scalar_type(), "ddpcpp: ", name, ": the ", big_name, " is ",
                    py_name(big.scalar_type()), " but the ", small_name, " is ", py_name(small.scalar_type()),
                    "; expected the same dtype");
  TORCH_CHECK_VALUE(big.numel() == world * small.numel(), "ddpcpp: ", name, ": the ", big_name, " has ",
                    big.numel(), " elements; expected world size ", world, " x the ", small_name, "'s ",
                    small.numel(), " = ", world * small.numel());
}

// The contiguous tensor in the travel dtype that the collective reads and writes: `t` itself when it already is
// one, else a copy (with_values: the copy holds t's values; else it is only allocated).
at::Tensor travel_tensor(const at::Tensor& t, const char* name, bool with_values = true) {
  const at::ScalarType d = travel_dtype(t.scalar_type(), name);
  if (d == t.scalar_type() && t.is_contiguous()) return t;
  if (!with_values) return at::empty({t.numel()}, t.options().dtype(d));
  return t.to(d).contiguous();
}

bool is_staged(const at::Tensor& comm, const at::Tensor& t) { return !comm.is_same(t); }

dist::CommBuffer buffer(const at::Tensor& t) {
  auto keep = std::make_shared<at::Tensor>(t);
  return dist::CommBuffer{t.numel() ? t.data_ptr() : nullptr, t.numel(), *native_dtype(t.scalar_type()),
                          ddp::Device::cpu(), std::shared_ptr<void>(keep, keep.get())};
}

// How a c10d reduce op runs.
struct OpPlan {
  enum Kind { Direct, Premul, Fold } kind = Direct;
  dist::ReduceOp op = dist::ReduceOp::Sum;  // Direct, Premul
  c10d::ReduceOp::RedOpType fold = c10d::ReduceOp::PRODUCT;
  std::optional<double> factor;  // Premul
  at::Tensor factor_tensor;      // Premul
};

OpPlan plan_for(const c10d::ReduceOp& op, at::ScalarType dtype, const char* name) {
  OpPlan p;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      p.op = dist::ReduceOp::Sum;
      return p;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(at::isFloatingType(dtype), "ddpcpp: ", name, " with ReduceOp.AVG on a ", py_name(dtype),
                        " tensor: AVG needs a floating-point tensor (use SUM and divide yourself)");
      p.op = dist::ReduceOp::Avg;
      return p;
    case c10d::ReduceOp::MIN:
      p.op = dist::ReduceOp::Min;
      return p;
    case c10d::ReduceOp::MAX:
      p.op = dist::ReduceOp::Max;
      return p;
    case c10d::ReduceOp::PREMUL_SUM: {
      p.kind = OpPlan::Premul;
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, "ddpcpp: ", name, " with PREMUL_SUM but no factor was given");
      if (s->tensor_factor.defined()) {
        p.factor_tensor = s->tensor_factor;
      } else {
        p.factor = s->double_factor;
      }
      return p;
    }
    case c10d::ReduceOp::PRODUCT:
      p.kind = OpPlan::Fold;
      p.fold = op.op_;
      return p;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK_VALUE(!at::isFloatingType(dtype), "ddpcpp: ", name,
                        " with a bitwise reduce op on a floating-point tensor (", py_name(dtype),
                        "); BAND, BOR and BXOR need integer or bool tensors");
      p.kind = OpPlan::Fold;
      p.fold = op.op_;
      return p;
    default:
      TORCH_CHECK_VALUE(false, "ddpcpp: ", name, ": reduce op ", static_cast<int>(op.op_),
                        " is not supported; use SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM, BAND, BOR or BXOR");
  }
}

void fold_into(at::Tensor& acc, const at::Tensor& x, c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::PRODUCT:
      acc.mul_(x);
      return;
    case c10d::ReduceOp::BAND:
      acc.bitwise_and_(x);
      return;
    case c10d::ReduceOp::BOR:
      acc.bitwise_or_(x);
      return;
    default:
      acc.bitwise_xor_(x);
  }
}

// Scales `t` (a tensor of our own) by the PREMUL_SUM factor.
void premultiply(at::Tensor& t, const OpPlan& p) {
  if (p.factor_tensor.defined()) {
    t.mul_(p.factor_tensor.to(t.scalar_type()));
  } else {
    t.mul_(*p.factor);
  }
}

// Lets go of the GIL for a scope when this thread holds it: set-up waits for the peers, and the Completer may
// need the GIL for a future's Python callback while this thread waits for it.
class GilRelease {
 public:
  GilRelease() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~GilRelease() {
    if (state_) PyEval_RestoreThread(state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace

// ------------------------------------------------------------------------------------------------ set-up

DdpCppBackend::DdpCppBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), options_(c10::make_intrusive<Options>("ddpcpp", timeout)) {
  TORCH_CHECK_VALUE(store, "ddpcpp: no store was given to the backend");
  TORCH_CHECK_VALUE(timeout.count() > 0, "ddpcpp: the timeout must be positive, got ", timeout.count(), " ms");
  auto ddp_store = std::make_shared<dist::Store>(std::make_unique<C10dStoreClient>(store), timeout);
  dist::ProcessGroupOptions options;
  options.timeout = timeout;
  options.name = "ddpcpp";  // the store is already this group's own (torch.distributed prefixes it)
  try {
    group_ = std::make_unique<dist::ShmProcessGroup>(ddp_store, rank, size, options);
  } catch (const std::exception& e) {
    TORCH_CHECK_WITH(DistBackendError, false, "ddpcpp: rank ", rank, " of ", size,
                     " could not set up the shared-memory group: ", e.what(),
                     ". All ranks of a ddpcpp group must run on one host and share /dev/shm; across hosts use "
                     "gloo (init_process_group('gloo'))");
  }
  completer_ = std::make_unique<Completer>();
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
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : options_->timeout;
  GilRelease nogil;
  return c10::make_intrusive<DdpCppBackend>(store, static_cast<int>(me - ranks.begin()),
                                            static_cast<int>(ranks.size()), timeout);
}

uint64_t DdpCppBackend::getSequenceNumberForGroup() { return group_->next_sequence_number(); }

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
  completer_->push(w);
  return w;
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
  completer_->push(done);
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
  auto w = start(c10d::OpType::ALLREDUCE, "allreduce", tensors);
  for (const auto& t : tensors) add_allreduce(*w, t, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  auto w = start(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors);
  for (const auto& t : tensors) add_allreduce(*w, t, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
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
                                                        const c10d::AllgatherOptions&) {
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
                                                              const c10d::AllgatherOptions&) {
  auto w = start(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output});
  add_allgather_base(*w, output, input);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions&) {
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
  auto w = start(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output});
  add_reduce_scatter_base(*w, output, input, opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ddpcpp: reduce_scatter_tensor_coalesced got ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs; expected one output per input");
  auto w = start(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs);
  for (size_t i = 0; i < inputs.size(); ++i) add_reduce_scatter_base(*w, outputs[i], inputs[i], opts.reduceOp);
  return submit(w);
}

c10::intrusive_ptr<c10d::Work> DdpCppBackend::barrier(const c10d::BarrierOptions&) {
  auto w = start(c10d::OpType::BARRIER, "barrier", {});
  w->parts.push_back(group_->barrier());
  return submit(w);
}

}  // namespace ddp_torch
