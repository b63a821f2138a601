// CRC-32 by folding with carry-less multiplication, after Gopal et al., "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction" (Intel, 2009). Each 128-bit lane of the running value is
// carried over D bits of input by multiplying its low half by x^(D+32) and its high half by x^(D-32),
// modulo the polynomial 0x104C11DB7, bit-reflected (the constants below); the last 128 bits are reduced
// to 64, then to 32 by Barrett reduction.

#include "CCouchChecksum.h"

#if defined(__x86_64__)

#include <cpuid.h>
#include <immintrin.h>

int couch_crc32_fold_level(void) {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned int pclmul = 1u << 1, sse41 = 1u << 19, osxsave = 1u << 27;
    if (!(ecx & pclmul) || !(ecx & sse41)) return 0;
    if (!(ecx & osxsave)) return 1;
    unsigned int low = 0, high = 0;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    // SSE, AVX, opmask and both halves of the ZMM registers saved by the operating system.
    if ((low & 0xE6) != 0xE6) return 1;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 1;
    const unsigned int avx512f = 1u << 16, avx512vl = 1u << 31, vpclmulqdq = 1u << 10;
    return (ebx & avx512f) && (ebx & avx512vl) && (ecx & vpclmulqdq) ? 2 : 1;
}

__attribute__((target("pclmul,sse4.1")))
static inline __m128i fold(__m128i x, __m128i constants, __m128i next) {
    __m128i low = _mm_clmulepi64_si128(x, constants, 0x00);
    __m128i high = _mm_clmulepi64_si128(x, constants, 0x11);
    return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

// Carrying over 128 bits (16 bytes), and the reductions to 64 and 32 bits.
#define BY16 _mm_set_epi64x(0x0ccaa009e, 0x1751997d0)

/// Folds what is left 16 bytes at a time into `x`, then reduces it to the CRC-32 register.
__attribute__((target("pclmul,sse4.1")))
static uint32_t finish(__m128i x, const uint8_t *bytes, size_t length) {
    const __m128i by16 = BY16;
    const __m128i by8 = _mm_set_epi64x(0, 0x163cd6124);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    while (length >= 16) {
        x = fold(x, by16, _mm_loadu_si128((const __m128i *)bytes));
        bytes += 16;
        length -= 16;
    }
    __m128i t = _mm_clmulepi64_si128(by16, x, 0x01);
    x = _mm_xor_si128(_mm_srli_si128(x, 8), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), by8, 0x00);
    x = _mm_xor_si128(_mm_srli_si128(x, 4), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    x = _mm_xor_si128(x, t);
    return (uint32_t)_mm_extract_epi32(x, 1);
}

/// Four 16-byte registers, 64 bytes a step (length >= 64).
__attribute__((target("pclmul,sse4.1")))
static uint32_t fold16(uint32_t state, const uint8_t *bytes, size_t length) {
    const __m128i by64 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
    const __m128i by16 = BY16;
    __m128i x0 = _mm_loadu_si128((const __m128i *)(bytes + 0));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(bytes + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(bytes + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(bytes + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)state));
    bytes += 64;
    length -= 64;
    while (length >= 64) {
        x0 = fold(x0, by64, _mm_loadu_si128((const __m128i *)(bytes + 0)));
        x1 = fold(x1, by64, _mm_loadu_si128((const __m128i *)(bytes + 16)));
        x2 = fold(x2, by64, _mm_loadu_si128((const __m128i *)(bytes + 32)));
        x3 = fold(x3, by64, _mm_loadu_si128((const __m128i *)(bytes + 48)));
        bytes += 64;
        length -= 64;
    }
    x0 = fold(x0, by16, x1);
    x0 = fold(x0, by16, x2);
    x0 = fold(x0, by16, x3);
    return finish(x0, bytes, length);
}

#define WIDE "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1"

__attribute__((target(WIDE)))
static inline __m512i fold4(__m512i x, __m512i constants, __m512i next) {
    __m512i low = _mm512_clmulepi64_epi128(x, constants, 0x00);
    __m512i high = _mm512_clmulepi64_epi128(x, constants, 0x11);
    return _mm512_ternarylogic_epi64(low, high, next, 0x96);  // low ^ high ^ next
}

/// Four 64-byte registers, 256 bytes a step (length >= 256).
__attribute__((target(WIDE)))
static uint32_t fold64(uint32_t state, const uint8_t *bytes, size_t length) {
    const __m512i by256 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430, 0x11542778a));
    const __m512i by64 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1c6e41596, 0x154442bd4));
    __m512i z0 = _mm512_loadu_si512((const void *)(bytes + 0));
    __m512i z1 = _mm512_loadu_si512((const void *)(bytes + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(bytes + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(bytes + 192));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)state)));
    bytes += 256;
    length -= 256;
    while (length >= 256) {
        z0 = fold4(z0, by256, _mm512_loadu_si512((const void *)(bytes + 0)));
        z1 = fold4(z1, by256, _mm512_loadu_si512((const void *)(bytes + 64)));
        z2 = fold4(z2, by256, _mm512_loadu_si512((const void *)(bytes + 128)));
        z3 = fold4(z3, by256, _mm512_loadu_si512((const void *)(bytes + 192)));
        bytes += 256;
        length -= 256;
    }
    z1 = fold4(z0, by64, z1);
    z2 = fold4(z1, by64, z2);
    z3 = fold4(z2, by64, z3);
    // The four lanes of the last register, 384, 256 and 128 bits from its end, into one.
    __m128i x = _mm512_extracti32x4_epi32(z3, 3);
    x = fold(_mm512_extracti32x4_epi32(z3, 2), BY16, x);
    x = fold(_mm512_extracti32x4_epi32(z3, 1), _mm_set_epi64x(0x15a546366, 0x0f1da05aa), x);
    x = fold(_mm512_extracti32x4_epi32(z3, 0), _mm_set_epi64x(0x174359406, 0x03db1ecdc), x);
    return finish(x, bytes, length);
}

uint32_t couch_crc32_fold(int level, uint32_t state, const uint8_t *bytes, size_t length) {
    if (level >= 2 && length >= 256) return fold64(state, bytes, length);
    if (level >= 1 && length >= 64) return fold16(state, bytes, length);
    return state;  // Never asked for: the caller checks the level and the length.
}

#else

int couch_crc32_fold_level(void) { return 0; }

uint32_t couch_crc32_fold(int level, uint32_t state, const uint8_t *bytes, size_t length) {
    (void)level;
    (void)bytes;
    (void)length;
    return state;
}

#endif
