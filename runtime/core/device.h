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

// True when this binary was built with CUDA support (DDP_CUDA on).
bool cuda_compiled();
// Number of usable GPUs: 0 when built without CUDA, or when the CUDA runtime reports no device or no driver.
int cuda_device_count();
// Why cuda_device_count() is 0 (empty when GPUs are present): "built without CUDA", or the runtime's message.
std::string cuda_unavailable_reason();

// The calling thread's current CUDA device (0 without CUDA).
int current_cuda_device();
// Waits until all work queued on the current GPU has finished (no-op without CUDA or without a GPU).
void device_synchronize();

}  // namespace ddp
