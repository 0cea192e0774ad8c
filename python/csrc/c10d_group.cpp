// c10d_group.cpp - ddp.cpp's collectives as calls of a c10d::Backend on tensors over the CommBuffers' memory.
#include "c10d_group.h"

#include <ATen/ATen.h>

#include <vector>

#include "runtime/core/error.h"

namespace ddp_torch {

namespace dist = ddp::dist;

namespace {

at::ScalarType scalar_type_of(ddp::DType t) {
  switch (t) {
    case ddp::DType::F32: return at::kFloat;
    case ddp::DType::F64: return at::kDouble;
    case ddp::DType::BF16: return at::kBFloat16;
    case ddp::DType::I32: return at::kInt;
    case ddp::DType::I64: return at::kLong;
    case ddp::DType::U8: return at::kByte;
  }
  DDP_CHECK(false, "ddpcpp across hosts: dtype ", ddp::dtype_name(t), " has no torch dtype here");
  return at::kFloat;
}

// A tensor over the buffer's memory (the buffer's keepalive outlives the synchronous collective).
at::Tensor tensor_of(const dist::CommBuffer& b) {
  return at::from_blob(b.data, {b.numel}, at::TensorOptions().dtype(scalar_type_of(b.dtype)));
}

c10d::ReduceOp c10d_op(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case dist::ReduceOp::Avg: return c10d::ReduceOp::AVG;
    case dist::ReduceOp::Max: return c10d::ReduceOp::MAX;
    case dist::ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

C10dGroup::C10dGroup(c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout)
    : dist::ProcessGroup(backend->getRank(), backend->getSize()), backend_(std::move(backend)), timeout_(timeout) {}

std::chrono::milliseconds C10dGroup::timeout_now() const {
  const auto own = dist::ScopedCollectiveTimeout::current();  // set by the hier group for a call's own timeout
  return own.count() > 0 ? own : timeout_;
}

template <class Issue>
std::shared_ptr<dist::Work> C10dGroup::run(const std::string& what, Issue issue) {
  const uint64_t seq = seq_.fetch_add(1);
  auto work = std::make_shared<dist::Work>(backend_name() + " " + what + " #" + std::to_string(seq));
  if (aborted_.load()) {
    work->finish(std::make_exception_ptr(ddp::Error(work->description() + ": the group was aborted")));
    return work;
  }
  try {
    issue()->wait(timeout_now());
    work->finish();
  } catch (const std::exception& e) {
    work->finish(std::make_exception_ptr(ddp::Error(work->description() + " failed: " + e.what())));
  }
  return work;
}

std::shared_ptr<dist::Work> C10dGroup::allreduce(dist::CommBuffer buf, dist::ReduceOp op) {
  return run("allreduce", [&] {
    std::vector<at::Tensor> t{tensor_of(buf)};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d_op(op);
    o.timeout = timeout_now();
    return backend_->allreduce(t, o);
  });
}

std::shared_ptr<dist::Work> C10dGroup::broadcast(dist::CommBuffer buf, int root) {
  return run("broadcast", [&] {
    std::vector<at::Tensor> t{tensor_of(buf)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = timeout_now();
    return backend_->broadcast(t, o);
  });
}

std::shared_ptr<dist::Work> C10dGroup::allgather(dist::CommBuffer in, dist::CommBuffer out) {
  return run("allgather", [&] {
    at::Tensor input = tensor_of(in), output = tensor_of(out);
    c10d::AllgatherOptions o;
    o.timeout = timeout_now();
    return backend_->_allgather_base(output, input, o);
  });
}

std::shared_ptr<dist::Work> C10dGroup::reduce_scatter(dist::CommBuffer in, dist::CommBuffer out,
                                                      dist::ReduceOp op) {
  return run("reduce_scatter", [&] {
    at::Tensor input = tensor_of(in), output = tensor_of(out);
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d_op(op);
    o.timeout = timeout_now();
    return backend_->_reduce_scatter_base(output, input, o);
  });
}

std::shared_ptr<dist::Work> C10dGroup::barrier() {
  return run("barrier", [&] {
    c10d::BarrierOptions o;
    o.timeout = timeout_now();
    return backend_->barrier(o);
  });
}

void C10dGroup::abort(const std::string&) {
  if (aborted_.exchange(true)) return;
  backend_->abort();
}

}  // namespace ddp_torch
