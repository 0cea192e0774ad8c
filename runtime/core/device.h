// device.h - where a tensor lives (CPU or CUDA:i) and how many GPUs this process can use.
// A build with CUDA on a machine without a GPU or driver sees zero GPUs: never an error.
#pragma once
#include <cstdint>
#include <string>

namespace ddp {

struct Device {
  enum class Kind : uint8_t { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::CUDA, i}; }
  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // Parses "cpu", "cuda", "cuda:N"; "auto" gives cuda:0 when a GPU is present, else cpu.
  static Device parse(const std::string& s);
};

// The device of one rank's tensors from a --device value (train's rule). Stated once:
// - "cuda:N" is GPU N whatever LOCAL_RANK says: an explicit index wins (two local ranks given the same
//   cuda:N share that GPU, which NCCL refuses; the Gloo-staged path allows it);
// - "cuda", and "auto" when a GPU is usable, take GPU local_rank % gpu_count: each launched process its own
//   GPU, as torchrun and ddprun expect (local_rank: LOCAL_RANK, else the rank);
// - "cpu", and "auto" without a usable GPU, the CPU.
// gpu_count is the number of usable GPUs (cuda_device_count() in a program; any number in a test).
Device device_for_rank(const std::string& spec, int local_rank, int gpu_count);

// True when this binary was built with CUDA support (DDP_CUDA on).
bool cuda_compiled();
// Number of usable GPUs: 0 when built without CUDA, or when the CUDA runtime reports no device or no driver.
int cuda_device_count();
// Why cuda_device_count() is 0 (empty when GPUs are present): "built without CUDA", or the runtime's message.
std::string cuda_unavailable_reason();

// The calling thread's current CUDA device (0 without CUDA).
int current_cuda_device();
// Makes GPU `index` the calling thread's current CUDA device (kernels launch on its streams).
void set_current_cuda_device(int index);
// Waits until all work queued on the current GPU has finished (no-op without CUDA or without a GPU).
void device_synchronize();

}  // namespace ddp
