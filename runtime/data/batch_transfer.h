// batch_transfer.h - moving an assembled host batch to the loader's device, and handing it over to the
// consuming thread's stream. Only the GPU path does anything; the CPU path returns the tensors unchanged.
//
// Stream model (CUDA): the producing thread copies on a dedicated per-device "data copy" stream (created
// once, never destroyed, because device blocks remember the stream they were allocated on), from pinned host
// memory, then waits for that stream - blocking only the prefetch thread, while the training loop keeps
// computing. When the consumer takes the batch, the device blocks are recorded as used by the consumer's
// current stream, so freeing them later waits for the consumer's kernels (like PyTorch's record_stream).
#pragma once
#include "runtime/core/device.h"
#include "runtime/tensor/tensor.h"

namespace ddp::data {

// Copies a host tensor to `device` (a no-op for the CPU) and returns when the copy is complete.
Tensor transfer_to_device(const Tensor& host, Device device);
// Marks a device tensor as used by the calling thread's current stream (a no-op for CPU tensors).
void hand_over_to_current_stream(const Tensor& t);

}  // namespace ddp::data
