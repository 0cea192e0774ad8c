// gpt.cpp - GPT-2 style initialisation (N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)),
// the forward pass and sampling.
#include "models/gpt.h"

#include <cmath>
#include <random>

#include "runtime/autograd/node.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/mixed_precision.h"
#include "runtime/ops/mlp_bf16.h"
#include "runtime/ops/shape.h"
#include "runtime/ops/softmax.h"

namespace ddp::models {

namespace {
void gpt2_init(nn::Linear& l, double std) {
  l.weight.copy_from(Tensor::randn(l.weight.shape(), nn::next_init_seed(), l.weight.dtype(), std));
  if (l.bias.defined()) l.bias.zero_();
}
}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c) : n_head(c.n_head) {
  DDP_CHECK(c.d_model % c.n_head == 0, "GPT: d_model ", c.d_model, " must be divisible by n_head ", c.n_head);
  qkv = register_module("qkv", std::make_shared<nn::Linear>(c.d_model, 3 * c.d_model, true, c.dtype));
  proj = register_module("proj", std::make_shared<nn::Linear>(c.d_model, c.d_model, true, c.dtype));
  gpt2_init(*qkv, 0.02);
  gpt2_init(*proj, 0.02 / std::sqrt(2.0 * c.n_layer));
}
Tensor CausalSelfAttention::forward(const Tensor& x) {
  return (*proj)(ops::causal_self_attention((*qkv)(x), n_head));
}

MLPBlock::MLPBlock(const GPTConfig& c) {
  fc = register_module("fc", std::make_shared<nn::Linear>(c.d_model, 4 * c.d_model, true, c.dtype));
  proj = register_module("proj", std::make_shared<nn::Linear>(4 * c.d_model, c.d_model, true, c.dtype));
  gpt2_init(*fc, 0.02);
  gpt2_init(*proj, 0.02 / std::sqrt(2.0 * c.n_layer));
}
// bf16 compute: one fused op (runtime/ops/mlp_bf16.h) after fc's and proj's forward pre-hooks (ZeRO-2 waits
// for their parameters' gathers there); unfused while either has a post-hook (a ZeRO-3 unit inside the MLP,
// which needs its own output). float32 / float64: as written.
Tensor MLPBlock::forward(const Tensor& x) {
  if (ops::takes_bf16_path(x) && ops::mlp_bf16_supports(x.device()) && !fc->has_forward_post_hooks() &&
      !proj->has_forward_post_hooks()) {
    fc->run_forward_pre_hooks();
    proj->run_forward_pre_hooks();
    return ops::mlp_bf16(x, fc->weight, fc->bias, proj->weight, proj->bias);
  }
  return (*proj)(ops::gelu((*fc)(x)));
}

Block::Block(const GPTConfig& c) {
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(c.d_model, 1e-5, c.dtype));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(c.d_model, 1e-5, c.dtype));
  mlp = register_module("mlp", std::make_shared<MLPBlock>(c));
  if (c.dropout > 0) drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
}
Tensor Block::forward(const Tensor& x) {
  Tensor a = (*attn)((*ln1)(x));
  if (drop) a = (*drop)(a);
  Tensor h = x + a;
  Tensor m = (*mlp)((*ln2)(h));
  if (drop) m = (*drop)(m);
  return h + m;
}

GPT::GPT(const GPTConfig& c) : config(c) {
  DDP_CHECK(c.vocab > 0 && c.context > 0 && c.n_layer > 0,
            "GPT: vocab, context and n_layer must be positive");
  DDP_CHECK(c.vocab_padded == 0 || c.vocab_padded >= c.vocab, "GPT: vocab_padded = ", c.vocab_padded,
            " is below vocab = ", c.vocab, "; pad up (e.g. to a multiple of 64) or set 0 for none");
  wte_ = register_module("wte", std::make_shared<nn::Embedding>(c.table_rows(), c.d_model, 0.02, c.dtype));
  wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(c.context, c.d_model, 0.01, c.dtype));
  blocks_ = register_module("blocks", std::make_shared<nn::ModuleList<Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks_->push_back(std::make_shared<Block>(c));
  ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.d_model, 1e-5, c.dtype));
  if (!c.tie_head) {
    head_ = register_module("head", std::make_shared<nn::Linear>(c.d_model, c.table_rows(), false, c.dtype));
    gpt2_init(*head_, 0.02);
  }
  set_bf16_activations(true);
}

void GPT::set_bf16_activations(bool on) {
  // qkv and the attention's output stay bf16 between the two GEMMs; proj's output is float32 again, for the
  // residual stream. The layer norms feed GEMMs only (qkv, the fused MLP, the classifier).
  for (auto& b : *blocks_) {
    b->ln1->bf16_output = on;
    b->ln2->bf16_output = on;
    b->attn->qkv->bf16_output = on;
  }
  ln_f_->bf16_output = on;
  if (head_) head_->bf16_output = on;
}

Tensor GPT::forward(const Tensor& idx) {
  DDP_CHECK(idx.dim() == 2 && idx.dtype() == DType::I64, "GPT: expected int64 tokens of shape (B, T), got ",
            dtype_name(idx.dtype()), " ", shape_str(idx.shape()));
  const int64_t T = idx.size(1);
  DDP_CHECK(T <= config.context, "GPT: sequence length ", T, " exceeds the context ", config.context);
  Tensor pos = Tensor::arange(T, DType::I64, idx.device());  // made on the device: no host copy per forward
  Tensor h = (*wte_)(idx) + (*wpe_)(pos);                    // (B, T, C) + (T, C)
  for (auto& b : *blocks_) h = (*b)(h);
  h = (*ln_f_)(h);
  // Tied: wte's (vocab, C) weight is the head's. Under bf16 compute the logits are a bfloat16 tensor (half
  // the bytes of the largest activation, no rounding pass; ops::cross_entropy takes them as they are).
  if (head_) return (*head_)(h);
  return ln_f_->bf16_output ? ops::linear_bf16_output(h, wte_->weight, Tensor())  // set_bf16_activations
                            : ops::linear(h, wte_->weight, Tensor());
}

double GPT::flops_per_token_forward() const {
  const double C = static_cast<double>(config.d_model), L = static_cast<double>(config.n_layer);
  const double T = static_cast<double>(config.context), V = static_cast<double>(config.vocab);
  const double matmul_params = L * 12 * C * C + C * V;  // qkv 3C^2, proj C^2, mlp 8C^2, head CV
  return 2 * matmul_params + L * 2 * T * C;             // + attention scores and weighted sum (causal: ~half)
}

std::string GPT::generate(const std::string& prompt, int64_t n, double temperature, uint64_t seed) {
  autograd::NoGradGuard ng;
  const bool was_training = is_training();
  eval();
  std::mt19937_64 gen(seed);
  std::vector<int64_t> tokens;
  for (unsigned char ch : prompt) tokens.push_back(ch);
  if (tokens.empty()) tokens.push_back('\n');
  const Device dev = wte_->weight.device();
  std::string out;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), config.context);
    std::vector<int64_t> window(tokens.end() - T, tokens.end());
    Tensor idx = Tensor::from_data<int64_t>(window, {1, T}).to(dev);
    Tensor logits = forward(idx);  // (1, T, V)
    std::vector<double> last =
        logits.slice0(0, 1).view({T, config.table_rows()}).slice0(T - 1, T).to_double_vector();
    last.resize(static_cast<size_t>(config.vocab));  // padding columns are no tokens
    int64_t next = 0;
    if (temperature <= 0) {
      next = std::max_element(last.begin(), last.end()) - last.begin();
    } else {
      double mx = *std::max_element(last.begin(), last.end());
      std::vector<double> w(last.size());
      for (size_t i = 0; i < last.size(); ++i) w[i] = std::exp((last[i] - mx) / temperature);
      next = std::discrete_distribution<int64_t>(w.begin(), w.end())(gen);
    }
    tokens.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  train(was_training);
  return out;
}

}  // namespace ddp::models
