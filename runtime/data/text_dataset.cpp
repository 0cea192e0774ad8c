// text_dataset.cpp - text normalisation, the train/val split and window gathering.
#include "runtime/data/text_dataset.h"

#include <fstream>
#include <iterator>

#include "runtime/core/error.h"
#include "runtime/data/dataset_files.h"

namespace ddp::data {

std::string normalize_text(std::string_view raw) {
  if (raw.size() >= 3 && static_cast<uint8_t>(raw[0]) == 0xEF && static_cast<uint8_t>(raw[1]) == 0xBB &&
      static_cast<uint8_t>(raw[2]) == 0xBF)
    raw.remove_prefix(3);
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r' && i + 1 < raw.size() && raw[i + 1] == '\n') continue;  // the LF follows
    out.push_back(raw[i]);
  }
  return out;
}

std::string read_text_file(const std::string& path, const std::string& debian_package) {
  require_data_file(path, debian_package);
  std::ifstream in(path, std::ios::binary);
  DDP_CHECK(in.good(), "text file '", path, "': cannot be opened for reading (permissions?)");
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DDP_CHECK(!in.bad(), "text file '", path, "': read error");
  return normalize_text(raw);
}

TextSplit split_train_val(const std::string& text, double val_fraction) {
  DDP_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
            "split_train_val: val_fraction must be in [0, 1), got ", val_fraction);
  const auto val_len = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  const size_t train_len = text.size() - val_len;
  return {text.substr(0, train_len), text.substr(train_len)};
}

TokenWindowDataset::TokenWindowDataset(std::vector<int32_t> tokens, int64_t block_size, int64_t vocab_size)
    : tokens_(std::move(tokens)), block_size_(block_size), vocab_size_(vocab_size) {
  DDP_CHECK(block_size_ >= 1, "TokenWindowDataset: block_size must be >= 1, got ", block_size_);
  DDP_CHECK(vocab_size_ >= 1, "TokenWindowDataset: vocab_size must be >= 1, got ", vocab_size_);
  const auto len = static_cast<int64_t>(tokens_.size());
  DDP_CHECK(len >= block_size_ + 1, "TokenWindowDataset: ", len,
            " tokens are too few for one window of block_size ", block_size_,
            " (need block_size + 1 = ", block_size_ + 1, "); use a longer text or a smaller block_size");
  for (size_t i = 0; i < tokens_.size(); ++i)
    DDP_CHECK(tokens_[i] >= 0 && tokens_[i] < vocab_size_, "TokenWindowDataset: token ", tokens_[i],
              " at position ", i, " is outside the vocabulary [0, ", vocab_size_, ")");
  num_samples_ = (len - 1) / block_size_;
}

std::shared_ptr<TokenWindowDataset> TokenWindowDataset::from_text(const std::string& text,
                                                                  int64_t block_size) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<uint8_t>(text[i]);
  return std::make_shared<TokenWindowDataset>(std::move(tokens), block_size, kByteVocabSize);
}

DatasetBatch TokenWindowDataset::get_batch(std::span<const int64_t> indices, BatchMemory& memory) const {
  check_indices(indices, "TokenWindowDataset::get_batch");
  const auto b = static_cast<int64_t>(indices.size()), t = block_size_;
  DatasetBatch out{memory.empty({b, t}, DType::I64), memory.empty({b, t}, DType::I64)};
  int64_t* x = out.x.data<int64_t>();
  int64_t* y = out.y.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const int32_t* src = tokens_.data() + sample_start(indices[static_cast<size_t>(r)]);
    for (int64_t j = 0; j < t; ++j) {
      x[r * t + j] = src[j];
      y[r * t + j] = src[j + 1];
    }
  }
  return out;
}

TextDatasets load_text_datasets(const std::string& path, int64_t block_size, double val_fraction,
                                const std::string& debian_package) {
  TextSplit split = split_train_val(read_text_file(path, debian_package), val_fraction);
  for (const std::string* part : {&split.train, &split.val}) {
    if (part == &split.val && !(val_fraction > 0)) continue;
    DDP_CHECK(static_cast<int64_t>(part->size()) >= block_size + 1, "text file '", path, "': its ",
              part == &split.train ? "training" : "validation", " part has ", part->size(),
              " characters, too few for one window of ", block_size + 1, " (block size ", block_size,
              " + 1); use a longer text (is the file truncated?) or a smaller block size");
  }
  TextDatasets out;
  out.train = TokenWindowDataset::from_text(split.train, block_size);
  if (val_fraction > 0) out.val = TokenWindowDataset::from_text(split.val, block_size);
  return out;
}

TextDatasets load_moby_dick(int64_t block_size, const std::string& path, double val_fraction) {
  return load_text_datasets(path, block_size, val_fraction,
                            package_if_packaged_path(path, kMobyDickPath, kMobyDickPackage));
}

}  // namespace ddp::data
