// float32_math.h - whether float32 GEMMs and convolutions on the GPU may use TF32 tensor cores (inputs rounded
// to a 10-bit mantissa, float32 accumulation): PyTorch's two switches with PyTorch's defaults.
//
//  - matmul: off by default ("highest": IEEE float32 FMAs), as torch.backends.cuda.matmul.allow_tf32 has been
//    since PyTorch 1.12 - a float32 GEMM's result is what a float32 program expects, and the 7x faster path is one
//    setting away (set_float32_matmul_precision("high"), DDP_FLOAT32_MATMUL_PRECISION=high, train's
//    --float32-matmul-precision high). bf16 training (ops/mixed_precision.h) uses tensor cores regardless.
//  - cuDNN convolutions: on by default, as torch.backends.cudnn.allow_tf32 (a convolution's error is dominated
//    by its long sums either way); off: set_cudnn_allow_tf32(false) or DDP_CUDNN_ALLOW_TF32=0.
// Process-wide, read by every GEMM and convolution launch; float64 and bf16 are never affected. The CPU
// kernels ignore both (they have no TF32). The environment is read once, at the first query.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace ddp {

enum class Float32MatmulPrecision {
  Highest,  // float32 FMAs only
  High,     // TF32 tensor cores allowed (PyTorch's "high"; its "medium" also allows bf16: ours maps it to High)
};

// "highest" | "high" | "medium" (as torch.set_float32_matmul_precision); anything else is an error naming the
// value and the choices.
Float32MatmulPrecision parse_float32_matmul_precision(std::string_view name, const char* what);
const char* float32_matmul_precision_name(Float32MatmulPrecision p);

void set_float32_matmul_precision(Float32MatmulPrecision p);
void set_float32_matmul_precision(std::string_view name);
Float32MatmulPrecision float32_matmul_precision();
void set_cudnn_allow_tf32(bool allow);
bool cudnn_allow_tf32();

// What a float32 GEMM / convolution launch may use, given the switches.
inline bool float32_gemm_may_use_tf32() { return float32_matmul_precision() != Float32MatmulPrecision::Highest; }

// cuDNN's math types (cudnnMathType_t, mirrored so that the rule is tested without cuDNN).
enum class ConvMathType { Default, TensorOp, TensorOpAllowConversion, Fma };
// The math type to run a cuDNN convolution algorithm with, given the one cuDNN's heuristics rated it with;
// nullopt when the switches forbid that algorithm. Without TF32 a float32 convolution keeps only algorithms
// rated without tensor cores and runs them with FMA math (cuDNN's default math allows TF32 on sm_80+); other
// dtypes, and float32 with TF32 allowed, run as rated.
std::optional<ConvMathType> conv_math_for(ConvMathType rated, bool is_float32, bool allow_tf32);

// One line for logs and benchmark headers: "float32 matmul highest (no TF32), cuDNN TF32 on".
std::string float32_math_summary();

}  // namespace ddp
