// cudnn_attention.cpp - cuDNN's fused causal attention (SDPA) for bf16: graph construction from
// sdpa_layout.h's strides, a cache of built graphs per (cuDNN handle, shape, direction), and execution on the
// current stream. Only this file includes the cuDNN frontend (DDP_WITH_CUDNN_FRONTEND, set by CMake when its
// headers are present); without it the entry points raise and cudnn_attention_compiled() says false.
#include "kernels/cuda/cudnn_attention.h"

#include <atomic>
#include <string>

#include "runtime/core/error.h"

#ifdef DDP_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/sdpa_layout.h"
#include "runtime/core/cuda/handles.h"
#include "runtime/core/cuda_check.h"
#endif

namespace ddp::kernels::cuda {
namespace {
std::atomic<int64_t> g_graphs_built{0};
}

int64_t cudnn_attention_graphs_built() { return g_graphs_built.load(); }

#ifndef DDP_WITH_CUDNN_FRONTEND

bool cudnn_attention_compiled() { return false; }

std::string cudnn_attention_refusal(int64_t, int64_t, int64_t, int64_t) {
  return "this build has no cuDNN frontend headers (tools/fetch_cudnn_frontend.sh, then reconfigure)";
}

void cudnn_attention_forward(const BFloat16*, BFloat16*, float*, int64_t, int64_t, int64_t, int64_t,
                             const WorkspaceFn&) {
  DDP_FAIL("cudnn_attention_forward: this build has no cuDNN frontend headers (run "
                   "tools/fetch_cudnn_frontend.py, then reconfigure)");
}
void cudnn_attention_backward(const BFloat16*, const BFloat16*, const BFloat16*, const float*, BFloat16*, int64_t,
                              int64_t, int64_t, int64_t, const WorkspaceFn&) {
  DDP_FAIL("cudnn_attention_backward: this build has no cuDNN frontend headers (run "
                   "tools/fetch_cudnn_frontend.py, then reconfigure)");
}

#else

namespace fe = cudnn_frontend;

namespace {
// The tensors' ids in every graph's variant pack.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// A failed frontend call: which call, where, and cuDNN's own message.
#define DDP_CUDNN_FE_CHECK(call)                                                                          \
  do {                                                                                                    \
    fe::error_t ddp_fe_ = (call);                                                                         \
    DDP_CHECK(ddp_fe_.is_good(), #call, " failed: ", ddp_fe_.get_message(),                               \
              " (cuDNN's fused attention; DDP_CUDNN_ATTENTION=0 uses the materialising bf16 kernels)");   \
  } while (0)

std::vector<int64_t> vec(const SdpaDims& d) { return {d.begin(), d.end()}; }

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

using GraphKey = std::tuple<cudnnHandle_t, bool /*backward*/, int64_t, int64_t, int64_t, int64_t>;

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const SdpaDims& dims, const SdpaDims& stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(dims)).set_stride(
      vec(stride)));
}

// q, k, v: strided views of qkv (their base pointers are qkv + the layout's offsets).
std::array<std::shared_ptr<fe::graph::Tensor_attributes>, 3> qkv_inputs(fe::graph::Graph& g, const SdpaLayout& l) {
  return {input(g, "q", kQ, l.dims, l.qkv_stride), input(g, "k", kK, l.dims, l.qkv_stride),
          input(g, "v", kV, l.dims, l.qkv_stride)};
}

float softmax_scale(int64_t hs) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs))); }

void finish(fe::graph::Graph& g, cudnnHandle_t handle, BuiltGraph& built) {
  DDP_CUDNN_FE_CHECK(g.validate());
  DDP_CUDNN_FE_CHECK(g.build_operation_graph(handle));
  DDP_CUDNN_FE_CHECK(g.create_execution_plans({fe::HeurMode_t::A}));
  DDP_CUDNN_FE_CHECK(g.check_support(handle));
  DDP_CUDNN_FE_CHECK(g.build_plans(handle));
  DDP_CUDNN_FE_CHECK(g.get_workspace_size(built.workspace_bytes));
  g_graphs_built.fetch_add(1);
}

BuiltGraph build_forward(cudnnHandle_t handle, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const SdpaLayout l = sdpa_layout(B, T, C, n_head);
  BuiltGraph built;
  built.graph = new_graph();
  fe::graph::Graph& g = *built.graph;
  auto [q, k, v] = qkv_inputs(g, l);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(softmax_scale(l.dims[3]));
  auto [o, stats] = g.sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(vec(l.dims)).set_stride(vec(l.out_stride));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(vec(l.stats_dims))
      .set_stride(vec(l.stats_stride));
  finish(g, handle, built);
  return built;
}

BuiltGraph build_backward(cudnnHandle_t handle, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const SdpaLayout l = sdpa_layout(B, T, C, n_head);
  BuiltGraph built;
  built.graph = new_graph();
  fe::graph::Graph& g = *built.graph;
  auto [q, k, v] = qkv_inputs(g, l);
  auto o = input(g, "o", kO, l.dims, l.out_stride);
  auto d_o = input(g, "dO", kDO, l.dims, l.out_stride);
  auto stats = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("stats")
                            .set_uid(kStats)
                            .set_dim(vec(l.stats_dims))
                            .set_stride(vec(l.stats_stride))
                            .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(softmax_scale(l.dims[3]));
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
  dq->set_output(true).set_uid(kDQ).set_dim(vec(l.dims)).set_stride(vec(l.qkv_stride));
  dk->set_output(true).set_uid(kDK).set_dim(vec(l.dims)).set_stride(vec(l.qkv_stride));
  dv->set_output(true).set_uid(kDV).set_dim(vec(l.dims)).set_stride(vec(l.qkv_stride));
  finish(g, handle, built);
  return built;
}

// The built graph for this handle, shape and direction (built on first use; a graph is executed only with the
// handle it was built with).
const BuiltGraph& graph_for(cudnnHandle_t handle, bool backward, int64_t B, int64_t T, int64_t C,
                            int64_t n_head) {
  static std::mutex mu;
  static std::map<GraphKey, std::unique_ptr<BuiltGraph>> cache;
  const GraphKey key{handle, backward, B, T, C, n_head};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto built = std::make_unique<BuiltGraph>(backward ? build_backward(handle, B, T, C, n_head)
                                                       : build_forward(handle, B, T, C, n_head));
    it = cache.emplace(key, std::move(built)).first;
  }
  return *it->second;
}

// Why cuDNN cannot run this shape on the current device ("" when its forward and backward graphs build),
// decided once per (device, shape).
std::string refusal_of(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  if (const char* why = sdpa_unsupported_reason(B, T, C, n_head)) return why;
  int device = 0;
  DDP_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t>, std::string> known;
  const auto key = std::make_tuple(device, B, T, C, n_head);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  std::string why;
  try {
    cudnnHandle_t handle = ddp::cuda::cudnn_handle();
    graph_for(handle, false, B, T, C, n_head);
    graph_for(handle, true, B, T, C, n_head);
  } catch (const std::exception& e) {
    why = std::string("cuDNN refused the graph: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(mu);
  return known.emplace(key, why).first->second;
}

void check_shape(const char* what, int64_t B, int64_t T, int64_t C, int64_t n_head) {
  const char* why = sdpa_unsupported_reason(B, T, C, n_head);
  DDP_CHECK(why == nullptr, what, ": cuDNN's fused attention does not take B=", B, " T=", T, " C=", C,
            " n_head=", n_head, ": ", why ? why : "");
}

void run(const BuiltGraph& built, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack,
         const WorkspaceFn& workspace) {
  void* ws = built.workspace_bytes > 0 ? workspace(static_cast<size_t>(built.workspace_bytes)) : nullptr;
  DDP_CUDNN_FE_CHECK(built.graph->execute(handle, pack, ws));
}
}  // namespace

bool cudnn_attention_compiled() { return true; }

std::string cudnn_attention_refusal(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  return refusal_of(B, T, C, n_head);
}

void cudnn_attention_forward(const BFloat16* qkv, BFloat16* y, float* stats, int64_t B, int64_t T, int64_t C,
                             int64_t n_head, const WorkspaceFn& workspace) {
  check_shape("cudnn_attention_forward", B, T, C, n_head);
  cudnnHandle_t handle = ddp::cuda::cudnn_handle();  // bound to the current stream
  const BuiltGraph& built = graph_for(handle, false, B, T, C, n_head);
  const SdpaLayout l = sdpa_layout(B, T, C, n_head);
  auto* base = const_cast<BFloat16*>(qkv);
  std::unordered_map<int64_t, void*> pack{
      {kQ, base + l.q_offset}, {kK, base + l.k_offset}, {kV, base + l.v_offset}, {kO, y}, {kStats, stats}};
  run(built, handle, pack, workspace);
}

void cudnn_attention_backward(const BFloat16* qkv, const BFloat16* y, const BFloat16* dy, const float* stats,
                              BFloat16* dqkv, int64_t B, int64_t T, int64_t C, int64_t n_head,
                              const WorkspaceFn& workspace) {
  check_shape("cudnn_attention_backward", B, T, C, n_head);
  cudnnHandle_t handle = ddp::cuda::cudnn_handle();
  const BuiltGraph& built = graph_for(handle, true, B, T, C, n_head);
  const SdpaLayout l = sdpa_layout(B, T, C, n_head);
  auto* base = const_cast<BFloat16*>(qkv);
  std::unordered_map<int64_t, void*> pack{{kQ, base + l.q_offset},
                                          {kK, base + l.k_offset},
                                          {kV, base + l.v_offset},
                                          {kO, const_cast<BFloat16*>(y)},
                                          {kDO, const_cast<BFloat16*>(dy)},
                                          {kStats, const_cast<float*>(stats)},
                                          {kDQ, dqkv + l.q_offset},
                                          {kDK, dqkv + l.k_offset},
                                          {kDV, dqkv + l.v_offset}};
  run(built, handle, pack, workspace);
}

#endif  // DDP_WITH_CUDNN_FRONTEND

}  // namespace ddp::kernels::cuda
