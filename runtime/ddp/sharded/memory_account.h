// memory_account.h - per-rank memory of data-parallel training by kind, beside what the ZeRO formulas predict.
//
// The ZeRO paper (Rajbhandari et al. 2020) counts mixed-precision Adam as 2 + 2 + 12 bytes per parameter
// (fp16 parameters and gradients, fp32 master weights + two moments). ddp.cpp trains in one precision, so its
// form is, with b bytes per element (4 for float32), K bytes of optimizer state per parameter (AdamW 2b,
// SGD with momentum b, plain SGD 0), Psi parameters and N ranks:
//   stage 0 (DDP)   (b + b + K) Psi
//   stage 1         (b + b) Psi + K Psi / N
//   stage 2         b Psi + (b + K) Psi / N
//   stage 3         (b + b + K) Psi / N
// (no master copy: the parameters are the master weights). Float32 AdamW: 16 Psi, 8 Psi + 8 Psi/N,
// 4 Psi + 12 Psi/N, 16 Psi/N. The measured figures add the padding of the shards (at most 16 N elements per
// bucket) and leave out what the formulas leave out: buckets in flight, gathered parameters, activations.
#pragma once
#include <cstdint>
#include <string>

namespace ddp {

struct MemoryAccount {
  int stage = 0;
  int world = 1;
  int64_t num_params = 0;          // Psi: elements of all parameters
  int element_bytes = 4;           // b
  int optimizer_bytes_per_param = 0;  // K
  // Measured on this rank (bytes held at rest, after a step).
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  // Peaks so far: gradient buckets alive at once (the reduce-scatter's or all-reduce's input), gathered
  // parameters alive at once (ZeRO-3), and the process's resident set (VmHWM).
  int64_t bucket_peak_bytes = 0;
  int64_t gathered_peak_bytes = 0;
  int64_t resident_peak_bytes = 0;

  int64_t measured_bytes() const { return parameter_bytes + gradient_bytes + optimizer_bytes; }
  // The formula above for this stage, world and K.
  double predicted_bytes() const;
  // measured / predicted - 1.
  double deviation() const;
  // A few lines for train's summary and the docs.
  std::string table() const;
};

// The formula for any stage (0-3), in bytes.
double zero_formula_bytes(int stage, int64_t num_params, int element_bytes, int optimizer_bytes_per_param,
                          int world);
// The process's peak resident set in bytes (VmHWM of /proc/self/status; 0 where unreadable).
int64_t resident_peak_bytes();

}  // namespace ddp
