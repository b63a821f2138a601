#ifndef CCOUCHCHECKSUM_H
#define CCOUCHCHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// How couch_crc32_fold can run here: 0, not at all (not x86-64, or no carry-less multiplication: the
/// caller uses its table-driven CRC-32); 1, on 16-byte registers (PCLMULQDQ and SSE4.1); 2, also on
/// 64-byte registers (AVX-512 with VPCLMULQDQ, enabled by the operating system).
int couch_crc32_fold_level(void);

/// CRC-32 (the polynomial of gzip and zlib, bit-reflected) of `length` bytes at `bytes`, folded with
/// carry-less multiplication at `level` (what couch_crc32_fold_level() answered, 1 or 2). `state` is the
/// running register, not inverted on the way in or out (pass ~crc, and invert the result). `length`
/// must be at least 64 and a multiple of 16.
uint32_t couch_crc32_fold(int level, uint32_t state, const uint8_t *bytes, size_t length);

#endif
