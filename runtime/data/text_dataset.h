// text_dataset.h - a character-level language-model dataset: a token stream (the bytes of a text file, or
// synthetic tokens) cut into windows of block_size T, each sample an input and its one-step-shifted target.
//
// Sample definition (fixed, reproducible, no randomness in the dataset itself):
//   sample i starts at byte i * T (non-overlapping starts, stride T);
//   x = tokens[i*T     .. i*T + T)      int64 (T)
//   y = tokens[i*T + 1 .. i*T + T + 1)  int64 (T)   (the next token of each position of x)
//   num_samples = (len - 1) / T, so the last target token still exists.
// Which samples an epoch visits, and in what order, comes from the DistributedSampler in the DataLoader
// (shuffle with seed + epoch), so every epoch sees every window once, in a new order.
//
// Text is read as raw bytes: the vocabulary is the 256 byte values (UTF-8 multi-byte characters are several
// tokens). A UTF-8 byte-order mark at the start is dropped and CRLF line ends become LF; a lone CR stays.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/dataset.h"

namespace ddp::data {

constexpr const char* kMobyDickPath = "/usr/share/gocode/src/github.com/colinmarc/hdfs/testdata/mobydick.txt";
constexpr const char* kMobyDickPackage = "golang-github-colinmarc-hdfs-dev";
constexpr int64_t kByteVocabSize = 256;

// Drops a leading UTF-8 BOM (EF BB BF) and turns every CR LF into LF.
std::string normalize_text(std::string_view raw);
// The normalised bytes of a text file; a missing file names `debian_package` when it is not empty.
std::string read_text_file(const std::string& path, const std::string& debian_package = "");

// Train/validation split of a text: the last floor(len * val_fraction) bytes are validation, the rest train
// (contiguous, so no window straddles the two). 0 <= val_fraction < 1.
struct TextSplit {
  std::string train;
  std::string val;
};
TextSplit split_train_val(const std::string& text, double val_fraction = 0.1);

class TokenWindowDataset : public Dataset {
 public:
  // tokens: each in [0, vocab_size); block_size T >= 1; needs at least T + 1 tokens (one window).
  TokenWindowDataset(std::vector<int32_t> tokens, int64_t block_size, int64_t vocab_size);
  // Byte-level: each byte of `text` is a token (vocab 256).
  static std::shared_ptr<TokenWindowDataset> from_text(const std::string& text, int64_t block_size);

  int64_t size() const override { return num_samples_; }
  // x, y: int64 (B, T).
  DatasetBatch get_batch(std::span<const int64_t> indices, BatchMemory& memory) const override;
  using Dataset::get_batch;

  int64_t block_size() const { return block_size_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // Where sample i starts in the token stream (i * T).
  int64_t sample_start(int64_t i) const { return i * block_size_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t block_size_;
  int64_t vocab_size_;
  int64_t num_samples_;
};

// Moby Dick (Project Gutenberg text, header included) split into train/val windows of block_size.
struct TextDatasets {
  std::shared_ptr<TokenWindowDataset> train;
  std::shared_ptr<TokenWindowDataset> val;
};
TextDatasets load_text_datasets(const std::string& path, int64_t block_size, double val_fraction = 0.1,
                                const std::string& debian_package = "");
TextDatasets load_moby_dick(int64_t block_size, const std::string& path = kMobyDickPath,
                            double val_fraction = 0.1);

}  // namespace ddp::data
