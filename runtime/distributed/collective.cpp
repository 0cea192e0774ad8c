// collective.cpp - descriptions and argument checks of collectives, shared by every backend.
#include "runtime/distributed/collective.h"

#include "runtime/core/error.h"

namespace ddp::dist {

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::Allreduce:
      return "allreduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::Allgather:
      return "allgather";
    case CollectiveKind::ReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::Barrier:
      return "barrier";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

std::string CollectiveDesc::str(bool with_seq) const {
  std::string s = collective_name(kind);
  if (with_seq) s += " #" + std::to_string(seq);
  if (kind == CollectiveKind::Barrier) return s;
  s += " (" + std::to_string(count) + " x " + std::string(dtype_name(dtype)) + " on " + device.str();
  if (kind == CollectiveKind::Allreduce || kind == CollectiveKind::ReduceScatter)
    s += std::string(", ") + reduce_op_name(op);
  if (kind == CollectiveKind::Broadcast) s += ", root " + std::to_string(root);
  return s + ")";
}

void check_buffer(const CommBuffer& b, const std::string& what, const std::string& backend,
                  bool device_memory_only) {
  DDP_CHECK(b.numel >= 0, backend, ": ", what, " has a negative element count ", b.numel);
  DDP_CHECK(b.numel == 0 || b.data != nullptr, backend, ": ", what, " has ", b.numel,
            " elements but a null data pointer");
  if (device_memory_only) {
    DDP_CHECK(b.device.is_cuda(), backend, ": ", what, " lives on ", b.device.str(), " but ", backend,
              " moves CUDA memory only; use the gloo backend for CPU buffers");
  } else if (b.device.is_cpu()) {
    DDP_CHECK(b.dtype != DType::U8, backend, ": ", what,
              " has dtype uint8, which collectives do not support; "
              "expected float32, float64, bfloat16, int32 or int64");
  }
}

void check_allgather(const CommBuffer& in, const CommBuffer& out, int size) {
  DDP_CHECK(in.dtype == out.dtype, "allgather: input is ", dtype_name(in.dtype), " but output is ",
            dtype_name(out.dtype), "; expected the same dtype");
  DDP_CHECK(in.device == out.device, "allgather: input is on ", in.device.str(), " but output on ",
            out.device.str(), "; expected the same device");
  DDP_CHECK(out.numel == in.numel * size, "allgather: output has ", out.numel,
            " elements; expected world size ", size, " x input ", in.numel, " = ", in.numel * size);
}

void check_reduce_scatter(const CommBuffer& in, const CommBuffer& out, int size) {
  DDP_CHECK(in.dtype == out.dtype, "reduce_scatter: input is ", dtype_name(in.dtype), " but output is ",
            dtype_name(out.dtype), "; expected the same dtype");
  DDP_CHECK(in.device == out.device, "reduce_scatter: input is on ", in.device.str(), " but output on ",
            out.device.str(), "; expected the same device");
  DDP_CHECK(in.numel == out.numel * size, "reduce_scatter: input has ", in.numel,
            " elements; expected world size ", size, " x output ", out.numel, " = ", out.numel * size);
}

void check_root(int root, int size) {
  DDP_CHECK(root >= 0 && root < size, "broadcast: root ", root, " is not a rank of this group: expected 0..",
            size - 1);
}

}  // namespace ddp::dist
