// device_checks.h - index checks that run on the device and are raised on the host later, so that a GPU
// forward never waits for the device to learn whether an index was bad (PyTorch's device-side asserts, but
// recoverable: the error is an ordinary ddp::Error and the process goes on).
//
// An op that checks indices in a kernel (embedding, cross_entropy) asks for a slot: reserve_device_check()
// returns a pointer to one 64-bit word of a small per-device buffer, holding kNoBadPosition (all bits set);
// the kernel atomicMin's the first bad flat position into it (kernels/cpu/index_check.h) and reads or writes
// nothing through the bad index. The host keeps, per slot, what is needed to name the error: the op's
// message for a bad value at a position (the same text the CPU raises at once), the checked tensor itself
// (kept alive, so the bad value can be read back), its device and the training step the check belongs to.
//
// check_device_errors() copies the used slots to the host once (one small device-to-host copy per device,
// none when no check is pending), clears every pending record and, when a slot holds a position, raises the
// earliest check's error (program order), with the step, the device and how many other checks also failed.
// Tensor::item() calls it (a host read waits for the device anyway), and so do the training loop (every step
// reads the loss), checkpoints and the end of training; a program can call it whenever it wants the errors.
//
// The records are per thread (two ranks that are two threads of one process never see each other's errors)
// and per device. A record never outlives a check: a buffer that fills up (kSlotsPerDevice checks without a
// check_device_errors) is checked at the next reservation, so memory stays bounded in a loop that never reads
// the device. CPU ops check at once and use no slot; a record on the CPU device (host memory standing in for
// the device buffer) runs the same bookkeeping, which is how the CPU tests exercise it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/tensor/tensor.h"

namespace ddp {

struct DeviceCheck {
  // The checked tensor (int64 indices or targets); the bad value is read from it at check time.
  Tensor values;
  // The op's message for `value` found at flat `position` of `values` (names the op, the tensor, its shape,
  // the bound and the fix).
  std::function<std::string(int64_t value, int64_t position)> describe;
};

// Slots per device and thread between two checks; the next reservation past them checks first.
constexpr int64_t kSlotsPerDevice = 256;

// A slot on check.values' device for one kernel's report, set to "no error"; valid until the next
// check_device_errors() on this thread. The kernel must be queued on this thread's current stream of that
// device (a StreamGuard may change it between the op and the check: the check waits for each such stream).
unsigned long long* reserve_device_check(DeviceCheck check);

// Raises the earliest pending device-side check error of this thread (all devices), after clearing every
// pending record; returns quietly when none failed. The host waits for the current stream only when a check
// is pending.
void check_device_errors();

// The training step that checks reserved from now on belong to (named in the error); 0: not in a training
// step. Per thread. train (models/train.cpp) sets it to the step's number, counted from 1 as the log counts.
void set_device_check_step(int64_t step);
int64_t device_check_step();

// Checks reserved and not yet checked on this thread (all devices): for tests and diagnostics.
int64_t pending_device_checks();

}  // namespace ddp
