// fixed_point.h - the kernels of the deterministic mode's exact sum (runtime/ddp/deterministic_reduction.h,
// docs/determinism.md): floating-point gradients turned into 64-bit fixed point under a per-block exponent,
// added as integers (exact, so in any order and any grouping), and turned back into floating point.
//
// A tensor is cut into blocks of `block` elements. For each block the caller takes the largest exponent of
// any contribution (block_exponents, then a MAX all-reduce: exact), so every contribution to a block is
// scaled by the same power of two: q = round_to_nearest_even(x * 2^shift) with
// shift = kFixedPointBits - headroom - e, where |x| < 2^e for every contribution and 2^headroom bounds their
// number; |q| <= 2^(62 - headroom), so any sum of them fits in int64 without overflow. x * 2^shift is exact
// in double (a power-of-two scale of a float or double far from the range ends); only the rounding to an
// integer loses bits, the same bits for the same x wherever it runs. Every element is independent, so any
// split across threads gives the same bits.
//
// Special values: a block holding a NaN or an infinity gets the exponent kNonFinite; it wins the MAX and
// dequantize writes NaN over that whole block on every rank (a diverged step stays visible).
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

constexpr int kFixedPointBits = 62;
// A block with no nonzero contribution (every element +-0): its integers are all 0.
constexpr int32_t kNoExponent = -(1 << 20);
constexpr int32_t kNonFinite = 1 << 20;

// exps[b] = max(exps[b], e) where e is the smallest integer with |x| < 2^e over the block's nonzero
// elements (kNoExponent when there are none; kNonFinite when one is a NaN or an infinity). x has n elements,
// exps ceil(n / block). T: float, double.
template <class T>
void block_exponents(const T* x, int64_t n, int64_t block, int32_t* exps);

// The power of two each block is scaled by, from its (all-reduced) exponent; 0 for kNoExponent/kNonFinite.
int32_t block_shift(int32_t exponent, int headroom);

// acc[i] += round(x[i] * 2^shift(block of i)), headroom as in block_shift. With first = true it stores
// instead of adding (acc need not be zeroed: a rank's first contribution to a tensor saves that pass).
template <class T>
void quantize_add(const T* x, int64_t n, int64_t block, const int32_t* exps, int headroom, int64_t* acc,
                  bool first = false);

// out[i] = acc[i] * (2^-shift / count), rounded to T (NaN in kNonFinite blocks). count >= 1. The factor is
// formed once per block (a multiply per element, not a division): two roundings in double before the one to
// T, the same on every rank.
template <class T>
void dequantize_mean(const int64_t* acc, int64_t n, int64_t block, const int32_t* exps, int headroom,
                     int64_t count, T* out);

}  // namespace ddp::kernels::cpu
