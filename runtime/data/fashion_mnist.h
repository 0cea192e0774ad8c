// fashion_mnist.h - Fashion-MNIST (Zalando's 28x28 grey clothing images, 10 classes) as tensors, read from
// the gzip'd IDX files that the Debian package dataset-fashion-mnist installs.
//
// Normalisation: pixel bytes p in 0..255 become ((p / 255) - 0.2860) / 0.3530, the mean and standard
// deviation of the training images after scaling to [0, 1] (the figures torchvision users quote). The same
// constants are used for the test split, so a model sees the same transform in training and evaluation.
#pragma once
#include <memory>
#include <string>

#include "runtime/data/tensor_dataset.h"
#include "runtime/tensor/tensor.h"

namespace ddp::data {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;
constexpr int64_t kFashionMnistClasses = 10;

enum class Split { Train, Test };
// "train" or "test" (a ddp::Error names the accepted words otherwise).
Split parse_split(const std::string& s);
const char* split_name(Split s);

struct FashionMnist {
  Tensor images;  // float32 (N, 1, 28, 28), normalised as above
  Tensor labels;  // int64 (N), each in 0..9
};

// Pixel bytes (any shape) -> float32 of the same shape, normalised as above, in float32 arithmetic:
// p * (1 / (255 * std)) - mean / std. tools/ddp_torch.py repeats exactly this for PyTorch.
Tensor normalize_fashion_mnist(const uint8_t* pixels, const Shape& shape);

// Reads <dir>/train-*-ubyte.gz (60000 samples) or <dir>/t10k-*-ubyte.gz (10000). Errors name the file and,
// when it is missing, the package to install.
FashionMnist load_fashion_mnist(const std::string& dir = kFashionMnistDir, Split split = Split::Train);
// The same as a dataset for the DataLoader.
std::shared_ptr<TensorDataset> fashion_mnist_dataset(const std::string& dir = kFashionMnistDir,
                                                     Split split = Split::Train);

}  // namespace ddp::data
