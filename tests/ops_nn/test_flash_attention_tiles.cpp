// test_flash_attention_tiles.cpp - the CUDA flash attention's tiled algorithm run on the CPU: every thread
// block of kernels/cuda/flash_attention.cu in turn, every row and lane of a block in turn, with the same tile
// size, the same lane split and the same per-tile functions (kernels/cuda/flash_attention_tile.h; the GPU's
// shuffles become lanes_butterfly_sum, shared-memory tiles become host arrays). In float64 it must agree with
// the CPU kernel (kernels/cpu/attention, which materialises the (T, T) probabilities) to 1e-12 in y, the
// log-sum-exp and dqkv, for sequence lengths around the tile size, 1-4 heads, head sizes 1..128, batches 1-3;
// its backward also matches finite differences of its own forward. This runs here; the GPU parity test is
// test_attention_flash_cuda.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/flash_attention_tile.h"

namespace flash = ddp::kernels::cuda::flash;
using flash::kLanes;
using flash::kTile;

namespace {
using Vec = std::vector<double>;

struct Shape4 {
  int64_t B, T, C, nh;
  int64_t hs() const { return C / nh; }
};

// What load_tile does in the kernels: (kTile, hs) rows r0.. of a strided view, zeros past T.
template <class S>
std::vector<S> load_tile(const S* base, int64_t stride, int64_t r0, int64_t T, int hs) {
  std::vector<S> tile(static_cast<size_t>(kTile * hs), S(0));
  for (int rr = 0; rr < kTile; ++rr)
    for (int d = 0; d < hs; ++d)
      if (r0 + rr < T) tile[rr * hs + d] = base[(r0 + rr) * stride + d];
  return tile;
}

// The GPU's lanes_sum: one partial per lane in, the butterfly result per lane out (all equal).
template <class S, class F>
void lanes_sum(F partial_of_lane, S (&out)[kLanes]) {
  for (int lane = 0; lane < kLanes; ++lane) out[lane] = partial_of_lane(lane);
  flash::lanes_butterfly_sum(out);
}

// ---- flash_forward_kernel, block (bh, qt) after block ----
template <class S, int kDpt>
void emulate_forward(const S* qkv, S* y, S* lse, const Shape4& s) {
  const int hs = static_cast<int>(s.hs());
  const int64_t T = s.T, C = s.C, ld = 3 * C;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  for (int64_t bh = 0; bh < s.B * s.nh; ++bh) {
    const int64_t b = bh / s.nh, h = bh % s.nh;
    const S* q_base = qkv + b * T * ld + h * hs;
    for (int64_t qt = 0; qt < flash::num_tiles(T, kTile); ++qt) {
      S q[kTile][kLanes][kDpt], o[kTile][kLanes][kDpt], m[kTile][kLanes], l[kTile][kLanes];
      int64_t row_i[kTile];
      for (int row = 0; row < kTile; ++row) {
        row_i[row] = flash::clamped_row(qt, kTile, row, T);
        for (int lane = 0; lane < kLanes; ++lane) {
          flash::lane_load(q_base + row_i[row] * ld, hs, lane, q[row][lane]);
          for (int r = 0; r < kDpt; ++r) o[row][lane][r] = 0;
          m[row][lane] = -INFINITY;
          l[row][lane] = 0;
        }
      }
      for (int64_t kt = 0; kt <= flash::last_key_tile(qt); ++kt) {
        const int64_t k0 = kt * kTile;
        const std::vector<S> k_tile = load_tile(q_base + C, ld, k0, T, hs),
                             v_tile = load_tile(q_base + 2 * C, ld, k0, T, hs);
        for (int row = 0; row < kTile; ++row) {
          S sc[kLanes][kTile];
          for (int jj = 0; jj < kTile; ++jj) {
            S sum[kLanes];
            lanes_sum([&](int lane) { return flash::lane_dot(q[row][lane], &k_tile[jj * hs], hs, lane); },
                      sum);
            for (int lane = 0; lane < kLanes; ++lane) sc[lane][jj] = sum[lane] * scale;
          }
          for (int lane = 0; lane < kLanes; ++lane)
            flash::forward_tile_update<S, kDpt>(sc[lane], v_tile.data(), hs, lane, row_i[row], k0, T,
                                                m[row][lane], l[row][lane], o[row][lane]);
        }
      }
      for (int row = 0; row < kTile; ++row)
        for (int lane = 0; lane < kLanes; ++lane) {
          const S row_lse = flash::forward_finish(m[row][lane], l[row][lane], o[row][lane]);
          if (qt * kTile + row < T) {
            flash::lane_store(o[row][lane], S(1), hs, lane, y + (b * T + row_i[row]) * C + h * hs);
            if (lane == 0) lse[bh * T + row_i[row]] = row_lse;
          }
        }
    }
  }
}

// ---- the backward's three kernels, in launch order ----
template <class S, int kDpt>
void emulate_backward(const S* dy, const S* qkv, const S* y, const S* lse, S* dqkv, const Shape4& s) {
  const int hs = static_cast<int>(s.hs());
  const int64_t T = s.T, C = s.C, ld = 3 * C, n_tiles = flash::num_tiles(T, kTile);
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
  std::vector<S> D(static_cast<size_t>(s.B * s.nh * T));
  // flash_backward_rowdot_kernel
  for (int64_t bh = 0; bh < s.B * s.nh; ++bh) {
    const int64_t b = bh / s.nh, h = bh % s.nh;
    for (int64_t qt = 0; qt < n_tiles; ++qt)
      for (int row = 0; row < kTile; ++row) {
        const int64_t i = flash::clamped_row(qt, kTile, row, T), off = (b * T + i) * C + h * hs;
        S g[kLanes][kDpt], sum[kLanes];
        for (int lane = 0; lane < kLanes; ++lane) flash::lane_load(dy + off, hs, lane, g[lane]);
        lanes_sum([&](int lane) { return flash::lane_dot(g[lane], y + off, hs, lane); }, sum);
        if (qt * kTile + row < T) D[bh * T + i] = sum[0];
      }
  }
  // flash_backward_dkdv_kernel
  for (int64_t bh = 0; bh < s.B * s.nh; ++bh) {
    const int64_t b = bh / s.nh, h = bh % s.nh;
    const S* q_base = qkv + b * T * ld + h * hs;
    const S* dy_base = dy + b * T * C + h * hs;
    for (int64_t kt = 0; kt < n_tiles; ++kt) {
      S k[kTile][kLanes][kDpt], v[kTile][kLanes][kDpt], dk[kTile][kLanes][kDpt], dv[kTile][kLanes][kDpt];
      int64_t row_j[kTile];
      for (int row = 0; row < kTile; ++row) {
        row_j[row] = flash::clamped_row(kt, kTile, row, T);
        for (int lane = 0; lane < kLanes; ++lane) {
          flash::lane_load(q_base + C + row_j[row] * ld, hs, lane, k[row][lane]);
          flash::lane_load(q_base + 2 * C + row_j[row] * ld, hs, lane, v[row][lane]);
          for (int r = 0; r < kDpt; ++r) dk[row][lane][r] = dv[row][lane][r] = 0;
        }
      }
      for (int64_t qt = flash::first_query_tile(kt); qt < n_tiles; ++qt) {
        const int64_t i0 = qt * kTile;
        const std::vector<S> q_tile = load_tile(q_base, ld, i0, T, hs),
                             dy_tile = load_tile(dy_base, C, i0, T, hs);
        S lse_tile[kTile], D_tile[kTile];
        for (int e = 0; e < kTile; ++e) {
          lse_tile[e] = i0 + e < T ? lse[bh * T + i0 + e] : S(0);
          D_tile[e] = i0 + e < T ? D[bh * T + i0 + e] : S(0);
        }
        for (int row = 0; row < kTile; ++row)
          for (int ii = 0; ii < kTile; ++ii) {
            S sc[kLanes], dp[kLanes];
            lanes_sum([&](int lane) { return flash::lane_dot(k[row][lane], &q_tile[ii * hs], hs, lane); },
                      sc);
            lanes_sum([&](int lane) { return flash::lane_dot(v[row][lane], &dy_tile[ii * hs], hs, lane); },
                      dp);
            for (int lane = 0; lane < kLanes; ++lane)
              flash::key_row_update(sc[lane], dp[lane], scale, lse_tile[ii], D_tile[ii], i0 + ii, row_j[row],
                                    T, &q_tile[ii * hs], &dy_tile[ii * hs], hs, lane, dk[row][lane],
                                    dv[row][lane]);
          }
      }
      for (int row = 0; row < kTile; ++row)
        if (kt * kTile + row < T)
          for (int lane = 0; lane < kLanes; ++lane) {
            S* out = dqkv + (b * T + row_j[row]) * ld + h * hs;
            flash::lane_store(dk[row][lane], scale, hs, lane, out + C);
            flash::lane_store(dv[row][lane], S(1), hs, lane, out + 2 * C);
          }
    }
  }
  // flash_backward_dq_kernel
  for (int64_t bh = 0; bh < s.B * s.nh; ++bh) {
    const int64_t b = bh / s.nh, h = bh % s.nh;
    const S* q_base = qkv + b * T * ld + h * hs;
    for (int64_t qt = 0; qt < n_tiles; ++qt) {
      S q[kTile][kLanes][kDpt], g[kTile][kLanes][kDpt], dq[kTile][kLanes][kDpt];
      int64_t row_i[kTile];
      for (int row = 0; row < kTile; ++row) {
        row_i[row] = flash::clamped_row(qt, kTile, row, T);
        for (int lane = 0; lane < kLanes; ++lane) {
          flash::lane_load(q_base + row_i[row] * ld, hs, lane, q[row][lane]);
          flash::lane_load(dy + (b * T + row_i[row]) * C + h * hs, hs, lane, g[row][lane]);
          for (int r = 0; r < kDpt; ++r) dq[row][lane][r] = 0;
        }
      }
      for (int64_t kt = 0; kt <= flash::last_key_tile(qt); ++kt) {
        const int64_t k0 = kt * kTile;
        const std::vector<S> k_tile = load_tile(q_base + C, ld, k0, T, hs),
                             v_tile = load_tile(q_base + 2 * C, ld, k0, T, hs);
        for (int row = 0; row < kTile; ++row) {
          const S row_lse = lse[bh * T + row_i[row]], row_D = D[bh * T + row_i[row]];
          for (int jj = 0; jj < kTile; ++jj) {
            S sc[kLanes], dp[kLanes];
            lanes_sum([&](int lane) { return flash::lane_dot(q[row][lane], &k_tile[jj * hs], hs, lane); },
                      sc);
            lanes_sum([&](int lane) { return flash::lane_dot(g[row][lane], &v_tile[jj * hs], hs, lane); },
                      dp);
            for (int lane = 0; lane < kLanes; ++lane)
              flash::query_row_update(sc[lane], dp[lane], scale, row_lse, row_D, row_i[row], k0 + jj, T,
                                      &k_tile[jj * hs], hs, lane, dq[row][lane]);
          }
        }
      }
      for (int row = 0; row < kTile; ++row)
        if (qt * kTile + row < T)
          for (int lane = 0; lane < kLanes; ++lane)
            flash::lane_store(dq[row][lane], scale, hs, lane, dqkv + (b * T + row_i[row]) * ld + h * hs);
    }
  }
}

// The host launchers' choice of kDpt (flash::dims_per_lane), as in kernels/cuda/flash_attention.cu.
template <class S>
void flash_forward(const std::vector<S>& qkv, std::vector<S>& y, std::vector<S>& lse, const Shape4& s) {
  y.assign(static_cast<size_t>(s.B * s.T * s.C), S(NAN));  // NaN: an element the kernels never write shows
  lse.assign(static_cast<size_t>(s.B * s.nh * s.T), S(NAN));
  switch (flash::dims_per_lane(s.hs())) {
    case 4:
      return emulate_forward<S, 4>(qkv.data(), y.data(), lse.data(), s);
    case 8:
      return emulate_forward<S, 8>(qkv.data(), y.data(), lse.data(), s);
    default:
      return emulate_forward<S, 16>(qkv.data(), y.data(), lse.data(), s);
  }
}
template <class S>
void flash_backward(const std::vector<S>& dy, const std::vector<S>& qkv, const std::vector<S>& y,
                    const std::vector<S>& lse, std::vector<S>& dqkv, const Shape4& s) {
  dqkv.assign(qkv.size(), S(NAN));
  switch (flash::dims_per_lane(s.hs())) {
    case 4:
      return emulate_backward<S, 4>(dy.data(), qkv.data(), y.data(), lse.data(), dqkv.data(), s);
    case 8:
      return emulate_backward<S, 8>(dy.data(), qkv.data(), y.data(), lse.data(), dqkv.data(), s);
    default:
      return emulate_backward<S, 16>(dy.data(), qkv.data(), y.data(), lse.data(), dqkv.data(), s);
  }
}

Vec randn(size_t n, uint64_t seed, double sd) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sd);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// log sum_{j <= i} exp(q_i . k_j / sqrt(hs)) by the definition.
Vec reference_lse(const Vec& qkv, const Shape4& s) {
  const int64_t hs = s.hs(), ld = 3 * s.C;
  Vec lse(static_cast<size_t>(s.B * s.nh * s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.nh; ++h)
      for (int64_t i = 0; i < s.T; ++i) {
        Vec sc(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d)
            dot += qkv[(b * s.T + i) * ld + h * hs + d] * qkv[(b * s.T + j) * ld + s.C + h * hs + d];
          sc[j] = dot / std::sqrt(static_cast<double>(hs));
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - m);
        lse[(b * s.nh + h) * s.T + i] = m + std::log(sum);
      }
  return lse;
}

// Largest |a - b| / (1 + |b|); NaN anywhere gives infinity.
double max_rel_err(const Vec& a, const Vec& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

std::string str(const Shape4& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) +
         ", heads " + std::to_string(s.nh) + " (hs " + std::to_string(s.hs()) + ")";
}

// The tiled forward and backward against kernels/cpu/attention on inputs of standard deviation sd.
void expect_matches_cpu_kernel(const Shape4& s, uint64_t seed, double sd) {
  const Vec qkv = randn(static_cast<size_t>(s.B * s.T * 3 * s.C), seed, sd);
  const Vec dy = randn(static_cast<size_t>(s.B * s.T * s.C), seed + 1, 1.0);
  Vec y_ref(static_cast<size_t>(s.B * s.T * s.C)), att(static_cast<size_t>(s.B * s.nh * s.T * s.T));
  Vec dqkv_ref(qkv.size());
  ddp::kernels::cpu::attention_forward(qkv.data(), y_ref.data(), att.data(), s.B, s.T, s.C, s.nh);
  ddp::kernels::cpu::attention_backward(dy.data(), qkv.data(), att.data(), dqkv_ref.data(), s.B, s.T, s.C,
                                        s.nh);
  Vec y, lse, dqkv;
  flash_forward(qkv, y, lse, s);
  flash_backward(dy, qkv, y, lse, dqkv, s);
  EXPECT_LE(max_rel_err(y, y_ref), 1e-12) << "y: " << str(s) << ", sd " << sd;
  EXPECT_LE(max_rel_err(lse, reference_lse(qkv, s)), 1e-12) << "lse: " << str(s) << ", sd " << sd;
  EXPECT_LE(max_rel_err(dqkv, dqkv_ref), 1e-12) << "dqkv: " << str(s) << ", sd " << sd;
}
}  // namespace

TEST(FlashAttentionTiles, MatchesTheCpuKernelInFloat64) {
  // Sequence lengths around the tile: one row, two, a tile but one, a tile, a tile and one, two tiles and
  // three, a prime. Head sizes: 1, 8, 64 (GPT-2), 100 (not a multiple of the lanes), 128 (the largest, 16 per
  // lane).
  const int64_t lengths[] = {1, 2, kTile - 1, kTile, kTile + 1, 2 * kTile + 3, 97};
  const int64_t head_sizes[] = {1, 8, 64, 100, 128};
  const int64_t batch_heads[][2] = {{1, 1}, {3, 2}, {2, 4}, {1, 3}};
  uint64_t seed = 1;
  for (int64_t T : lengths)
    for (int64_t hs : head_sizes) {
      const auto& bn = batch_heads[seed % 4];
      expect_matches_cpu_kernel({bn[0], T, hs * bn[1], bn[1]}, seed, 1.0);
      ++seed;
    }
}

TEST(FlashAttentionTiles, LargeScoresRescaleAcrossTiles) {
  // Standard deviation 4: scores of tens, so the running max moves between key tiles and the online rescale
  // exp(m_old - m_new) is far from 1 (and underflows to 0 for some rows).
  for (int64_t T : {kTile + 1, 3 * kTile + 5}) expect_matches_cpu_kernel({2, T, 2 * 16, 2}, 50 + T, 4.0);
  // Scores that grow along the keys: every new tile holds the new maximum.
  const Shape4 s{1, 3 * kTile + 2, 8, 1};
  Vec qkv = randn(static_cast<size_t>(s.T * 3 * s.C), 9, 0.1);
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t d = 0; d < s.C; ++d) qkv[t * 3 * s.C + d] = 1.0;                                  // q
    for (int64_t d = 0; d < s.C; ++d) qkv[t * 3 * s.C + s.C + d] = 0.25 * static_cast<double>(t);  // k
  }
  Vec y_ref(static_cast<size_t>(s.T * s.C)), att(static_cast<size_t>(s.T * s.T)), y, lse;
  ddp::kernels::cpu::attention_forward(qkv.data(), y_ref.data(), att.data(), s.B, s.T, s.C, s.nh);
  flash_forward(qkv, y, lse, s);
  EXPECT_LE(max_rel_err(y, y_ref), 1e-12);
  EXPECT_LE(max_rel_err(lse, reference_lse(qkv, s)), 1e-12);
}

TEST(FlashAttentionTiles, BackwardMatchesFiniteDifferences) {
  // L = sum(w * y(qkv)): the tiled backward with dy = w against central differences of the tiled forward.
  const Shape4 s{1, kTile + 3, 6, 2};
  const Vec qkv = randn(static_cast<size_t>(s.T * 3 * s.C), 21, 1.0);
  const Vec w = randn(static_cast<size_t>(s.T * s.C), 22, 1.0);
  Vec y, lse, dqkv;
  flash_forward(qkv, y, lse, s);
  flash_backward(w, qkv, y, lse, dqkv, s);
  auto loss = [&](const Vec& x) {
    Vec yy, ll;
    flash_forward(x, yy, ll, s);
    double acc = 0;
    for (size_t i = 0; i < yy.size(); ++i) acc += w[i] * yy[i];
    return acc;
  };
  const double eps = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < qkv.size(); ++i) {
    Vec plus = qkv, minus = qkv;
    plus[i] += eps;
    minus[i] -= eps;
    const double fd = (loss(plus) - loss(minus)) / (2 * eps);
    worst = std::max(worst, std::abs(fd - dqkv[i]) / (1.0 + std::abs(fd)));
  }
  EXPECT_LE(worst, 1e-8);
}

TEST(FlashAttentionTiles, TileGeometry) {
  EXPECT_EQ(flash::num_tiles(1, kTile), 1);
  EXPECT_EQ(flash::num_tiles(kTile, kTile), 1);
  EXPECT_EQ(flash::num_tiles(kTile + 1, kTile), 2);
  EXPECT_EQ(flash::clamped_row(1, kTile, 5, kTile + 2), kTile + 1);  // past the end: the last row
  EXPECT_EQ(flash::clamped_row(1, kTile, 1, kTile + 2), kTile + 1);
  EXPECT_TRUE(flash::visible(3, 3, 4));
  EXPECT_FALSE(flash::visible(3, 4, 5));  // the future
  EXPECT_FALSE(flash::visible(4, 0, 4));  // a padding row
  // Key tiles past the diagonal hold only keys j > i for every row of the query tile: skipping them loses
  // nothing.
  for (int64_t qt = 0; qt < 4; ++qt)
    for (int64_t kt = flash::last_key_tile(qt) + 1; kt < 5; ++kt)
      for (int row = 0; row < kTile; ++row)
        for (int jj = 0; jj < kTile; ++jj)
          EXPECT_FALSE(flash::visible(qt * kTile + row, kt * kTile + jj, 1000));
  EXPECT_EQ(flash::dims_per_lane(1), 4);
  EXPECT_EQ(flash::dims_per_lane(64), 8);
  EXPECT_EQ(flash::dims_per_lane(65), 16);
  EXPECT_EQ(flash::dims_per_lane(flash::kMaxHeadSize) * kLanes, flash::kMaxHeadSize);
}

TEST(FlashAttentionTiles, Float32StaysWithinTheGpuTestsBound) {
  // The tiled algorithm in float32 against the CPU kernel in float64, next to the CPU kernel's own float32
  // error: the GPU test's float32 bound (test_attention_flash_cuda.cpp: |gpu - cpu| <= 1e-5 + 1e-4 |cpu|,
  // both float32) must hold for the sum of the two errors.
  for (const Shape4& s : {Shape4{2, 97, 2 * 64, 2}, Shape4{1, 200, 128, 1}, Shape4{2, kTile + 1, 4 * 8, 4}}) {
    const Vec qkv = randn(static_cast<size_t>(s.B * s.T * 3 * s.C), 70 + s.T, 1.0);
    const Vec dy = randn(static_cast<size_t>(s.B * s.T * s.C), 71 + s.T, 1.0);
    Vec y64(static_cast<size_t>(s.B * s.T * s.C)), att64(static_cast<size_t>(s.B * s.nh * s.T * s.T)),
        d64(qkv.size());
    ddp::kernels::cpu::attention_forward(qkv.data(), y64.data(), att64.data(), s.B, s.T, s.C, s.nh);
    ddp::kernels::cpu::attention_backward(dy.data(), qkv.data(), att64.data(), d64.data(), s.B, s.T, s.C,
                                          s.nh);
    const std::vector<float> qkv32(qkv.begin(), qkv.end()), dy32(dy.begin(), dy.end());
    std::vector<float> y32(y64.size()), att32(att64.size()), dcpu32(qkv.size()), yf, lsef, dflash;
    ddp::kernels::cpu::attention_forward(qkv32.data(), y32.data(), att32.data(), s.B, s.T, s.C, s.nh);
    ddp::kernels::cpu::attention_backward(dy32.data(), qkv32.data(), att32.data(), dcpu32.data(), s.B, s.T,
                                          s.C, s.nh);
    flash_forward(qkv32, yf, lsef, s);
    flash_backward(dy32, qkv32, yf, lsef, dflash, s);
    // Worst |a - ref| / (1e-5 + 1e-4 |ref|): below 1 meets the bound.
    auto ratio = [](const std::vector<float>& a, const Vec& ref) {
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(a[i] - ref[i]) / (1e-5 + 1e-4 * std::abs(ref[i])));
      return worst;
    };
    const double y_flash = ratio(yf, y64), y_cpu = ratio(y32, y64), d_flash = ratio(dflash, d64),
                 d_cpu = ratio(dcpu32, d64);
    std::printf("%s: float32 error / bound: y flash %.3f, cpu %.3f; dqkv flash %.3f, cpu %.3f\n",
                str(s).c_str(), y_flash, y_cpu, d_flash, d_cpu);
    EXPECT_LT(y_flash + y_cpu, 0.5) << str(
        s);  // half the bound: room for the GPU's own exp and fused multiply-adds
    EXPECT_LT(d_flash + d_cpu, 0.5) << str(s);
  }
}
