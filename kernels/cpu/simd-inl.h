// simd-inl.h - per-instruction-set loop helpers shared by the Highway CPU kernels (kernels/cpu/*.cpp that
// re-include themselves through hwy/foreach_target.h). Included once per target from inside those files,
// after hwy/highway.h; the include guard toggles with HWY_TARGET_TOGGLE as Highway's *-inl.h headers do.
//
// The loops run whole vectors and finish the tail (n % lanes elements) with one partial vector: a masked load
// and store on AVX2 and AVX-512 (single instructions that touch no memory past the tail), a zero-padded
// stack buffer on the other targets. Either way every element of an array goes through the same vector code
// (the same rounding) whatever n is.
#if defined(DDP_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DDP_KERNELS_CPU_SIMD_INL_H_
#undef DDP_KERNELS_CPU_SIMD_INL_H_
#else
#define DDP_KERNELS_CPU_SIMD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 1 where Min(c, x) and Max(c, x) return x when x is NaN (x86's minps/maxps return their second operand):
// the float32 fast paths clamp as Min(c, x) so that NaN flows through and needs no select. Highway's
// SCALAR and EMU128 targets drop the NaN instead: their callers select.
#undef DDP_SIMD_CLAMP_KEEPS_NAN  // this header is included once per target
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
#define DDP_SIMD_CLAMP_KEEPS_NAN 0
#else
#define DDP_SIMD_CLAMP_KEEPS_NAN 1
#endif

// 1 where a partial vector is loaded and stored with masks (vmaskmov on AVX2, the k-masked moves on AVX-512:
// no access past the mask, no fault at the end of a page); Highway's SSE4 MaskedLoad reads the whole vector,
// so the older targets go through a stack buffer. The values are the same either way.
#undef DDP_SIMD_MASKED_TAILS
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define DDP_SIMD_MASKED_TAILS 1
#else
#define DDP_SIMD_MASKED_TAILS 0
#endif

// Bytes of the widest vector of any x86 target (AVX-512); tail buffers are this big.
constexpr size_t kMaxVectorBytes = 64;
// log2(e) rounded to float (the base-2 exp and tanh below).
constexpr float kLog2E = 1.44269504088896341f;

// The first `count` (< lanes) elements of p, the other lanes set to pad.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const hn::TFromD<D>* p, int64_t count, hn::TFromD<D> pad) {
  using T = hn::TFromD<D>;
#if DDP_SIMD_MASKED_TAILS
  const auto m = hn::FirstN(d, static_cast<size_t>(count));
  return hn::IfThenElse(m, hn::MaskedLoad(m, d, p), hn::Set(d, pad));
#else
  alignas(64) T buf[kMaxVectorBytes / sizeof(T)];
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = static_cast<int64_t>(i) < count ? p[i] : pad;
  return hn::Load(d, buf);
#endif
}
// Stores the first `count` (< lanes) lanes of v to p.
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, hn::TFromD<D>* p, int64_t count) {
  using T = hn::TFromD<D>;
#if DDP_SIMD_MASKED_TAILS
  hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(count)), d, p);
#else
  alignas(64) T buf[kMaxVectorBytes / sizeof(T)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, static_cast<size_t>(count) * sizeof(T));
#endif
}

// y[i] = f(d, x[i]) over n elements; y may alias x.
template <class D, class F>
HWY_INLINE void MapUnary(D d, const hn::TFromD<D>* x, hn::TFromD<D>* y, int64_t n, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(d, f(d, LoadTail(d, x + i, n - i, T(0))), y + i, n - i);
}

// y[i] = f(d, a[i], b[i]); y may alias a or b.
template <class D, class F>
HWY_INLINE void MapBinary(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* y, int64_t n,
                          F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  if (i < n)
    StoreTail(d, f(d, LoadTail(d, a + i, n - i, T(0)), LoadTail(d, b + i, n - i, T(0))), y + i, n - i);
}

// y[i] = f(d, a[i], b[i], c[i]); y may alias any input.
template <class D, class F>
HWY_INLINE void MapTernary(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, const hn::TFromD<D>* c,
                           hn::TFromD<D>* y, int64_t n, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i), hn::LoadU(d, c + i)), d, y + i);
  if (i < n)
    StoreTail(d,
              f(d, LoadTail(d, a + i, n - i, T(0)), LoadTail(d, b + i, n - i, T(0)),
                LoadTail(d, c + i, n - i, T(0))),
              y + i, n - i);
}

// The float32 exp reduction shared by ExpFast and TanhFast: x = n ln2 + r with n = round(x / ln 2) by the
// 1.5 * 2^23 trick (t = magic + n: t's low mantissa bits hold n + the exponent offset folded into `magic`,
// so ShiftLeft<23> of t's bits is a power of two), a two-constant Cody-Waite reduction to |r| <= ln(2)/2,
// and the polynomial of e^r = 1 + r + r^2 p(r) by Estrin's scheme (short dependency chains).
template <class V>
struct ExpReductionF32 {
  V t, r, r2, p;
};
template <class D, class V>
HWY_INLINE ExpReductionF32<V> ReduceExpF32(D d, V x, float magic_offset) {
  const V magic = hn::Set(d, 12582912.0f + magic_offset);  // 1.5 * 2^23 plus the exponent offset
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), magic);
  const V qf = hn::Sub(t, magic);  // round(x / ln 2)
  V r = hn::MulAdd(qf, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(qf, hn::Set(d, -1.428606765330187045e-6f), r);
  const V r2 = hn::Mul(r, r);
  const V r4 = hn::Mul(r2, r2);
  const V p01 = hn::MulAdd(hn::Set(d, 0.166666671633720397949219f), r, hn::Set(d, 0.5f));
  const V p23 =
      hn::MulAdd(hn::Set(d, 0.00833336077630519866943359f), r, hn::Set(d, 0.0416664853692054748535156f));
  const V p45 =
      hn::MulAdd(hn::Set(d, 0.000198527617612853646278381f), r, hn::Set(d, 0.00139304355252534151077271f));
  return {t, r, r2, hn::MulAdd(r4, p45, hn::MulAdd(r2, p23, p01))};
}

// 2^f for |f| <= 1/2 (a little beyond is fine) to 1.9e-8 relative (0.3 ulp): degree 6, Horner, interpolating
// 2^f at the 7 Chebyshev nodes of [-1/2, 1/2] (within 2.5e-9 of it; the rest is the float32 rounding of the
// coefficients). The more accurate sibling of the softmax family's degree-5 Exp2PolyF32 below.
template <class D, class V>
HWY_INLINE V Exp2Poly6F32(D d, V f) {
  V p = hn::Set(d, 0.00015461444854736328f);
  p = hn::MulAdd(p, f, hn::Set(d, 0.0013400427997112274f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.009618056938052177f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.05550327152013779f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.24022650718688965f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.6931471824645996f));
  return hn::MulAdd(p, f, hn::Set(d, 1.0f));
}

// exp(x) for the kernels that need speed more than subnormal results. float32: x is clamped to
// [-87.6, 88.7229]; round(x / ln 2) by the 1.5 * 2^23 trick (its low mantissa bits are the exponent), a
// two-constant Cody-Waite reduction to |r| <= ln(2)/2, a degree-7 polynomial evaluated by Estrin's scheme
// (short dependency chains: several vectors in flight), and one multiply by 2^(n-1) built from those bits
// (times 2, so n = 128 still works). Within 2 float32 ulp of exp(x) over the normal range; results below
// 2^-125 (x < -86.99) are 0 (AVX-512: the subnormal value) and x >= 88.7229 gives +inf. NaN input gives NaN
// where DDP_SIMD_CLAMP_KEEPS_NAN, else a finite number: callers that must propagate NaN then select it.
// float64: Highway's Exp on [-708, 709.78], +inf above.
template <class D, class V>
HWY_INLINE V ExpFast(D d, V x) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 4) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (hn::MaxLanes(d) == 16) {
      // AVX-512: x log2(e) = n + f with n = round(x L_hi) and f = (x L_hi - n) + x L_lo (two FMAs; the
      // product x L_hi is exact inside the first, L_hi + L_lo is log2(e) to 2^-48), 2^f by Exp2Poly6F32, 2^n
      // by vscalefps (overflow to inf and subnormal results exact: x is only clamped to [-104, 89], where
      // the results are 0 and inf already). 11 operations instead of the Cody-Waite form's 13.
      const V xc = hn::Min(hn::Set(d, 89.0f), hn::Max(hn::Set(d, -104.0f), x));  // keeps NaN
      const V l_hi = hn::Set(d, kLog2E);
      const V n{_mm512_roundscale_ps(hn::Mul(xc, l_hi).raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
      const V f = hn::MulAdd(xc, hn::Set(d, 1.925963033500011e-08f), hn::MulSub(xc, l_hi, n));
      return V{_mm512_scalef_ps(Exp2Poly6F32(d, f).raw, n.raw)};
    }
#endif
    const hn::RebindToSigned<D> di;
    const V xc = hn::Min(hn::Set(d, 88.7229f), hn::Max(hn::Set(d, -87.6f), x));  // keeps NaN (see above)
    const ExpReductionF32<V> e_r = ReduceExpF32(d, xc, 126.0f);  // exponent bias - 1: the scale is 2^(n-1)
    const V e = hn::MulAdd(e_r.p, e_r.r2, hn::Add(e_r.r, hn::Set(d, 1.0f)));  // exp(r)
    const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, e_r.t)));  // 2^(n-1); 0 when n = -126
    return hn::Mul(hn::Add(e, e), scale);
  } else {
    const V big = hn::Set(d, T(709.782712893384));
    // clamps as Min(c, Max(c', x)): x86's min/max return their second operand when either is NaN
    const V e = hn::Exp(d, hn::Min(big, hn::Max(hn::Set(d, T(-708)), x)));
    return hn::IfThenElse(hn::Gt(x, big), hn::Set(d, std::numeric_limits<T>::infinity()), e);
  }
}

// tanh(x) for float32 as sign(x) * m / (m + 2), m = expm1(min(2|x|, 20)) (exact identity; tanh(10) is 1 in
// float32). expm1 reuses ExpFast's reduction: 2^n (e^r - 1) + (2^n - 1) with e^r - 1 = r + r^2 P(r), so small
// |x| keeps full relative accuracy (n = 0). Within 2e-7 relative of tanh; NaN input needs the
// caller's select. float64: Highway's Tanh.
template <class D, class V>
HWY_INLINE V TanhFast(D d, V x) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 4) {
    const hn::RebindToSigned<D> di;
    const V ax = hn::Abs(x);
    const V z = hn::Min(hn::Add(ax, ax), hn::Set(d, 20.0f));
    const ExpReductionF32<V> e_r = ReduceExpF32(d, z, 127.0f);  // the exponent bias: the scale is 2^n
    const V em_r = hn::MulAdd(e_r.p, e_r.r2, e_r.r);                            // e^r - 1
    const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, e_r.t)));  // 2^n, n in [0, 29]
    const V m = hn::MulAdd(scale, em_r, hn::Sub(scale, hn::Set(d, 1.0f)));  // expm1(z)
    return hn::CopySignToAbs(hn::Div(m, hn::Add(m, hn::Set(d, 2.0f))), x);
  } else {
    return hn::Tanh(d, x);
  }
}

// tanh(x) for float32 as TanhFast's sign(x) m / (m + 2), m = expm1(2|x|), with the expm1 in base 2 (fewer
// FMAs): w = 2|x| log2(e) capped at 20 log2(e), n = round(w) (1.5 * 2^23 trick, exponent bias folded in), f =
// w - n exactly, 2^f - 1 = f q(f) with q of degree 5 (Horner; minimax fit for the relative error of 2^f - 1,
// 1.1e-8), m = 2^n (2^f - 1) + (2^n - 1); small |x| (n = 0) keeps full relative accuracy. Within 3e-7
// relative of tanh (2.6e-7 measured by test_fast_math_targets; TanhFast: 2e-7, one FMA-chain longer and
// slower); NaN input gives NaN.
template <class D, class V>
HWY_INLINE V TanhBase2F32(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f + 127.0f);  // 1.5 * 2^23 + exponent bias: t's bits give 2^n
  // Min(cap, w) is w when w is NaN (DDP_SIMD_CLAMP_KEEPS_NAN), and a NaN w makes m, and the result, NaN.
  const V w = hn::Min(hn::Set(d, 20 * kLog2E), hn::Mul(hn::Abs(x), hn::Set(d, 2 * kLog2E)));
  const V t = hn::Add(w, magic);
  const V f = hn::Sub(w, hn::Sub(t, magic));
  V q = hn::Set(d, 0.00015403510769829154f);
  q = hn::MulAdd(q, f, hn::Set(d, 0.0013390736421570182f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.009618237614631653f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.05550357326865196f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.24022649228572845f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.6931471824645996f));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));           // 2^n, n in [0, 29]
  const V m = hn::MulAdd(scale, hn::Mul(f, q), hn::Sub(scale, hn::Set(d, 1.0f)));  // expm1(2|x|)
  const V r = hn::CopySignToAbs(hn::Div(m, hn::Add(m, hn::Set(d, 2.0f))), x);
  return DDP_SIMD_CLAMP_KEEPS_NAN ? r : hn::IfThenElse(hn::IsNaN(x), x, r);
}

// sigmoid(z) = 1 / (1 + exp(-z)): exp(-z) overflows to +inf for z < -88.7 (float32), giving 0; no
// cancellation on either side. NaN stays NaN.
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V z) {
  const V s = hn::Div(hn::Set(d, 1), hn::Add(hn::Set(d, 1), ExpFast(d, hn::Neg(z))));
  if (sizeof(hn::TFromD<D>) == 4 && DDP_SIMD_CLAMP_KEEPS_NAN) return s;  // ExpFast kept the NaN
  return hn::IfThenElse(hn::IsNaN(z), z, s);
}

// Sum of all lanes as a scalar.
template <class D, class V>
HWY_INLINE hn::TFromD<D> ReduceSum(D d, V v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

// ---- row operations of the softmax family (n >= 1) ----
template <class T>
HWY_INLINE T RowMax(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto m = hn::Set(d, -std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + N <= n; i += N) m = hn::Max(m, hn::LoadU(d, x + i));
  if (i < n) m = hn::Max(m, LoadTail(d, x + i, n - i, -std::numeric_limits<T>::infinity()));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}
// Lane-wise sums of x[0..n) (two accumulators; the tail pads with 0).
template <class T>
HWY_INLINE hn::Vec<hn::ScalableTag<T>> RowSumLanes(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, x + i));
    s1 = hn::Add(s1, hn::LoadU(d, x + i + N));
  }
  for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::LoadU(d, x + i));
  if (i < n) s1 = hn::Add(s1, LoadTail(d, x + i, n - i, T(0)));
  return hn::Add(s0, s1);
}
template <class T>
HWY_INLINE T RowSum(const T* x, int64_t n) {
  return ReduceSum(hn::ScalableTag<T>(), RowSumLanes(x, n));
}
// Lane-wise sums of (x[i] - m)^2 over x[0..n) (two accumulators; the tail pads with m: adds 0).
template <class T>
HWY_INLINE hn::Vec<hn::ScalableTag<T>> RowCentredSquaresLanes(const T* x, int64_t n, T m) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  auto q0 = hn::Zero(d), q1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto c0 = hn::Sub(hn::LoadU(d, x + i), vm), c1 = hn::Sub(hn::LoadU(d, x + i + N), vm);
    q0 = hn::MulAdd(c0, c0, q0);
    q1 = hn::MulAdd(c1, c1, q1);
  }
  for (; i + N <= n; i += N) {
    const auto c = hn::Sub(hn::LoadU(d, x + i), vm);
    q0 = hn::MulAdd(c, c, q0);
  }
  if (i < n) {
    const auto c = hn::Sub(LoadTail(d, x + i, n - i, m), vm);
    q1 = hn::MulAdd(c, c, q1);
  }
  return hn::Add(q0, q1);
}
template <class T>
HWY_INLINE T RowDot(const T* x, const T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, x + i + N), hn::LoadU(d, y + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), s0);
  if (i < n) s1 = hn::MulAdd(LoadTail(d, x + i, n - i, T(0)), LoadTail(d, y + i, n - i, T(0)), s1);
  return ReduceSum(d, hn::Add(s0, s1));
}
// y = exp(scale * x - shift) (y may be null: sum only); returns the sum of those values.
template <class T>
HWY_INLINE T RowExpSum(const T* x, T* y, int64_t n, T shift, T scale = T(1)) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, shift), vc = hn::Set(d, scale);
  auto s = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = ExpFast(d, hn::MulSub(vc, hn::LoadU(d, x + i), vs));
    if (y) hn::StoreU(e, d, y + i);
    s = hn::Add(s, e);
  }
  if (i < n) {
    // pad -inf: exp(-inf) = 0 adds nothing
    const auto e =
        ExpFast(d, hn::MulSub(vc, LoadTail(d, x + i, n - i, -std::numeric_limits<T>::infinity()), vs));
    if (y) StoreTail(d, e, y + i, n - i);
    s = hn::Add(s, e);
  }
  return ReduceSum(d, s);
}
// y = a * x + b (y may alias x).
template <class T>
HWY_INLINE void RowAffine(const T* x, T* y, int64_t n, T a, T b) {
  const hn::ScalableTag<T> d;
  const auto va = hn::Set(d, a), vb = hn::Set(d, b);
  MapUnary(d, x, y, n, [va, vb](auto, auto v) HWY_ATTR { return hn::MulAdd(va, v, vb); });
}

// ---- float32 fast paths of the transcendental kernels (round 3: the softmax family's exp, log) ----
// Polynomial coefficients are minimax fits made for this project (Lawson's iteration in float64, rounded to
// float32); the error bounds below are measured by tests/ops_simd/test_fast_math_targets.cpp on every target.

// The softmax family's float32 exp, in base 2: each row's terms are 2^z with z = x log2(e) - c, one FMA
// from x, c = max log2(e) rounded to float (the row's log-sum-exp is then c ln 2 + log(sum), exact in c).
// z <= 0 up to c's rounding, which stays below 0.25 while |c| < 2^22; rows with a larger max take
// z = (x - max) log2(e) instead (one operation more). n = round(z) by the 1.5 * 2^23 trick, f = z - n in
// [-0.5, 0.5] exactly (three adds, off the FMA pipes), 2^f by a degree-5 polynomial (Horner: 5 FMAs;
// minimax fit, relative error 9.2e-8). Relative error within 2.5e-7 plus the rounding of z (7.5e-8 |z|).
// AVX-512 takes Exp2TableF32 instead (below).
template <class D, class V>
HWY_INLINE V Exp2PolyF32(D d, V f, float c0) {  // c0 * 2^f, c0 = 1 or 2 (exact scaling of the fit)
  V p = hn::Set(d, c0 * 0.0013264708686619997f);
  p = hn::MulAdd(p, f, hn::Set(d, c0 * 0.009671511128544807f));
  p = hn::MulAdd(p, f, hn::Set(d, c0 * 0.05550733953714371f));
  p = hn::MulAdd(p, f, hn::Set(d, c0 * 0.24022242426872253f));
  p = hn::MulAdd(p, f, hn::Set(d, c0 * 0.6931470036506653f));
  return hn::MulAdd(p, f, hn::Set(d, c0));
}
// 2^z for z <= 127 (written results): z is clamped at -126.4, the scale 2^(n-1) comes from t's low bits
// (exponent offset 126 folded into the magic constant) times 2 * 2^f, and n = -126 gives the scale 0:
// results below about 2^-125 are 0 (2^-inf = 0).
#undef DDP_SIMD_EXP2_SCALEF  // this header is included once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define DDP_SIMD_EXP2_SCALEF 1
// AVX-512's form of 2^z: a table of 32 values and a degree-2 polynomial. z = n + k/32 + f with n = floor(z),
// k in [0, 32) and f in [0, 1/32): k is the low 5 bits of z + 1.5 * 2^18 rounded down (the float's last bit
// there is 1/32), f = z - floor(32 z) / 32 exactly by vreduceps, T = c0 2^(k/32) by one vpermt2ps from two
// registers, 2^f / c0 = 1 + f (a + b f) folded in as T + (T f)(a + b f), and 2^n applied by vscalefps (0,
// subnormals and inf exactly as 2^n gives them: no clamp). 7 operations on the vector pipes against the
// degree-5 form's 8, and vscalefps (half the others' throughput here) once. Fit made for this project
// (Lawson's iteration in float64 for c0 (1 + a f + b f^2) against 2^f on [0, 1/32]: 5.3e-8 relative), table
// values rounded to float32: within 1.7e-7 relative of 2^z over the sweep of test_fast_math_targets. Any
// finite z with |z| >= 2^17 has a meaningless k, and a result of 0 or inf anyway; z = -inf gives 0, +inf
// gives inf, NaN stays NaN.
template <class D, class V>
HWY_INLINE V Exp2TableF32(D d, V z) {
  const __m512 table_lo =
      _mm512_setr_ps(1.0f, 1.0218971967697144f, 1.044273853302002f, 1.0671404600143433f, 1.0905077457427979f,
                     1.114386796951294f, 1.1387887001037598f, 1.1637248992919922f, 1.1892071962356567f,
                     1.215247392654419f, 1.241857886314392f, 1.2690510749816895f, 1.2968395948410034f,
                     1.3252366781234741f, 1.3542556762695312f, 1.3839099407196045f);
  const __m512 table_hi =
      _mm512_setr_ps(1.4142136573791504f, 1.445180892944336f, 1.4768261909484863f, 1.5091644525527954f,
                     1.5422109365463257f, 1.5759809017181396f, 1.6104904413223267f, 1.6457555294036865f,
                     1.681792974472046f, 1.7186193466186523f, 1.7562522888183594f, 1.7947092056274414f,
                     1.8340082168579102f, 1.8741676807403564f, 1.9152066707611084f, 1.9571442604064941f);
  const __m512 k_bits = _mm512_add_round_ps(z.raw, _mm512_set1_ps(393216.0f),  // 1.5 * 2^18
                                            _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const V f{_mm512_reduce_ps(z.raw, (5 << 4) | _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};
  const V t{_mm512_permutex2var_ps(table_lo, _mm512_castps_si512(k_bits), table_hi)};
  const V q = hn::MulAdd(f, hn::Set(d, 0.24284060299396515f), hn::Set(d, 0.6931165456771851f));
  return V{_mm512_scalef_ps(hn::MulAdd(hn::Mul(t, f), q, t).raw, z.raw)};
}
#else
#define DDP_SIMD_EXP2_SCALEF 0
#endif

template <class D, class V>
HWY_INLINE V Exp2NonPositiveF32(D d, V z) {
#if DDP_SIMD_EXP2_SCALEF
  if constexpr (hn::MaxLanes(d) == 16) return Exp2TableF32(d, z);  // and results below 2^-125 are exact
#endif
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f + 126.0f);  // 1.5 * 2^23 + (exponent bias - 1)
  const V zc = hn::Max(hn::Set(d, -126.4f), z);      // NaN stays NaN (DDP_SIMD_CLAMP_KEEPS_NAN)
  const V t = hn::Add(zc, magic);
  const V f = hn::Sub(zc, hn::Sub(t, magic));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));  // 2^(n-1); 0 when n = -126
  return hn::Mul(Exp2PolyF32(d, f, 2.0f), scale);
}
// 2^z for any float32 z, clamped to [-126.4, 127] (as Exp2NonPositiveF32, plus the upper clamp): never inf
// or NaN for non-NaN z, at most 2^127.5 (so 1 + 2^z stays finite); results below about 2^-125 are 0.
template <class D, class V>
HWY_INLINE V Exp2ClampedF32(D d, V z) {
  return Exp2NonPositiveF32(d, hn::Min(z, hn::Set(d, 127.0f)));
}
// 2^z for z <= 0.5 when only sums are needed: z is clamped at -125 (2^-inf gives about 2^-125, nothing
// next to a row sum >= 1) so the result is normal and n goes into the exponent by an integer add instead
// of a multiply (one FMA-pipe operation less).
template <class D, class V>
HWY_INLINE V Exp2SumTermF32(D d, V z) {
#if DDP_SIMD_EXP2_SCALEF
  if constexpr (hn::MaxLanes(d) == 16) return Exp2TableF32(d, z);  // 2^-inf is 0 there
#endif
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: t's bits shifted left by 23 are n << 23
  const V zc = hn::Max(hn::Set(d, -125.0f), z);  // NaN stays NaN (DDP_SIMD_CLAMP_KEEPS_NAN)
  const V t = hn::Add(zc, magic);
  const V f = hn::Sub(zc, hn::Sub(t, magic));
  const auto n_bits = hn::ShiftLeft<23>(hn::BitCast(di, t));  // 0 for the quiet NaN x86 arithmetic makes
  const V r = hn::BitCast(d, hn::Add(hn::BitCast(di, Exp2PolyF32(d, f, 1.0f)), n_bits));
  return DDP_SIMD_CLAMP_KEEPS_NAN ? r : hn::IfThenElse(hn::IsNaN(z), z, r);
}

// log(x) for float32 x in the normal positive range [2^-126, inf), e_adjust added to the exponent (the
// caller's pre-scaling of subnormals). x = 2^e m with m in [sqrt(1/2), sqrt(2)) from the bits of
// x / sqrt(1/2) (integer subtract, arithmetic shift, mask), f = m - 1 exactly, log(1 + f) = f - f^2/2 +
// f^3 Q(f) with Q of degree 6 (fitted relative error 3.1e-8), and e ln 2 split into 0.693359375 (9 bits:
// e times it is exact) plus a small correction, added last.
template <class D, class V>
HWY_INLINE V LogNormalF32(D d, V x, hn::Vec<hn::RebindToSigned<D>> e_adjust) {
  const hn::RebindToSigned<D> di;
  const auto sqrt_half = hn::Set(di, 0x3f3504f3);  // the bits of float sqrt(1/2)
  const auto b = hn::Sub(hn::BitCast(di, x), sqrt_half);
  const V e = hn::ConvertTo(d, hn::Add(hn::ShiftRight<23>(b), e_adjust));
  const V f =
      hn::Sub(hn::BitCast(d, hn::Add(hn::And(b, hn::Set(di, 0x7fffff)), sqrt_half)), hn::Set(d, 1.0f));
  V q = hn::Set(d, 0.08700432628393173f);
  q = hn::MulAdd(q, f, hn::Set(d, -0.1426747739315033f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.1491476446390152f));
  q = hn::MulAdd(q, f, hn::Set(d, -0.165775865316391f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.19963064789772034f));
  q = hn::MulAdd(q, f, hn::Set(d, -0.2500133812427521f));
  q = hn::MulAdd(q, f, hn::Set(d, 0.3333390951156616f));
  const V r = hn::MulAdd(q, f, hn::Set(d, -0.5f));  // (log(1 + f) - f) / f^2
  const V lo = hn::MulAdd(hn::Mul(f, f), r, hn::Mul(e, hn::Set(d, -2.121944400546905828e-4f)));
  return hn::MulAdd(e, hn::Set(d, 0.693359375f), hn::Add(f, lo));
}

// log(x) for float32 with the IEEE cases: log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, NaN passes
// through, subnormal x is scaled by 2^24 first. Vectors of normal positive values (the common case) take
// the one check and LogNormalF32. Within 1.5 float32 ulp of log(x) over the whole range (the sweep of
// test_fast_math_targets on every target).
template <class D, class V>
HWY_INLINE V LogFastF32(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V smallest_normal = hn::Set(d, std::numeric_limits<float>::min());
  const V inf = hn::Set(d, std::numeric_limits<float>::infinity());
  if (HWY_LIKELY(hn::AllTrue(d, hn::And(hn::Ge(x, smallest_normal), hn::Lt(x, inf)))))
    return LogNormalF32(d, x, hn::Zero(di));
  const auto subnormal = hn::Lt(x, smallest_normal);
  const V xs = hn::IfThenElse(subnormal, hn::Mul(x, hn::Set(d, 16777216.0f)), x);
  V r = LogNormalF32(d, xs, hn::IfThenElseZero(hn::RebindMask(di, subnormal), hn::Set(di, -24)));
  r = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Neg(inf), r);
  r = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Set(d, std::numeric_limits<float>::quiet_NaN()), r);
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);
  return hn::IfThenElse(hn::IsNaN(x), x, r);
}

// Whether x[0..n) holds a NaN (the rare path of a row whose max is infinite: a max pass drops NaN on x86).
template <class T>
HWY_INLINE bool RowHasNaN(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return true;
  return false;
}
// log(sum_i exp(x[i])) of one row, the max first (the path of other than float32 rows: RowsLogSumExpF32 is
// float32's). A row whose max m is infinite gives m itself (-inf: every term is 0; +inf: the sum is
// infinite), or NaN when it holds a NaN - what torch.logsumexp gives, on every target.
template <class T>
HWY_INLINE T RowLogSumExp(const T* x, int64_t n) {
  const T m = RowMax(x, n);
  if (std::isinf(m)) return RowHasNaN(x, n) ? std::numeric_limits<T>::quiet_NaN() : m;
  return m + std::log(RowExpSum<T>(x, nullptr, n, m));
}

// Lane-wise maxima of x[0..n) (n >= 1) with four independent accumulators (max's latency does not chain);
// the tail pads with -inf.
template <class T>
HWY_INLINE hn::Vec<hn::ScalableTag<T>> RowMaxLanes(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto lowest = hn::Set(d, -std::numeric_limits<T>::infinity());
  auto m0 = lowest, m1 = lowest, m2 = lowest, m3 = lowest;
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + N));
    m2 = hn::Max(m2, hn::LoadU(d, x + i + 2 * N));
    m3 = hn::Max(m3, hn::LoadU(d, x + i + 3 * N));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, hn::LoadU(d, x + i));
  if (i < n) m1 = hn::Max(m1, LoadTail(d, x + i, n - i, -std::numeric_limits<T>::infinity()));
  return hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
}
// The largest of x[0..n) (n >= 1).
template <class T>
HWY_INLINE T RowMaxUnrolled(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  return hn::GetLane(hn::MaxOfLanes(d, RowMaxLanes(x, n)));
}

// float32, one row: the lane-wise sums of 2^z, z = x[i] log2(e) - shift (kSubtractFirst: (x[i] - shift)
// log2(e)), two vectors per step with independent sums; kWrite stores those values to y
// (Exp2NonPositiveF32), otherwise only the sum is formed (Exp2SumTermF32). The tail pads with -inf (a term
// of 0, or 2^-125 for the sum). pf_read / pf_write (may be null): n floats to prefetch meanwhile (the next
// block's input row; an output row written later), so that the next pass does not wait on L3 (measured:
// cross-entropy 160 -> 137 us). kNextMax: also the lane-wise maxima of next_row[0..n) into *next_max (the
// next block's row, read here instead of prefetched: its max pass rides along with this row's exps).
template <bool kWrite, bool kSubtractFirst, bool kNextMax = false>
HWY_INLINE hn::Vec<hn::ScalableTag<float>> RowExp2SumLanesF32(
    const float* x, float* y, int64_t n, float shift, const float* pf_read, float* pf_write,
    const float* next_row = nullptr, hn::Vec<hn::ScalableTag<float>>* next_max = nullptr) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vl = hn::Set(d, kLog2E), vs = hn::Set(d, shift);
  auto term = [&](auto v) HWY_ATTR {
    const auto z = kSubtractFirst ? hn::Mul(hn::Sub(v, vs), vl) : hn::MulSub(v, vl, vs);
    if constexpr (kWrite)
      return Exp2NonPositiveF32(d, z);
    else
      return Exp2SumTermF32(d, z);
  };
  const auto lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto m0 = lowest, m1 = lowest;
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    // prefetches never fault: pointers past the end of an array are harmless
    if (pf_read) __builtin_prefetch(pf_read + i, 0, 3), __builtin_prefetch(pf_read + i + N, 0, 3);
    if (pf_write) __builtin_prefetch(pf_write + i, 1, 3), __builtin_prefetch(pf_write + i + N, 1, 3);
    if constexpr (kNextMax) {
      m0 = hn::Max(m0, hn::LoadU(d, next_row + i));
      m1 = hn::Max(m1, hn::LoadU(d, next_row + i + N));
    }
    const auto e0 = term(hn::LoadU(d, x + i));
    const auto e1 = term(hn::LoadU(d, x + i + N));
    if constexpr (kWrite) {
      hn::StoreU(e0, d, y + i);
      hn::StoreU(e1, d, y + i + N);
    }
    s0 = hn::Add(s0, e0);
    s1 = hn::Add(s1, e1);
  }
  for (; i + N <= n; i += N) {
    if constexpr (kNextMax) m0 = hn::Max(m0, hn::LoadU(d, next_row + i));
    const auto e = term(hn::LoadU(d, x + i));
    if constexpr (kWrite) hn::StoreU(e, d, y + i);
    s0 = hn::Add(s0, e);
  }
  if (i < n) {
    if constexpr (kNextMax)
      m1 = hn::Max(m1, LoadTail(d, next_row + i, n - i, -std::numeric_limits<float>::infinity()));
    const auto e = term(LoadTail(d, x + i, n - i, -std::numeric_limits<float>::infinity()));
    if constexpr (kWrite) StoreTail(d, e, y + i, n - i);
    s1 = hn::Add(s1, e);
  }
  if constexpr (kNextMax) *next_max = hn::Max(m0, m1);
  return hn::Add(s0, s1);
}

#undef DDP_SIMD_TRANSPOSE_REDUCE16  // this header is included once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define DDP_SIMD_TRANSPOSE_REDUCE16 1
// 16 vectors of 16 floats -> one vector whose lane j is op (add or max) over the 16 lanes of a[j]: a tree of
// 128-bit-block and in-block shuffles (46 operations for 16 rows, none of them waiting on another row)
// instead of 16 horizontal reductions (about 8 dependent operations each, then a scalar store and reload).
template <class Op>
HWY_INLINE __m512 TransposeReduce16(const __m512* a, Op op) {
  __m512 b[8], c[4], e[2];
  for (int i = 0; i < 8; ++i)  // 128-bit blocks of b[i]: halves of rows 2i, 2i, 2i+1, 2i+1
    b[i] = op(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 4; ++k)  // block q of c[k]: 4 partials of row 4k + q
    c[k] = op(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int m = 0; m < 2; ++m)  // block q of e[m]: 2 partials each of rows 8m + q, 8m + 4 + q
    e[m] = op(_mm512_shuffle_ps(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(c[2 * m], c[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // lane 4q + k: row 4k + q
  const __m512 f = op(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i row_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(row_order, f);
}
#else
#define DDP_SIMD_TRANSPOSE_REDUCE16 0
#endif

// out[i] = log(s[i]) for float32 (LogFastF32); out may alias s.
HWY_INLINE void LogArrayF32(const float* s, float* out, int64_t n) {
  MapUnary(hn::ScalableTag<float>(), s, out, n, [](auto d, auto v) HWY_ATTR { return LogFastF32(d, v); });
}

// float32, rows [0, nb) of x (row length cols; nb at most kExpRowsBlock): per row the sum s[j] of
// exp(x - base[j]) (kWrite: those values written to y), base[j] = c ln 2 in double with c = max log2(e)
// rounded to float, or the max itself when |c| >= 2^22 (see the base-2 exp above). All maxima first, then
// all sums: each row's horizontal reductions overlap the next row's work instead of stalling it (on AVX-512
// all 16 rows' reductions are one TransposeReduce16). Row j's log-sum-exp is base[j] + log(s[j]). Meanwhile
// the next block's rows are prefetched (rows_left rows exist from x on), and y_later's rows (an output this
// block writes after the call) or else y's next block.
// next_maxima (AVX-512, may be null): the caller's store of the maxima between consecutive blocks. When it
// holds this block's maxima (ready) they are used instead of a max pass, and while this block's exps run
// the next block's rows are read for their maxima (instead of prefetched), left there for the next call:
// the max pass then costs one operation per vector inside the exp loop instead of a pass of its own that
// the exps wait for (measured: cross-entropy forward, 1M, 1 thread: 0.35 -> 0.40 of the copy bandwidth). Not
// for kWrite with y in the same pass: the three blocks of rows (in, out, next) overflow L1 and softmax got
// slower (0.51 -> 0.45).
constexpr int64_t kExpRowsBlock = 16;
struct NextRowMaxima {
  alignas(64) float m[kExpRowsBlock] = {};
  bool ready = false;
};
template <bool kWrite>
HWY_INLINE void RowsExp2SumF32(const float* x, float* y, int64_t nb, int64_t cols, double* base, float* s,
                               int64_t rows_left, float* y_later = nullptr,
                               NextRowMaxima* next_maxima = nullptr) {
  const hn::ScalableTag<float> d;
  alignas(64) float m[kExpRowsBlock];
  // Row j's lane-wise sums, from its max m[j]; sets base[j]; with next_row, the lane-wise maxima of that row
  // (of the next block) into *next_max. Forced inline: as a call it cost softmax 10%.
  auto row_sums = [&](int64_t j, const float* next_row, hn::Vec<decltype(d)>* next_max) HWY_ATTR
      __attribute__((always_inline)) {
    const bool next = nb + j < rows_left;
    const float* pf_read = next && !next_row ? x + (nb + j) * cols : nullptr;
    float* pf_write = y_later ? y_later + j * cols : (kWrite && next ? y + (nb + j) * cols : nullptr);
    float* yr = kWrite ? y + j * cols : nullptr;
    const float c = m[j] * kLog2E;
    if (std::fabs(c) < 4194304.0f) {  // 2^22 (false for an infinite or NaN max)
      base[j] = static_cast<double>(c) * 0.6931471805599453;
      if (next_row)
        return RowExp2SumLanesF32<kWrite, false, true>(x + j * cols, yr, cols, c, nullptr, pf_write, next_row,
                                                       next_max);
      return RowExp2SumLanesF32<kWrite, false>(x + j * cols, yr, cols, c, pf_read, pf_write);
    }
    base[j] = m[j];
    if (next_row) *next_max = RowMaxLanes(next_row, cols);
    if (!kWrite && std::isinf(m[j]))  // log-sum-exp = the infinite max itself (1 in all), or NaN
      return hn::Set(d, RowHasNaN(x + j * cols, cols) ? std::numeric_limits<float>::quiet_NaN()
                                                      : 1.0f / static_cast<float>(hn::Lanes(d)));
    return RowExp2SumLanesF32<kWrite, true>(x + j * cols, yr, cols, m[j], pf_read, pf_write);
  };
#if DDP_SIMD_TRANSPOSE_REDUCE16
  if (hn::Lanes(d) == 16) {
    __m512 lanes[kExpRowsBlock];
    const auto max_op = [](__m512 p, __m512 q) { return _mm512_max_ps(p, q); };
    if (next_maxima && next_maxima->ready) {
      std::copy(next_maxima->m, next_maxima->m + kExpRowsBlock, m);
    } else {
      for (int64_t j = 0; j < kExpRowsBlock; ++j)
        lanes[j] = j < nb ? RowMaxLanes(x + j * cols, cols).raw : _mm512_setzero_ps();
      _mm512_store_ps(m, TransposeReduce16(lanes, max_op));
    }
    // rows of the next block whose maxima are found now (none without next_maxima or after a partial block)
    const int64_t nb_next =
        next_maxima && nb == kExpRowsBlock ? std::min(kExpRowsBlock, rows_left - kExpRowsBlock) : 0;
    hn::Vec<decltype(d)> next_lanes[kExpRowsBlock];
    for (int64_t j = 0; j < kExpRowsBlock; ++j) {
      next_lanes[j] = hn::Zero(d);
      lanes[j] = j < nb
                     ? row_sums(j, j < nb_next ? x + (kExpRowsBlock + j) * cols : nullptr, &next_lanes[j]).raw
                     : _mm512_setzero_ps();
    }
    alignas(64) float sums[kExpRowsBlock];
    _mm512_store_ps(sums, TransposeReduce16(lanes, [](__m512 p, __m512 q) { return _mm512_add_ps(p, q); }));
    std::copy(sums, sums + nb, s);
    if (next_maxima) {
      next_maxima->ready = nb_next > 0;
      if (nb_next > 0) {
        for (int64_t j = 0; j < kExpRowsBlock; ++j) lanes[j] = next_lanes[j].raw;
        _mm512_store_ps(next_maxima->m, TransposeReduce16(lanes, max_op));
      }
    }
    return;
  }
#endif
  (void)next_maxima;  // the pipelined maxima are the AVX-512 path's
  for (int64_t j = 0; j < nb; ++j) m[j] = RowMaxUnrolled(x + j * cols, cols);
  for (int64_t j = 0; j < nb; ++j) s[j] = ReduceSum(d, row_sums(j, nullptr, nullptr));
}

// float32: lse[j] = log(sum_i exp(x[j][i])) for the rows [0, nb) of x (nb at most kExpRowsBlock):
// RowsExp2SumF32 without writing the terms, the logs in one vectorized pass, base + log in double. The
// arguments after cols as RowsExp2SumF32's.
HWY_INLINE void RowsLogSumExpF32(const float* x, int64_t nb, int64_t cols, float* lse, int64_t rows_left,
                                 float* y_later = nullptr, NextRowMaxima* next_maxima = nullptr) {
  alignas(64) double base[kExpRowsBlock];
  alignas(64) float l[kExpRowsBlock];
  RowsExp2SumF32<false>(x, nullptr, nb, cols, base, l, rows_left, y_later, next_maxima);
  LogArrayF32(l, l, nb);
  for (int64_t j = 0; j < nb; ++j) lse[j] = static_cast<float>(base[j] + static_cast<double>(l[j]));
}

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
