// copy_cpu_only.cpp - the device memory primitives of a build without CUDA: host copies, and clear errors
// for anything that needs a GPU.
#ifndef DDP_WITH_CUDA
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/tensor/storage.h"

namespace ddp::detail {

void* cuda_allocate(size_t, int, void**) {
  DDP_FAIL(
      "a CUDA tensor was requested but ddp.cpp was built without CUDA; rebuild with -DDDP_CUDA=ON or use the "
      "cpu device");
}
void cuda_free(void*, int, void*, const std::vector<void*>&) {}
void* pinned_allocate(size_t nbytes) { return std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
void pinned_free(void* p) { std::free(p); }

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes, bool) {
  DDP_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "copy between ", src_dev.str(), " and ", dst_dev.str(),
            " needs CUDA, but ddp.cpp was built without it");
  if (nbytes) std::memcpy(dst, src, nbytes);
}
void fill_bytes_zero(void* dst, Device dev, size_t nbytes) {
  DDP_CHECK(dev.is_cpu(), "zero-fill on ", dev.str(), " needs CUDA");
  if (nbytes) std::memset(dst, 0, nbytes);
}
int64_t device_to_host_copies() { return 0; }

}  // namespace ddp::detail
#endif
