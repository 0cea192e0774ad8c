// gpt.h - a decoder-only transformer shaped as GPT-2: token + learned position embeddings, pre-LayerNorm
// blocks of causal multi-head self-attention and a 4x GELU MLP with residuals, a final LayerNorm and a linear
// head, untied by default; tie_head makes the head use the token embedding's weight, as GPT-2 does (GPT-2
// small: 124M parameters tied, 163M untied). Byte-level vocabulary (256) by default.
#pragma once
#include <string>

#include "runtime/nn/layers.h"

namespace ddp::models {

struct GPTConfig {
  int64_t vocab = 256;
  int64_t context = 64;  // block size T
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t n_layer = 2;
  double dropout = 0.0;
  DType dtype = DType::F32;
  bool tie_head = false;  // logits = ln_f(h) wte^T: one (vocab, d_model) parameter for both
  // 0: none. Else the rows of wte and the head, >= vocab (GPT-2: 50257 -> 50304, a multiple of 64, so the
  // classifier's GEMMs run on whole tiles; llm.c pads the same way). forward's logits then have vocab_padded
  // columns of which the first vocab are classes: the loss takes CrossEntropyOptions::classes = vocab
  // (loss_classes()); the padding rows are never indexed and get zero gradient.
  int64_t vocab_padded = 0;
  int64_t table_rows() const { return vocab_padded > 0 ? vocab_padded : vocab; }
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::shared_ptr<nn::Linear> qkv, proj;
  int64_t n_head;
};

class MLPBlock : public nn::Module {
 public:
  explicit MLPBlock(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Linear> fc, proj;
};

class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLPBlock> mlp;
  std::shared_ptr<nn::Dropout> drop;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& c);
  // idx (B, T) int64 tokens, T <= context -> logits (B, T, config.table_rows()): the model's dtype, or
  // bfloat16 under bf16 compute (ops::linear_bf16_output; ops::cross_entropy takes them and gives a float32
  // loss).
  Tensor forward(const Tensor& idx) override;
  // Under bf16 compute, the tensors whose only consumers are bf16 GEMMs (or the loss) stay bfloat16 between
  // ops (on, the default): the layer norms' outputs, qkv, the attention's output, the logits - the same
  // values as float32 tensors holding them (the consumers round anyway), without the float32 copies and the
  // rounding and conversion passes. Off: every activation float32 (the comparison the tests make).
  void set_bf16_activations(bool on);
  // What the loss passes as CrossEntropyOptions::classes: vocab when padded, else 0 (every column).
  int64_t loss_classes() const { return config.vocab_padded > 0 ? config.vocab : 0; }
  // Continues `prompt` by n tokens sampled with temperature (seeded; greedy when temperature == 0).
  std::string generate(const std::string& prompt, int64_t n, double temperature, uint64_t seed);
  // Multiply-accumulates x2 per token of forward (6x for forward+backward), the
  // usual 6N + attention estimate.
  double flops_per_token_forward() const;
  GPTConfig config;

 private:
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::ModuleList<Block>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> head_;  // null when tied
};

}  // namespace ddp::models
