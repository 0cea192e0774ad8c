// collective.h - what a collective call is (op, sequence number, count, dtype, reduce op, root), its one-line
// description for errors, and the argument checks every backend applies before issuing it.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/distributed/comm_buffer.h"
#include "runtime/distributed/process_group.h"

namespace ddp::dist {

enum class CollectiveKind { Allreduce, Broadcast, Allgather, ReduceScatter, Barrier };
const char* collective_name(CollectiveKind k);

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::Barrier;
  uint64_t seq = 0;
  int64_t count = 0;  // elements of the input buffer (per rank)
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;
  Device device = Device::cpu();
  // This collective's own timeout (ScopedCollectiveTimeout, process_group.h); 0: the group's.
  std::chrono::milliseconds timeout{0};

  // "allreduce #3 (1024 x float32, sum)"; the sequence number is left out with with_seq = false, so that two
  // ranks' calls can be compared.
  std::string str(bool with_seq = true) const;
};

// Checks one buffer: non-negative count, data present when count > 0, dtype allowed on its device, and a CUDA
// buffer for a backend whose collectives take device memory only (ProcessGroup::device_memory_only).
void check_buffer(const CommBuffer& b, const std::string& what, const std::string& backend,
                  bool device_memory_only = false);
// Checks the shapes of a two-buffer collective against the group size.
void check_allgather(const CommBuffer& in, const CommBuffer& out, int size);
void check_reduce_scatter(const CommBuffer& in, const CommBuffer& out, int size);
void check_root(int root, int size);

// The usual cause of a collective mismatch, said the same way by every backend's mismatch error.
inline constexpr const char* kMismatchHint =
    "The ranks issue different collectives at the same point: typically one rank ran out of data and went on "
    "to other work while the others kept training (uneven inputs: use ddp::Join, or give every rank the same "
    "number of steps), or a rank took a different code path";

}  // namespace ddp::dist
