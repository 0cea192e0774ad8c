// test_sharded_at_rest_device.cpp - a tensor without memory keeps its device (release_storage in
// runtime/tensor/storageless.h). ZeRO-3 drops each parameter's memory at rest and then sizes the shard of its
// gradient from the parameter's device; the first GPU run (2026-12-04, H200) found that shard on the CPU
// ("reduce_scatter: input is on cuda:0 but output on cpu") because a storage-less tensor said "cpu". The CUDA
// label below is only a label: nothing is allocated or read on a GPU, so this runs on the CPU.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/tensor/storageless.h"
#include "runtime/tensor/tensor.h"

using namespace ddp;

TEST(ShardedAtRest, ReleasedTensorKeepsItsDevice) {
  std::vector<float> host(6, 1.0f);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = {2, 3};
  impl->dtype = DType::F32;
  impl->storage = Storage::wrap(host.data(), host.size() * sizeof(float), Device::cuda(1), [] {});
  Tensor t(impl);
  ASSERT_EQ(t.device(), Device::cuda(1));
  release_storage(t);
  EXPECT_EQ(t.storage(), nullptr);
  EXPECT_EQ(t.device(), Device::cuda(1))
      << "a released tensor must keep its device, not fall back to the CPU";
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::F32);
}

TEST(ShardedAtRest, ReleasingTwiceOrACpuTensorKeepsTheDevice) {
  Tensor c = Tensor::zeros({4});
  release_storage(c);
  EXPECT_EQ(c.device(), Device::cpu());
  release_storage(c);  // already without memory: stays where it was
  EXPECT_EQ(c.device(), Device::cpu());
  std::vector<double> host(2);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = {2};
  impl->dtype = DType::F64;
  impl->storage = Storage::wrap(host.data(), sizeof(host[0]) * 2, Device::cuda(0), [] {});
  Tensor g(impl);
  release_storage(g);
  release_storage(g);
  EXPECT_EQ(g.device(), Device::cuda(0));
}
