// shm_inplace.cpp - the shm group's registered buffers (allocate_comm_buffer: one segment each, named
// after this rank's segment and the buffer's index) and the in-place all-reduce over them: finding the buffer
// a collective's memory lies in, the agreement of the ranks' stamps, mapping peers' buffers, and the
// reduction straight out of and into every rank's buffer. See shm_group.h and docs/dist.md.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "runtime/core/env_number.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/distributed/shm/shm_group_impl.h"
#include "runtime/distributed/shm/shm_reduce.h"

namespace ddp::dist {

namespace shm {
size_t direct_min_bytes_from_env() {
  return static_cast<size_t>(
      integer_from_env("DDP_SHM_DIRECT_MIN_BYTES", 0, std::numeric_limits<long long>::max(),
                       "a byte count >= 0 (all-reduces of registered buffers from this "
                       "size on take the in-place path)")
          .value_or(kDefaultDirectMinBytes));
}
}  // namespace shm

std::shared_ptr<DirectRef> ShmProcessGroup::Impl::find_registered(const CommBuffer& buf) {
  if (size == 1 || buf.nbytes() < direct_min_bytes || buf.numel <= 0) return nullptr;
  // The registered buffer with the highest base <= data, if the range fits in it.
  const char* data = static_cast<const char*>(buf.data);
  std::lock_guard<std::mutex> g(reg_mu);
  auto it = registry.upper_bound(data);
  if (it == registry.begin()) return nullptr;
  --it;
  auto own = it->second.own.lock();
  if (!own) {
    registry.erase(it);  // freed; its address may be reused
    return nullptr;
  }
  const char* base = static_cast<const char*>(own->seg.data());
  if (data + buf.nbytes() > base + own->seg.size()) return nullptr;
  auto ref = std::make_shared<DirectRef>();
  ref->own = std::move(own);
  ref->offset = static_cast<uint64_t>(data - base);
  return ref;
}

void ShmProcessGroup::Impl::unlink_buffers() {
  std::lock_guard<std::mutex> g(reg_mu);
  for (auto& [base, r] : registry)
    if (auto own = r.own.lock()) own->unlink();
}

CommBuffer ShmProcessGroup::allocate_comm_buffer(int64_t numel, DType dtype, Device device) {
  Impl& s = *impl_;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(numel, 0)) * dtype_size(dtype);
  if (!device.is_cpu() || s.size == 1 || bytes < s.direct_min_bytes || bytes == 0)
    return ProcessGroup::allocate_comm_buffer(numel, dtype, device);
  auto own = std::make_shared<OwnBuffer>();
  std::lock_guard<std::mutex> g(s.reg_mu);
  own->index = s.next_buffer++;  // taken even on failure: the next buffer keeps the index its peers expect
  try {
    own->seg = Segment::create(s.segments[s.rank].name() + ".b" + std::to_string(own->index), bytes,
                               /*reserve=*/true);  // zero-filled
  } catch (const Error& e) {
    // Ordinary memory instead: its all-reduces take the slot algorithm (the peers see no registered stamp).
    DDP_LOG(Warn, "shm: rank ", s.rank, ": no shared memory for a ", bytes,
            "-byte communication buffer, using ordinary memory (all-reduces of it are slower): ", e.what());
    return ProcessGroup::allocate_comm_buffer(numel, dtype, device);
  }
  // Drop the registry entries of freed buffers (their addresses may come back).
  std::erase_if(s.registry, [](const auto& e) { return e.second.own.expired(); });
  s.registry[static_cast<const char*>(own->seg.data())] = {own, own->index};
  void* data = own->seg.data();
  return CommBuffer{data, numel, dtype, device, std::shared_ptr<void>(std::move(own))};
}

uint64_t ShmProcessGroup::direct_allreduces() const { return impl_->direct_count.load(); }
uint64_t ShmProcessGroup::direct_gather_scatters() const { return impl_->direct_gather_scatter.load(); }
size_t ShmProcessGroup::peer_buffers_mapped() const { return impl_->peer_buffers_mapped.load(); }

// After the first mark: every rank (this one included) stamped the same registered buffer (and with
// same_offset the same offset). The same index on every rank keeps unmap_freed_peer_buffers() right.
bool ShmProcessGroup::Impl::all_agree_on_direct(const CollectiveDesc& d, bool same_offset) const {
  if (stamp_direct_buffer == 0) return false;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const CallStamp& st = cb[q]->call[d.seq % 2];
    if (st.direct_buffer.load(std::memory_order_relaxed) != stamp_direct_buffer ||
        (same_offset && st.direct_offset.load(std::memory_order_relaxed) != stamp_direct_offset))
      return false;
  }
  return true;
}

// Peer q's registered buffer `index`, mapped on first use (its name lives until the peer's first in-place
// all-reduce of it has ended, which needs this rank's "reduced" mark, so it is still there now).
char* ShmProcessGroup::Impl::peer_buffer(int q, uint64_t index, size_t end_bytes) {
  auto key = std::make_pair(q, index);
  auto it = peer_buffers.find(key);
  if (it == peer_buffers.end()) {
    const std::string name = segments[q].name() + ".b" + std::to_string(index);
    it = peer_buffers.emplace(key, Segment::open(name)).first;
    peer_buffers_mapped = peer_buffers.size();
  }
  DDP_CHECK(it->second.size() >= end_bytes, "shm: registered buffer ", it->second.name(), " of rank ", q,
            " has ", it->second.size(), " bytes but the all-reduce needs ", end_bytes,
            ": the ranks allocated their communication buffers with different sizes (allocate them in the "
            "same order and sizes on every rank)");
  return static_cast<char*>(it->second.data());
}

// Peers' buffers of an index whose own buffer is gone (freed: e.g. the buckets DDP rebuilt after its first
// step) are unmapped. An in-place all-reduce needs every rank to stamp the same index, ours included, so none
// can name that index again; and the mapping alone would keep the peer's freed memory (its name long
// unlinked) resident until the group ends - a second copy of every bucket on the host.
void ShmProcessGroup::Impl::unmap_freed_peer_buffers() {
  if (peer_buffers.empty()) return;
  std::vector<uint64_t> live;
  {
    std::lock_guard<std::mutex> g(reg_mu);
    for (const auto& [base, r] : registry)
      if (!r.own.expired()) live.push_back(r.index);
  }
  std::erase_if(peer_buffers, [&](const auto& e) {
    return std::find(live.begin(), live.end(), e.first.second) == live.end();
  });
  peer_buffers_mapped = peer_buffers.size();
}

// The in-place all-reduce: rank r reduces part r of the range, in rank order, straight from every rank's
// buffer, and writes the result into part r of every rank's buffer. The parts are disjoint, and no rank
// touches its buffer outside this collective until the second mark says every rank is done with it.
void ShmProcessGroup::Impl::direct_allreduce(const CollectiveDesc& d, const DirectRef& ref) {
  const size_t es = dtype_size(d.dtype);
  const size_t len = static_cast<size_t>(d.count);
  const size_t end_bytes = ref.offset + len * es;
  unmap_freed_peer_buffers();
  std::vector<char*> bufs(size);
  for (int q = 0; q < size; ++q)
    bufs[q] =
        (q == rank ? static_cast<char*>(ref.own->seg.data()) : peer_buffer(q, ref.own->index, end_bytes)) +
        ref.offset;
  // Parts of ceil(len / size) rounded up to 64 bytes (never 0: a range shorter than the world has parts too).
  const size_t align = 64 / es;
  const size_t per_rank = (len + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
  const size_t part = (per_rank + align - 1) / align * align;
  const size_t lo = std::min(len, part * static_cast<size_t>(rank));
  const size_t hi = std::min(len, part * static_cast<size_t>(rank + 1));
  std::vector<const void*> inputs(size);
  std::vector<void*> outs(size);
  for (int q = 0; q < size; ++q) {
    inputs[q] = bufs[q] + lo * es;
    outs[q] = bufs[q] + lo * es;
  }
  reduce_to_all(outs.data(), size, inputs.data(), size, hi - lo, d.dtype, d.op, size);
  const uint32_t b = base();
  publish(b + 3);
  wait_all(b + 3);
  end_step();
  // Every peer mapped our buffer before its mark 3: the name can go.
  ref.own->unlink();
  direct_count.fetch_add(1, std::memory_order_relaxed);
}

// The in-place all-gather: every rank copies each peer's input straight out of the peer's registered buffer
// (at the offset the peer stamped: in place, each rank's input is its own chunk of the output) into its own
// output. A rank writes only its own output, outside its own input; the second mark says every peer finished
// reading this rank's input, so the caller may change it after the Work completes.
void ShmProcessGroup::Impl::direct_allgather(const CollectiveDesc& d, const DirectRef& ref, const char* in,
                                             char* out) {
  const size_t es = dtype_size(d.dtype);
  const size_t bytes = static_cast<size_t>(d.count) * es;
  unmap_freed_peer_buffers();
  for (int q = 0; q < size; ++q) {
    char* dst = out + static_cast<size_t>(q) * bytes;
    if (q == rank) {
      if (dst != in) std::memmove(dst, in, bytes);
      continue;
    }
    const uint64_t offset = cb[q]->call[d.seq % 2].direct_offset.load(std::memory_order_relaxed);
    std::memcpy(dst, peer_buffer(q, ref.own->index, offset + bytes) + offset, bytes);
  }
  const uint32_t b = base();
  publish(b + 3);
  wait_all(b + 3);
  end_step();
  ref.own->unlink();  // every peer mapped our buffer before its mark 3
  direct_gather_scatter.fetch_add(1, std::memory_order_relaxed);
}

// The in-place reduce-scatter: rank r reduces chunk r of every rank's input, in rank order, straight out of
// the registered buffers (the same offset on every rank), into its output - which may be chunk r of its own
// input (in place: no peer reads that chunk of ours). The second mark as above.
void ShmProcessGroup::Impl::direct_reduce_scatter(const CollectiveDesc& d, const DirectRef& ref, char* out) {
  const size_t es = dtype_size(d.dtype);
  const size_t chunk = static_cast<size_t>(d.count / size);
  const size_t end_bytes = ref.offset + static_cast<size_t>(d.count) * es;
  unmap_freed_peer_buffers();
  std::vector<const void*> inputs(size);
  for (int q = 0; q < size; ++q) {
    const char* base_q =
        q == rank ? static_cast<const char*>(ref.own->seg.data()) : peer_buffer(q, ref.own->index, end_bytes);
    inputs[q] = base_q + ref.offset + static_cast<size_t>(rank) * chunk * es;
  }
  void* outs[1] = {out};
  reduce_to_all(outs, 1, inputs.data(), size, chunk, d.dtype, d.op, size);  // out may alias inputs[rank]
  const uint32_t b = base();
  publish(b + 3);
  wait_all(b + 3);
  end_step();
  ref.own->unlink();
  direct_gather_scatter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ddp::dist
