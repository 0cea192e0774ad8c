// fashion_mnist.cpp - file names of the two splits, shape and label-range checks, the normalisation.
#include "runtime/data/fashion_mnist.h"

#include "runtime/core/error.h"
#include "runtime/data/dataset_files.h"
#include "runtime/data/idx.h"

namespace ddp::data {

Split parse_split(const std::string& s) {
  if (s == "train") return Split::Train;
  if (s == "test") return Split::Test;
  DDP_FAIL("unknown data split '", s, "'; use 'train' or 'test'");
}

const char* split_name(Split s) { return s == Split::Train ? "train" : "test"; }

Tensor normalize_fashion_mnist(const uint8_t* pixels, const Shape& shape) {
  Tensor out = Tensor::empty(shape, DType::F32);
  float* img = out.data<float>();
  const float scale = 1.0f / (255.0f * kFashionMnistStd), shift = kFashionMnistMean / kFashionMnistStd;
  for (int64_t i = 0; i < out.numel(); ++i) img[i] = static_cast<float>(pixels[i]) * scale - shift;
  return out;
}

FashionMnist load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = dir + (split == Split::Train ? "/train" : "/t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  IdxImagesAndLabels raw = read_idx_images_and_labels(
      images_path, labels_path, package_if_packaged_path(dir, kFashionMnistDir, kFashionMnistPackage));
  const auto& dims = raw.images.dims;
  DDP_CHECK(dims[1] == 28 && dims[2] == 28, "Fashion-MNIST file '", images_path, "': images are ", dims[1],
            " x ", dims[2], ", expected 28 x 28; this is not Fashion-MNIST");

  const int64_t n = dims[0];
  FashionMnist out;
  out.images = normalize_fashion_mnist(raw.images.data.data(), {n, 1, 28, 28});

  out.labels = Tensor::empty({n}, DType::I64);
  int64_t* lab = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t v = raw.labels.data[static_cast<size_t>(i)];
    DDP_CHECK(v < kFashionMnistClasses, "Fashion-MNIST file '", labels_path, "': label ", int{v},
              " of sample ", i, " is outside 0..9; the file is corrupt");
    lab[i] = v;
  }
  return out;
}

std::shared_ptr<TensorDataset> fashion_mnist_dataset(const std::string& dir, Split split) {
  FashionMnist d = load_fashion_mnist(dir, split);
  return std::make_shared<TensorDataset>(std::move(d.images), std::move(d.labels));
}

}  // namespace ddp::data
