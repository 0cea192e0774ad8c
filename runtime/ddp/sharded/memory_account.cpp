// memory_account.cpp - the ZeRO memory formula in ddp.cpp's one-precision form and the account's table
// (memory_account.h).
#include "runtime/ddp/sharded/memory_account.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/core/error.h"

namespace ddp {

double zero_formula_bytes(int stage, int64_t num_params, int element_bytes, int optimizer_bytes_per_param,
                          int world) {
  DDP_CHECK(stage >= 0 && stage <= 3 && world >= 1, "zero_formula_bytes: stage ", stage, ", world ", world);
  const double psi = static_cast<double>(num_params), b = element_bytes, k = optimizer_bytes_per_param,
               n = world;
  switch (stage) {
    case 0:
      return (b + b + k) * psi;
    case 1:
      return (b + b) * psi + k * psi / n;
    case 2:
      return b * psi + (b + k) * psi / n;
    default:
      return (b + b + k) * psi / n;
  }
}

double MemoryAccount::predicted_bytes() const {
  return zero_formula_bytes(stage, num_params, element_bytes, optimizer_bytes_per_param, world);
}

double MemoryAccount::deviation() const {
  const double p = predicted_bytes();
  return p > 0 ? static_cast<double>(measured_bytes()) / p - 1.0 : 0.0;
}

int64_t resident_peak_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream is(line.substr(6));
      int64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

std::string MemoryAccount::table() const {
  auto mib = [](double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f MiB", bytes / (1024.0 * 1024.0));
    return std::string(buf);
  };
  std::ostringstream os;
  os << "memory per rank (ZeRO stage " << stage << ", world " << world << ", " << num_params
     << " parameters, K = " << optimizer_bytes_per_param << " B/param):\n"
     << "  parameters " << mib(parameter_bytes) << ", gradients " << mib(gradient_bytes) << ", optimizer state "
     << mib(optimizer_bytes) << "\n"
     << "  together " << mib(static_cast<double>(measured_bytes())) << "; ZeRO formula "
     << mib(predicted_bytes()) << " (" << (deviation() >= 0 ? "+" : "") << std::round(deviation() * 1000) / 10
     << "%)\n"
     << "  peaks: gradient buckets " << mib(bucket_peak_bytes) << ", gathered parameters "
     << mib(gathered_peak_bytes) << ", resident set " << mib(resident_peak_bytes);
  return os.str();
}

}  // namespace ddp
