// device_checks.cpp - the per-thread, per-device records of device-side index checks (device_checks.h).
#include "runtime/tensor/device_checks.h"

#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/index_check.h"
#ifdef DDP_WITH_CUDA
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"
#endif

namespace ddp {
namespace {

struct PendingCheck {
  DeviceCheck check;
  int64_t slot = 0;    // its word in the device's buffer
  int64_t step = 0;    // the training step it belongs to (0: none)
  uint64_t order = 0;  // reservation order on this thread, over all devices: the earliest error wins
};

struct DeviceRecord {
  Device device;
  Tensor slots;  // int64 (kSlotsPerDevice) on `device`; -1 (all bits: kNoBadPosition) where no error
  std::vector<PendingCheck> pending;  // pending[i] reports into slot i
  std::vector<void*> streams;         // CUDA: the streams current at the pending checks' reservations
  void* reset_stream = nullptr;       // CUDA: the stream the slots' last reset (or first fill) was queued on
};

#ifdef DDP_WITH_CUDA
// Notes the stream the reserving op queues its kernel on (this thread's current stream of the device).
void note_stream(DeviceRecord& r) {
  if (!r.device.is_cuda()) return;
  cuda::DeviceGuard on_device(r.device.index);
  void* s = cuda::current_stream();
  for (void* known : r.streams)
    if (known == s) return;
  r.streams.push_back(s);
  if (r.reset_stream != nullptr && r.reset_stream != s) {  // the kernel must not report before the reset
    cudaEvent_t ev;
    DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    DDP_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(r.reset_stream)));
    DDP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), ev, 0));
    DDP_CUDA_CHECK(cudaEventDestroy(ev));
  }
}
// Makes the current stream wait for the other streams that checks were queued on (a StreamGuard between
// the op and the check), so the slots' copy comes after every kernel that reports into them.
void order_after_reporting_streams(DeviceRecord& r) {
  cudaStream_t current = cuda::current_stream();
  for (void* other : r.streams) {
    if (other == current) continue;
    cudaEvent_t ev;
    DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    DDP_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(other)));
    DDP_CUDA_CHECK(cudaStreamWaitEvent(current, ev, 0));
    DDP_CUDA_CHECK(cudaEventDestroy(ev));
  }
  r.streams.clear();
}
#endif

struct ThreadRecords {
  std::vector<DeviceRecord> devices;
  int64_t step = 0;
  uint64_t next_order = 0;
};

ThreadRecords& records() {
  thread_local ThreadRecords r;
  return r;
}

DeviceRecord& record_of(Device device) {
  auto& devices = records().devices;
  for (auto& r : devices)
    if (r.device == device) return r;
  DeviceRecord r;
  r.device = device;
#ifdef DDP_WITH_CUDA
  std::optional<cuda::DeviceGuard> on_device;
  if (device.is_cuda()) {
    on_device.emplace(device.index);
    r.reset_stream = cuda::current_stream();
  }
#endif
  r.slots = Tensor::full({kSlotsPerDevice}, -1.0, DType::I64, device);
  devices.push_back(std::move(r));
  return devices.back();
}

struct Failure {
  PendingCheck check;
  Device device;
  int64_t position = 0;
};

// Reads `record`'s used slots (one copy; the device's current stream is waited for), resets them, clears its
// pending checks and returns the failures among them.
std::vector<Failure> collect(DeviceRecord& record) {
  std::vector<Failure> failures;
  if (record.pending.empty()) return failures;
  std::vector<PendingCheck> pending = std::move(record.pending);
  record.pending.clear();
#ifdef DDP_WITH_CUDA
  // The copy and the reset go on the record's device's current stream, where its ops queued their kernels.
  std::optional<cuda::DeviceGuard> on_device;
  if (record.device.is_cuda()) {
    on_device.emplace(record.device.index);
    order_after_reporting_streams(record);
  }
#endif
  Tensor used = record.slots.slice0(0, static_cast<int64_t>(pending.size()));
  // The CPU stand-in's to(cpu) would be the buffer itself, which the reset below overwrites.
  const Tensor host = used.device().is_cpu() ? used.clone() : used.to(Device::cpu());
  used.fill_(-1.0);  // queued after the copy on the same stream
#ifdef DDP_WITH_CUDA
  if (record.device.is_cuda()) record.reset_stream = cuda::current_stream();
#endif
  const int64_t* positions = host.data<int64_t>();
  for (auto& p : pending) {
    const auto position = static_cast<unsigned long long>(positions[p.slot]);
    if (position != kernels::cpu::kNoBadPosition)
      failures.push_back(Failure{std::move(p), record.device, static_cast<int64_t>(position)});
  }
  return failures;
}

[[noreturn]] void raise(const Failure& f, size_t others) {
  const Tensor& values = f.check.check.values;
  DDP_CHECK(f.position >= 0 && f.position < values.numel(), "a device-side index check on ", f.device.str(),
            " reported position ", f.position, " of a tensor of shape ", shape_str(values.shape()),
            ", which has no such element (its slot was overwritten: a kernel wrote outside its own memory)");
  const Tensor element = values.view({-1}).slice0(f.position, f.position + 1).to(Device::cpu());
  const int64_t value = element.data<int64_t>()[0];
  const std::string step = f.check.step > 0 ? " in training step " + std::to_string(f.check.step) : "";
  const std::string more = others == 0 ? ""
                                       : "; " + std::to_string(others) + " more device-side check" +
                                             (others == 1 ? "" : "s") + " failed since the last check";
  DDP_FAIL(f.check.check.describe(value, f.position), " [found on ", f.device.str(),
           " by a device-side check", step, ", raised at the next host read (ddp::check_device_errors)", more,
           "]");
}

}  // namespace

unsigned long long* reserve_device_check(DeviceCheck check) {
  DDP_CHECK(check.values.defined() && check.values.dtype() == DType::I64 && check.describe,
            "reserve_device_check: needs the checked int64 tensor and a message for a bad value");
  const Device device = check.values.device();
  ThreadRecords& t = records();
  size_t index = 0;
  {
    DeviceRecord& r = record_of(device);
    index = static_cast<size_t>(&r - t.devices.data());
  }
  if (static_cast<int64_t>(t.devices[index].pending.size()) >= kSlotsPerDevice) check_device_errors();
  DeviceRecord& r = t.devices[index];
#ifdef DDP_WITH_CUDA
  note_stream(r);
#endif
  PendingCheck p;
  p.check = std::move(check);
  p.slot = static_cast<int64_t>(r.pending.size());
  p.step = t.step;
  p.order = t.next_order++;
  r.pending.push_back(std::move(p));
  return reinterpret_cast<unsigned long long*>(r.slots.data<int64_t>() + r.pending.back().slot);
}

void check_device_errors() {
  std::vector<Failure> failures;
  for (auto& r : records().devices) {  // every device cleared before anything is raised
    std::vector<Failure> f = collect(r);
    for (auto& x : f) failures.push_back(std::move(x));
  }
  if (failures.empty()) return;
  size_t first = 0;
  for (size_t i = 1; i < failures.size(); ++i)
    if (failures[i].check.order < failures[first].check.order) first = i;
  raise(failures[first], failures.size() - 1);
}

void set_device_check_step(int64_t step) { records().step = step; }
int64_t device_check_step() { return records().step; }

int64_t pending_device_checks() {
  int64_t n = 0;
  for (const auto& r : records().devices) n += static_cast<int64_t>(r.pending.size());
  return n;
}

}  // namespace ddp
