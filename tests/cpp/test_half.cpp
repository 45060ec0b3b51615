// float16 / bfloat16 conversions (dtype.h) against independent references: exact double arithmetic
// and, where the CPU has it, the F16C instructions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "detail/convert.h"
#include "detail/cpu.h"
#include "simd_levels.h"
#include "detail/float_staging.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/parallel.h"
#include "spatialgrad/tensor.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SG_TEST_F16C 1
#endif

namespace spatialgrad {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// The value of binary16 bits, by the definition of the format.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + m, e - 25);
}

// Round-to-nearest-even of a finite float to a format with `mantissa` explicit bits, minimum normal
// exponent `emin` and overflow threshold `overflow` (the smallest magnitude that rounds to Inf), in
// exact double arithmetic; returns the rounded magnitude (HUGE_VAL on overflow).
double round_to_format(double a, int mantissa, int emin, double overflow) {
  if (a >= overflow) return HUGE_VAL;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int quantum_exp = std::max(e - 1, emin) - mantissa;
  const double n = std::ldexp(a, -quantum_exp);       // exact: a has 24 bits
  return std::ldexp(std::nearbyint(n), quantum_exp);  // the default rounding mode: ties to even
}

uint16_t reference_to_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00 | ((bits_of(f) >> 13) & 0x3ff));
  const double r = round_to_format(std::fabs(static_cast<double>(f)), 10, -14, 65520.0);
  if (r == HUGE_VAL) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, 24)));
  int e;
  const double fr = std::frexp(r, &e);  // r = fr * 2^e, fr in [0.5, 1)
  const int m = static_cast<int>(std::ldexp(fr, 11)) - 1024;
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | m);
}

uint16_t reference_to_bfloat16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>((bits_of(f) >> 16) | 0x40);
  // Overflow threshold: halfway between the largest bfloat16 (0x7f7f) and 2^128.
  const double overflow = std::ldexp(255.5, 120);
  const double r = round_to_format(std::fabs(static_cast<double>(f)), 7, -126, overflow);
  if (r == HUGE_VAL) return sign | 0x7f80;
  return static_cast<uint16_t>(sign | (bits_of(static_cast<float>(r)) >> 16));
}

// Float bit patterns to test: every finite half's value, its float neighbours, the midpoints to the
// next half and their neighbours (the rounding boundaries), the same for bfloat16, specials, and a
// strided sweep over all 2^32 patterns.
std::vector<uint32_t> test_patterns() {
  std::vector<uint32_t> out;
  auto around = [&](float x) {
    out.push_back(bits_of(x));
    out.push_back(bits_of(std::nextafter(x, HUGE_VALF)));
    out.push_back(bits_of(std::nextafter(x, -HUGE_VALF)));
  };
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double v = half_value(static_cast<uint16_t>(h));
    const double next = half_value(static_cast<uint16_t>(h + 1));
    around(static_cast<float>(v));
    around(static_cast<float>((v + next) / 2));  // exact in float
  }
  for (uint32_t b = 0; b < 0x7f80; b += 7) {
    const float v = float_of(b << 16), next = float_of((b + 1) << 16);
    around(v);
    around(static_cast<float>((static_cast<double>(v) + next) / 2));
  }
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65521) out.push_back(static_cast<uint32_t>(b));
  for (uint32_t special : {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x477fefffu, 0x477ff000u, 0x477ff001u,
                           0x33000000u, 0x33000001u, 0x387fffffu, 0x38800000u, 0x00000001u, 0x00800000u}) {
    out.push_back(special);
  }
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) out.push_back(out[i] ^ 0x80000000u);  // and the negatives
  return out;
}

TEST(Half, EveryHalfWidensToItsValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = to_float(Half{static_cast<uint16_t>(h)});
    const double expected = half_value(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // The payload is kept and the NaN made quiet (bit 22 of the float, bit 9 of the half).
      EXPECT_EQ((bits_of(f) >> 13) & 0x3ff, (h & 0x3ff) | 0x200) << "NaN payload of " << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // also -0
    }
  }
}

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const Half back = to_half(to_float(Half{static_cast<uint16_t>(h)}));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    EXPECT_EQ(back.bits, nan ? (h | 0x200) : h) << std::hex << h;  // NaNs come back quiet
  }
}

TEST(Half, NarrowingRoundsToNearestEven) {
  for (uint32_t b : test_patterns()) {
    const float f = float_of(b);
    ASSERT_EQ(to_half(f).bits, reference_to_half(f)) << "float bits " << std::hex << b;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(to_half(65520.0f).bits, 0x7c00);                          // rounds up to Inf
  EXPECT_EQ(to_half(65519.996f).bits, 0x7bff);                        // just below: the largest half
  EXPECT_EQ(to_half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);      // tie -> even (down)
  EXPECT_EQ(to_half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);  // tie -> even (up)
  EXPECT_EQ(to_half(std::ldexp(1.0f, -25)).bits, 0x0000);             // tie between 0 and the smallest subnormal
  EXPECT_EQ(to_half(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)).bits, 0x0400);  // up into the normals
  EXPECT_EQ(to_half(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(to_half(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_half(-HUGE_VALF).bits, 0xfc00);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The cpuid/xgetbv detection (detail/cpu.h, which clang builds use too) agrees with GCC's builtins.
TEST(CpuFeatures, AgreeWithGccsBuiltins) {
  const detail::CpuFeatures& f = detail::cpu_features();
  EXPECT_EQ(f.avx, static_cast<bool>(__builtin_cpu_supports("avx")));
  EXPECT_EQ(f.avx2, static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.f16c, static_cast<bool>(__builtin_cpu_supports("f16c")));
  EXPECT_EQ(f.avx512f, static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(f.avx512bw, static_cast<bool>(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(f.avx512vl, static_cast<bool>(__builtin_cpu_supports("avx512vl")));
  EXPECT_EQ(f.avx512bf16, static_cast<bool>(__builtin_cpu_supports("avx512bf16")));
}
#endif

#ifdef SG_TEST_F16C
__attribute__((target("f16c"))) uint16_t hardware_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_to_float(uint16_t h) { return _cvtsh_ss(h); }

TEST(Half, AgreesWithTheF16cInstructions) {
  if (!detail::cpu_features().f16c) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t b : test_patterns()) {
    const float f = float_of(b);
    ASSERT_EQ(to_half(f).bits, hardware_to_half(f)) << "float bits " << std::hex << b;
  }
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    // Bit for bit, NaNs included: both make signalling NaNs quiet.
    ASSERT_EQ(bits_of(to_float(Half{static_cast<uint16_t>(h)})), bits_of(hardware_to_float(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
}
#endif

// The row conversions the kernels use (F16C where the CPU has it, portable code otherwise) agree with
// the element conversions above bit for bit, at unit and other strides and with ragged tails.
template <class T>
void expect_rows_match_elements(const std::vector<uint32_t>& float_patterns) {
  std::vector<T> all(0x10000);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = T{static_cast<uint16_t>(h)};
  for (int64_t stride : {1, 3}) {
    for (int64_t n : {int64_t(0x10000) / stride, int64_t(13)}) {
      std::vector<float> wide(static_cast<size_t>(n));
      detail::widen_row(all.data(), stride, n, wide.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(wide[i]), bits_of(to_float(all[i * stride]))) << "stride " << stride << " element " << i;
      }
    }
  }
  std::vector<float> floats;
  for (uint32_t b : float_patterns) floats.push_back(float_of(b));
  for (int64_t stride : {1, 2}) {
    std::vector<T> narrow(floats.size() * stride, T{0x5555});
    detail::narrow_row(floats.data(), static_cast<int64_t>(floats.size()), narrow.data(), stride);
    for (size_t i = 0; i < floats.size(); ++i) {
      const uint16_t expected = std::is_same_v<T, Half> ? to_half(floats[i]).bits : to_bfloat16(floats[i]).bits;
      ASSERT_EQ(narrow[i * stride].bits, expected) << "float bits " << std::hex << float_patterns[i];
      if (stride == 2) ASSERT_EQ(narrow[i * 2 + 1].bits, 0x5555) << "wrote between the strided elements";
    }
  }
}

// Runs fn once per instruction level this CPU has (baseline first), the level pinned (cpu.h): each level
// takes its own conversion instructions (portable loops, F16C / AVX2, AVX-512 BF16).
template <class Fn>
void for_each_convert_path(const Fn& fn) {
  testing::for_each_simd_level([&] { fn(); });
}

TEST(Half, RowConversionsMatchElementConversions) {
  for_each_convert_path([] { expect_rows_match_elements<Half>(test_patterns()); });
}
TEST(BFloat16, RowConversionsMatchElementConversions) {
  for_each_convert_path([] { expect_rows_match_elements<BFloat16>(test_patterns()); });
}

// weighted_sum_rows gives the bits of widening each row and summing w[k] * row[k] in order k in
// float32, on every path: 1 to 5 rows, ragged lengths, every float16 value (NaN, Inf and subnormals
// included) among the inputs.
TEST(Half, WeightedSumRowsMatchesWidenThenSum) {
  std::vector<Half> values(0x10000 + 40);
  for (size_t i = 0; i < values.size(); ++i) values[i] = Half{static_cast<uint16_t>((i * 7919u) & 0xffffu)};
  const float weights[5] = {0.25f, 0.75f, -1.5f, 3.0e-3f, 1.0f / 3.0f};
  for_each_convert_path([&] {
    for (int64_t count = 1; count <= 5; ++count) {
      for (int64_t n : {int64_t(0x10000), int64_t(13), int64_t(7), int64_t(0)}) {
        std::vector<const Half*> rows;
        for (int64_t k = 0; k < count; ++k) rows.push_back(values.data() + 8 * k);
        std::vector<float> got(static_cast<size_t>(n) + 1, -7.0f);
        detail::weighted_sum_rows(rows.data(), weights, count, n, got.data());
        for (int64_t i = 0; i < n; ++i) {
          float expected = weights[0] * to_float(rows[0][i]);
          for (int64_t k = 1; k < count; ++k) expected += weights[k] * to_float(rows[k][i]);
          ASSERT_EQ(bits_of(got[i]), bits_of(expected)) << "count " << count << " n " << n << " element " << i;
        }
        ASSERT_EQ(got[n], -7.0f) << "wrote past the row";
      }
    }
  });
}

// widen_sum_rows gives the bits of widening each row and adding the rows in order from +0 in float32
// (the avg_pool2d forward's window sums), on every path: 1 to 5 rows (1-4 have their own loops), unit and
// other strides (the portable path), ragged lengths, every float16 value among the inputs. A NaN sum only
// has to be a NaN (which NaN operand an addition passes on depends on operand order).
TEST(Half, WidenSumRowsMatchesWidenThenSum) {
  std::vector<Half> values(3 * (0x10000 + 40));
  for (size_t i = 0; i < values.size(); ++i) values[i] = Half{static_cast<uint16_t>((i * 7919u) & 0xffffu)};
  values[5] = Half{0x8000};  // -0 in every row's first column: +0 + -0 is +0
  values[5 + 8] = values[5 + 16] = values[5 + 24] = values[5 + 32] = values[5];
  for_each_convert_path([&] {
    for (int64_t count = 1; count <= 5; ++count) {
      for (int64_t stride : {int64_t(1), int64_t(3)}) {
        for (int64_t n : {int64_t(0x10000), int64_t(13), int64_t(7), int64_t(1)}) {
          std::vector<const Half*> rows;
          for (int64_t k = 0; k < count; ++k) rows.push_back(values.data() + 5 + 8 * k);
          std::vector<float> got(static_cast<size_t>(n) + 1, -7.0f);
          detail::widen_sum_rows(rows.data(), count, n, stride, got.data());
          for (int64_t i = 0; i < n; ++i) {
            float expected = 0.0f + to_float(rows[0][i * stride]);
            for (int64_t k = 1; k < count; ++k) expected += to_float(rows[k][i * stride]);
            if (std::isnan(expected)) {
              ASSERT_TRUE(std::isnan(got[i])) << "count " << count << " n " << n << " element " << i;
            } else {
              ASSERT_EQ(bits_of(got[i]), bits_of(expected))
                  << "count " << count << " stride " << stride << " n " << n << " element " << i;
            }
          }
          ASSERT_EQ(got[n], -7.0f) << "wrote past the row";
        }
      }
    }
  });
}

// A row written by a fused narrowing at `stride` (the rest of `got` preset to 0x5555): element i holds
// the rounding of value(i), its float32 value (a NaN for a NaN value: which NaN operand an addition
// passes on depends on the order the compiler gives the operands), and nothing else was written.
template <class T, class Value>
void expect_narrowed(const std::vector<T>& got, int64_t n, int64_t stride, const Value& value) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = value(i);
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(to_float(got[i * stride]))) << "element " << i;
    } else {
      const uint16_t expected = std::is_same_v<T, Half> ? to_half(v).bits : to_bfloat16(v).bits;
      ASSERT_EQ(got[i * stride].bits, expected) << "stride " << stride << " element " << i;
    }
    for (int64_t j = 1; j < stride; ++j) ASSERT_EQ(got[i * stride + j].bits, 0x5555) << "wrote between elements";
  }
  ASSERT_EQ(got[n * stride].bits, 0x5555) << "wrote past the row";
}

// narrow_sum_rows gives the bits of a float32 sum of the rows in order followed by the element
// rounding, on every path: 1 to 4 rows (one and two rows have their own loops), unit and other
// strides, ragged lengths, and special floats among the terms (NaN, Inf, subnormals, sums that
// overflow or round to a tie).
template <class T>
void expect_sum_rows_match_sum_then_round() {
  std::vector<float> values;
  for (uint32_t b : test_patterns()) values.push_back(float_of(b));
  for_each_convert_path([&] {
    for (int64_t count = 1; count <= 4; ++count) {
      std::vector<const float*> rows;
      // Shifted copies of the patterns, so each element sums different values.
      for (int64_t k = 0; k < count; ++k) rows.push_back(values.data() + 5 * k);
      const int64_t longest = static_cast<int64_t>(values.size()) - 5 * (count - 1);
      for (int64_t stride : {1, 3}) {
        for (int64_t n : {longest, int64_t(21), int64_t(7), int64_t(0)}) {
          std::vector<T> got(static_cast<size_t>(n * stride + 1), T{0x5555});
          detail::narrow_sum_rows(rows.data(), count, n, got.data(), stride);
          ASSERT_NO_FATAL_FAILURE(expect_narrowed(got, n, stride,
                                                  [&](int64_t i) {
                                                    float sum = rows[0][i];
                                                    for (int64_t k = 1; k < count; ++k) sum += rows[k][i];
                                                    return sum;
                                                  }))
              << "count " << count;
        }
      }
    }
  });
}

TEST(Half, NarrowSumRowsMatchesSumThenRound) { expect_sum_rows_match_sum_then_round<Half>(); }
TEST(BFloat16, NarrowSumRowsMatchesSumThenRound) { expect_sum_rows_match_sum_then_round<BFloat16>(); }

// narrow_blend_rows gives the bits of the float32 blend wa * a + wb * b (no fused multiply-add)
// followed by the element rounding, on every path, at unit and other strides.
template <class T>
void expect_blend_rows_match_blend_then_round() {
  std::vector<float> values;
  for (uint32_t b : test_patterns()) values.push_back(float_of(b));
  const float* a = values.data();
  const float* b = values.data() + 3;
  const int64_t longest = static_cast<int64_t>(values.size()) - 3;
  const float weights[3][2] = {{0.25f, 0.75f}, {1.0f / 3, 2.0f / 3}, {1.0f, 0.0f}};
  for_each_convert_path([&] {
    for (const auto& w : weights) {
      for (int64_t stride : {1, 2}) {
        for (int64_t n : {longest, int64_t(21), int64_t(7), int64_t(0)}) {
          std::vector<T> got(static_cast<size_t>(n * stride + 1), T{0x5555});
          detail::narrow_blend_rows(a, b, w[0], w[1], n, got.data(), stride);
          ASSERT_NO_FATAL_FAILURE(expect_narrowed(got, n, stride, [&](int64_t i) { return w[0] * a[i] + w[1] * b[i]; }))
              << "weights " << w[0] << ", " << w[1];
        }
      }
    }
  });
}

TEST(Half, NarrowBlendRowsMatchesBlendThenRound) { expect_blend_rows_match_blend_then_round<Half>(); }
TEST(BFloat16, NarrowBlendRowsMatchesBlendThenRound) { expect_blend_rows_match_blend_then_round<BFloat16>(); }

// The blend is two products and a sum, each rounded: a compiler that fuses one product with the sum
// (a fused multiply-add, in code built for a CPU that has one) changes the float result by up to an
// ulp, and then sometimes its rounding. Pairs (a, b) where it does, found with std::fma from a fixed
// seed, must come out as without fusing on every path.
template <class T>
void expect_blends_are_not_fused() {
  const float wa = 1.0f / 3, wb = 0.7f;
  auto narrowed = [](float v) { return std::is_same_v<T, Half> ? to_half(v).bits : to_bfloat16(v).bits; };
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(1.0f, 2.0f);
  std::vector<float> a, b;
  for (int tries = 0; tries < (1 << 22) && a.size() < 40; ++tries) {
    const float x = dist(gen), y = dist(gen);
    const float separate = wa * x + wb * y;
    const uint16_t bits = narrowed(separate);
    if (narrowed(std::fma(wa, x, wb * y)) != bits && narrowed(std::fma(wb, y, wa * x)) != bits) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  ASSERT_GE(a.size(), 4u) << "too few sensitive pairs";
  for (size_t i = 0; a.size() < 48; ++i) {  // repeated: every lane of the 8- and 16-lane loops gets some
    a.push_back(a[i]);
    b.push_back(b[i]);
  }
  const int64_t n = static_cast<int64_t>(a.size());
  for_each_convert_path([&] {
    std::vector<T> got(static_cast<size_t>(n + 1), T{0x5555});
    detail::narrow_blend_rows(a.data(), b.data(), wa, wb, n, got.data(), 1);
    ASSERT_NO_FATAL_FAILURE(expect_narrowed(got, n, 1, [&](int64_t i) { return wa * a[i] + wb * b[i]; }));
  });
}

TEST(Half, NarrowBlendRowsAreNotFused) { expect_blends_are_not_fused<Half>(); }
TEST(BFloat16, NarrowBlendRowsAreNotFused) { expect_blends_are_not_fused<BFloat16>(); }

// widen_lanes8 / narrow_lanes8 (8 rows <-> lane-interleaved vectors, the grid sampler's tiles) give the
// element conversions' bits on every path: every 16-bit pattern widened, the float patterns (NaN, Inf,
// subnormals, rounding ties) narrowed, lengths with and without a ragged tail, nothing written between
// the rows.
template <class T>
void expect_lanes8_match_elements() {
  const int64_t row_step = 0x10000 / 8 + 3;
  std::vector<T> rows(static_cast<size_t>(8 * row_step), T{0x5555});
  for (uint32_t h = 0; h <= 0xffff; ++h) rows[h / 8 + (h % 8) * row_step] = T{static_cast<uint16_t>(h)};
  std::vector<float> floats;
  for (uint32_t b : test_patterns()) floats.push_back(float_of(b));
  for_each_convert_path([&] {
    for (int64_t n : {int64_t(0x10000 / 8), int64_t(21), int64_t(16), int64_t(7), int64_t(0)}) {
      std::vector<float> lanes(static_cast<size_t>(8 * n));
      detail::widen_lanes8(rows.data(), row_step, n, lanes.data());
      for (int64_t i = 0; i < 8 * n; ++i) {
        ASSERT_EQ(bits_of(lanes[i]), bits_of(to_float(rows[i / 8 + (i % 8) * row_step]))) << "n " << n << " at " << i;
      }
    }
    const int64_t points = static_cast<int64_t>(floats.size()) / 8;
    for (int64_t n : {points, int64_t(21), int64_t(16), int64_t(7), int64_t(0)}) {
      std::vector<T> out(static_cast<size_t>(8 * (n + 1)), T{0x5555});
      detail::narrow_lanes8(floats.data(), n, out.data(), n + 1);
      for (int64_t k = 0; k < 8; ++k) {
        for (int64_t i = 0; i < n; ++i) {
          const float f = floats[static_cast<size_t>(i * 8 + k)];
          const uint16_t expected = std::is_same_v<T, Half> ? to_half(f).bits : to_bfloat16(f).bits;
          ASSERT_EQ(out[k * (n + 1) + i].bits, expected) << "n " << n << " row " << k << " point " << i;
        }
        ASSERT_EQ(out[k * (n + 1) + n].bits, 0x5555) << "wrote between the rows";
      }
    }
  });
}

TEST(Half, LaneConversionsMatchElementConversions) { expect_lanes8_match_elements<Half>(); }
TEST(BFloat16, LaneConversionsMatchElementConversions) { expect_lanes8_match_elements<BFloat16>(); }

TEST(BFloat16, EveryBFloat16WidensExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) EXPECT_EQ(bits_of(to_float(BFloat16{static_cast<uint16_t>(b)})), b << 16);
}

TEST(BFloat16, NarrowingRoundsToNearestEven) {
  for (uint32_t b : test_patterns()) {
    const float f = float_of(b);
    ASSERT_EQ(to_bfloat16(f).bits, reference_to_bfloat16(f)) << "float bits " << std::hex << b;
  }
}

TEST(BFloat16, KnownValues) {
  EXPECT_EQ(to_bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bfloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);        // tie -> even (down)
  EXPECT_EQ(to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);    // tie -> even (up)
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to Inf
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(to_bfloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_bfloat16(float_of(0x7f800001u)).bits, 0x7fc0);  // a signalling NaN comes back quiet
}

// float32 staging (detail/float_staging.h) reads and writes every element of a view of any layout:
// contiguous (merged into one row, cut into pieces), transposed, negative strides, size-1 and empty
// dimensions, with 1 and 2 threads; elements outside the view are never written.
template <class T>
void expect_staging_round_trips() {
  struct Layout {
    std::vector<int64_t> sizes, strides;
    int64_t offset;  // of element 0 in the storage
  };
  const std::vector<Layout> layouts = {
      {{3, 5000, 7}, {}, 0},                // contiguous, several pieces
      {{4, 1, 6}, {1, 99, 4}, 0},           // transposed, with a size-1 dimension of any stride
      {{5, 9}, {-20, -2}, 4 * 20 + 8 * 2},  // negative strides, gaps between elements
      {{2, 0, 3}, {}, 0},                   // empty
      {{}, {}, 0},                          // a scalar
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Layout& l : layouts) {
      std::vector<T> storage(3 * 5000 * 7 + 200);
      for (size_t i = 0; i < storage.size(); ++i) storage[i] = T{static_cast<uint16_t>((i * 2654435761u) >> 7)};
      const TensorView view(storage.data() + l.offset, dtype_of<T>(), l.sizes, l.strides);
      const detail::FloatStaging staged = detail::FloatStaging::copy_of(view);
      ASSERT_EQ(staged.view().strides(), contiguous_strides(view.sizes()));
      ASSERT_EQ(staged.view().sizes(), view.sizes());
      // The view's elements in C order, as storage positions.
      std::vector<int64_t> at;
      for (int64_t i = 0; i < view.numel(); ++i) {
        int64_t pos = l.offset, rest = i;
        for (int64_t d = view.dim() - 1; d >= 0; --d) {
          pos += (rest % view.size(d)) * view.stride(d);
          rest /= view.size(d);
        }
        at.push_back(pos);
      }
      const float* wide = staged.view().data<float>();
      for (size_t i = 0; i < at.size(); ++i) {
        ASSERT_EQ(bits_of(wide[i]), bits_of(to_float(storage[at[i]]))) << "element " << i;
      }
      // Narrowing back writes each element's round trip (NaNs come back quiet) and nothing else.
      std::vector<T> expected = storage;
      for (int64_t pos : at) expected[pos] = store_as<T>(to_float(storage[pos]));
      for (int64_t pos : at) storage[pos] = T{0};
      staged.narrow_into(view);
      for (size_t i = 0; i < storage.size(); ++i) ASSERT_EQ(storage[i].bits, expected[i].bits) << "storage " << i;
    }
  }
  set_num_threads(0);
}

TEST(Half, FloatStagingRoundTripsAnyLayout) { expect_staging_round_trips<Half>(); }
TEST(BFloat16, FloatStagingRoundTripsAnyLayout) { expect_staging_round_trips<BFloat16>(); }

}  // namespace
}  // namespace spatialgrad
