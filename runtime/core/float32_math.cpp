// float32_math.cpp - the TF32 switches (see float32_math.h): process-wide atomics, the environment read once.
#include "runtime/core/float32_math.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "runtime/core/error.h"

namespace ddp {
namespace {
std::atomic<int> g_matmul{static_cast<int>(Float32MatmulPrecision::Highest)};
std::atomic<bool> g_cudnn{true};
std::once_flag g_env_once;

bool parse_switch(const char* name, const char* value) {
  const std::string v = value;
  if (v == "1" || v == "on" || v == "true") return true;
  if (v == "0" || v == "off" || v == "false") return false;
  DDP_FAIL(name, "='", v, "' is not valid: expected 1/on/true or 0/off/false");
}

// Explicit set_* calls made before the first query win over the environment: they store after it was read.
void read_env_once() {
  std::call_once(g_env_once, [] {
    if (const char* v = std::getenv("DDP_FLOAT32_MATMUL_PRECISION"); v && *v)
      g_matmul.store(static_cast<int>(parse_float32_matmul_precision(v, "DDP_FLOAT32_MATMUL_PRECISION")));
    if (const char* v = std::getenv("DDP_CUDNN_ALLOW_TF32"); v && *v)
      g_cudnn.store(parse_switch("DDP_CUDNN_ALLOW_TF32", v));
  });
}
}  // namespace

Float32MatmulPrecision parse_float32_matmul_precision(std::string_view name, const char* what) {
  if (name == "highest") return Float32MatmulPrecision::Highest;
  if (name == "high" || name == "medium") return Float32MatmulPrecision::High;
  DDP_FAIL(what, "='", std::string(name),
           "' is not valid: expected highest (float32 FMAs, the default), high or medium (TF32 tensor cores)");
}

const char* float32_matmul_precision_name(Float32MatmulPrecision p) {
  return p == Float32MatmulPrecision::Highest ? "highest" : "high";
}

void set_float32_matmul_precision(Float32MatmulPrecision p) {
  read_env_once();
  g_matmul.store(static_cast<int>(p));
}
void set_float32_matmul_precision(std::string_view name) {
  set_float32_matmul_precision(parse_float32_matmul_precision(name, "float32 matmul precision"));
}
Float32MatmulPrecision float32_matmul_precision() {
  read_env_once();
  return static_cast<Float32MatmulPrecision>(g_matmul.load(std::memory_order_relaxed));
}
void set_cudnn_allow_tf32(bool allow) {
  read_env_once();
  g_cudnn.store(allow);
}
bool cudnn_allow_tf32() {
  read_env_once();
  return g_cudnn.load(std::memory_order_relaxed);
}

std::optional<ConvMathType> conv_math_for(ConvMathType rated, bool is_float32, bool allow_tf32) {
  if (!is_float32 || allow_tf32) return rated;
  if (rated == ConvMathType::TensorOp || rated == ConvMathType::TensorOpAllowConversion) return std::nullopt;
  return ConvMathType::Fma;
}

std::string float32_math_summary() {
  const bool tf32 = float32_gemm_may_use_tf32();
  return std::string("float32 matmul ") + float32_matmul_precision_name(float32_matmul_precision()) +
         (tf32 ? " (TF32 tensor cores)" : " (no TF32)") + ", cuDNN TF32 " + (cudnn_allow_tf32() ? "on" : "off");
}

}  // namespace ddp
