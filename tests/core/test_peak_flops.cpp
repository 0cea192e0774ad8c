// test_peak_flops.cpp - the peak that MFU is measured against (runtime/core/peak_flops.h): NVIDIA's H100/H200
// SXM datasheet figures by GPU name (cudaDeviceProp::name, e.g. "NVIDIA H200" on the project's GPU machine),
// labelled as datasheet figures, and none for PCIe/NVL variants, other GPUs or no GPU (then no MFU is
// printed).
#include <gtest/gtest.h>

#include "runtime/core/peak_flops.h"

using ddp::datasheet_peak;

TEST(PeakFlops, H100AndH200SxmGetTheDatasheetFiguresWithTheirSource) {
  for (const char* name : {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}) {
    const auto f32 = datasheet_peak(name, false), bf16 = datasheet_peak(name, true);
    EXPECT_EQ(f32.tflops, 67) << name;
    EXPECT_EQ(bf16.tflops, 989) << name << ": dense, the datasheet's 1,979 is with sparsity";
    EXPECT_NE(f32.source.find("datasheet, FP32"), std::string::npos) << f32.source;
    EXPECT_NE(bf16.source.find("datasheet, BF16 Tensor Core dense"), std::string::npos) << bf16.source;
    EXPECT_EQ(bf16.source.find("measured"), std::string::npos) << "a datasheet figure is not a measurement";
    const auto tf32 = datasheet_peak(name, false, /*tf32=*/true);
    EXPECT_EQ(tf32.tflops, 494.5) << name << ": TF32 dense, the datasheet's 989 is with sparsity";
    EXPECT_NE(tf32.source.find("datasheet, TF32 Tensor Core dense"), std::string::npos) << tf32.source;
    EXPECT_EQ(datasheet_peak(name, true, true).tflops, 989) << "bf16 runs ignore the float32 switch";
  }
}

TEST(PeakFlops, OtherPartsAndNoGpuHaveNoPeak) {
  for (const char* name : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", ""}) {
    EXPECT_EQ(datasheet_peak(name, false).tflops, 0) << name;
    EXPECT_EQ(datasheet_peak(name, true).tflops, 0) << name;
  }
}
