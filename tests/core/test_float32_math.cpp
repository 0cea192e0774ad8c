// test_float32_math.cpp - the TF32 switches (core/float32_math.h): PyTorch's defaults, the names, the
// environment, the errors, and the rule that picks a cuDNN convolution's math type. The GEMM and convolution
// launches that read them are tested on the GPU (tests/gpu/test_gpu_tf32.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/core/float32_math.h"

using namespace ddp;

TEST(Float32Math, DefaultsArePyTorchsMatmulOffCudnnOn) {
  // This test binary never sets the variables; a fresh process reads them once at the first query.
  if (std::getenv("DDP_FLOAT32_MATMUL_PRECISION") || std::getenv("DDP_CUDNN_ALLOW_TF32"))
    GTEST_SKIP() << "the environment sets the switches";
  EXPECT_EQ(float32_matmul_precision(), Float32MatmulPrecision::Highest);
  EXPECT_FALSE(float32_gemm_may_use_tf32());
  EXPECT_TRUE(cudnn_allow_tf32());
  EXPECT_EQ(float32_math_summary(), "float32 matmul highest (no TF32), cuDNN TF32 on");
}

TEST(Float32Math, SettersRoundTripAndRestore) {
  const Float32MatmulPrecision before = float32_matmul_precision();
  const bool cudnn_before = cudnn_allow_tf32();
  set_float32_matmul_precision("high");
  EXPECT_TRUE(float32_gemm_may_use_tf32());
  set_float32_matmul_precision("medium");  // PyTorch's medium also allows bf16: ours is TF32, as high
  EXPECT_EQ(float32_matmul_precision(), Float32MatmulPrecision::High);
  set_float32_matmul_precision("highest");
  EXPECT_FALSE(float32_gemm_may_use_tf32());
  set_cudnn_allow_tf32(false);
  EXPECT_FALSE(cudnn_allow_tf32());
  EXPECT_EQ(float32_math_summary(), "float32 matmul highest (no TF32), cuDNN TF32 off");
  set_float32_matmul_precision(before);
  set_cudnn_allow_tf32(cudnn_before);
}

TEST(Float32Math, ABadNameIsRefusedNamingTheValueAndTheChoices) {
  const Float32MatmulPrecision before = float32_matmul_precision();
  try {
    set_float32_matmul_precision("tf32");
    FAIL() << "accepted 'tf32'";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'tf32' is not valid"), std::string::npos) << m;
    EXPECT_NE(m.find("highest"), std::string::npos) << m;
    EXPECT_NE(m.find("high or medium"), std::string::npos) << m;
  }
  EXPECT_EQ(float32_matmul_precision(), before) << "a refused name changed the setting";
}

TEST(Float32Math, ConvMathRuleOverEveryRatedTypeDtypeAndSwitch) {
  using M = ConvMathType;
  for (M rated : {M::Default, M::TensorOp, M::TensorOpAllowConversion, M::Fma})
    for (bool is_float32 : {false, true})
      for (bool allow : {false, true}) {
        const auto got = conv_math_for(rated, is_float32, allow);
        const bool tensor_cores = rated == M::TensorOp || rated == M::TensorOpAllowConversion;
        if (!is_float32 || allow) {
          ASSERT_TRUE(got.has_value());
          EXPECT_EQ(*got, rated) << "runs as rated";
        } else if (tensor_cores) {
          EXPECT_FALSE(got.has_value()) << "a tensor-core algorithm is passed over without TF32";
        } else {
          ASSERT_TRUE(got.has_value());
          EXPECT_EQ(*got, M::Fma) << "default math would allow TF32 on sm_80+: FMA math instead";
        }
      }
}
