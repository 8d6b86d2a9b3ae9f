// Decoders for the individual HDF5 filters. Every decoder treats its input as hostile: sizes
// come from headers only after they have been checked against the input length and against the
// size the pipeline expects, and library calls are the bounded ("safe") variants.
#include "core/filters/codecs.h"

#include <blosc.h>
#include <libdeflate.h>
#include <lz4.h>
#include <lzf.h>
#include <zstd.h>

#include <climits>
#include <cstring>
#include <string>

#include "core/error.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace h5d::filters {
namespace codec {

namespace {

uint64_t be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}
uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string num(uint64_t v) { return std::to_string(v); }

// Checks a size announced by a header against what the pipeline expects.
void check_announced(const char* filter, uint64_t announced, size_t expected, size_t cap) {
  if (expected != kUnknown) {
    if (announced != expected)
      fail_data(std::string(filter) + ": header announces " + num(announced) +
                " decoded bytes, expected " + num(expected));
  } else if (announced > cap) {
    fail_data(std::string(filter) + ": header announces " + num(announced) +
              " decoded bytes, more than the plausible maximum " + num(cap));
  }
}

struct DeflateCtx {
  libdeflate_decompressor* d = nullptr;
  ~DeflateCtx() {
    if (d) libdeflate_free_decompressor(d);
  }
  libdeflate_decompressor* get() {
    if (!d) {
      d = libdeflate_alloc_decompressor();
      if (!d) fail(ENOMEM, "deflate: cannot allocate a decompressor");
    }
    return d;
  }
};
thread_local DeflateCtx tl_deflate;

struct ZstdCtx {
  ZSTD_DCtx* d = nullptr;
  ~ZstdCtx() {
    if (d) ZSTD_freeDCtx(d);
  }
  ZSTD_DCtx* get() {
    if (!d) {
      d = ZSTD_createDCtx();
      if (!d) fail(ENOMEM, "zstd: cannot allocate a decompression context");
    }
    return d;
  }
};
thread_local ZstdCtx tl_zstd;

// Per-thread buffer for one decompressed bitshuffle block (never zero-filled).
struct BlockBuf {
  std::unique_ptr<uint8_t[]> p;
  size_t cap = 0;
  uint8_t* get(size_t n) {
    if (n > cap) {
      p.reset(new uint8_t[n]);
      cap = n;
    }
    return p.get();
  }
};
thread_local BlockBuf tl_block;
thread_local BlockBuf tl_block2;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sink

uint8_t* Sink::get(size_t n) {
  if (vec_) {
    if (vec_->size() != n) vec_->resize(n);
    return vec_->data();
  }
  if (*cap_ < n || !*buf_) {
    buf_->reset(new uint8_t[n ? n : 1]);
    *cap_ = n ? n : 1;
  }
  return buf_->get();
}

void Sink::produced(size_t n) {
  if (vec_ && vec_->size() != n) vec_->resize(n);
}

const uint8_t* Sink::data() const { return vec_ ? vec_->data() : buf_->get(); }

// ---------------------------------------------------------------------------------------------
// deflate (1): a zlib stream (2-byte header, raw deflate, adler32), as H5Z_filter_deflate writes.

size_t inflate_zlib(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap) {
  const size_t want = expected != kUnknown ? expected : cap;
  uint8_t* out = dst.get(want);
  size_t in_used = 0, out_used = 0;
  libdeflate_result r =
      libdeflate_zlib_decompress_ex(tl_deflate.get(), src, n, out, want, &in_used, &out_used);
  if (r == LIBDEFLATE_INSUFFICIENT_SPACE)
    fail_data("deflate: stream decodes to more than " + num(want) + " bytes");
  if (r != LIBDEFLATE_SUCCESS)
    fail_data("deflate: corrupt zlib stream (bad data or adler32 mismatch)");
  if (expected != kUnknown && out_used != expected)
    fail_data("deflate: stream decodes to " + num(out_used) + " bytes, expected " + num(expected));
  if (in_used != n)
    fail_data("deflate: " + num(n - in_used) + " trailing bytes after the zlib stream");
  dst.produced(out_used);
  return out_used;
}

// ---------------------------------------------------------------------------------------------
// LZF (32000): one raw liblzf block (h5py's lzf_filter.c).

size_t lzf_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap) {
  const size_t want = expected != kUnknown ? expected : cap;
  if (n > UINT_MAX || want > UINT_MAX) fail_data("lzf: chunk too large for liblzf");
  if (want == 0) {
    if (n != 0) fail_data("lzf: data present for an empty chunk");
    dst.get(0);
    dst.produced(0);
    return 0;
  }
  if (n == 0) fail_data("lzf: empty chunk");  // liblzf reads one byte even for in_len 0
  uint8_t* out = dst.get(want);
  unsigned r = lzf_decompress(src, unsigned(n), out, unsigned(want));
  if (r == 0) fail_data("lzf: corrupt data or output larger than " + num(want) + " bytes");
  if (expected != kUnknown && r != expected)
    fail_data("lzf: data decodes to " + num(r) + " bytes, expected " + num(expected));
  dst.produced(r);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Blosc (32001): a self-describing Blosc1 frame. blosc_decompress_ctx with one internal thread
// avoids Blosc's global lock.

size_t blosc_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap) {
  if (n < BLOSC_MIN_HEADER_LENGTH)
    fail_data("blosc: chunk of " + num(n) + " bytes is shorter than the Blosc header");
  size_t nbytes = 0, cbytes = 0, blocksize = 0;
  blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
  size_t vbytes = 0;
  if (blosc_cbuffer_validate(src, n, &vbytes) < 0) fail_data("blosc: invalid Blosc header");
  if (cbytes != n)
    fail_data("blosc: header says " + num(cbytes) + " compressed bytes, chunk holds " + num(n));
  check_announced("blosc", nbytes, expected, cap);
  uint8_t* out = dst.get(nbytes);
  if (nbytes == 0) {
    dst.produced(0);
    return 0;
  }
  int r = blosc_decompress_ctx(src, out, nbytes, 1);
  if (r < 0 || size_t(r) != nbytes)
    fail_data("blosc: decompression failed (code " + std::to_string(r) + ")");
  dst.produced(nbytes);
  return nbytes;
}

// ---------------------------------------------------------------------------------------------
// LZ4 (32004), framing of H5Zlz4.c: BE u64 decoded size, BE u32 block size, then per block a
// BE u32 compressed size and the LZ4 block; a block whose compressed size equals its decoded
// size is stored raw. The last block may be shorter.

size_t lz4_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap) {
  if (n < 12) fail_data("lz4: chunk of " + num(n) + " bytes is shorter than the 12-byte header");
  const uint64_t orig = be64(src);
  uint64_t block = be32(src + 8);
  check_announced("lz4", orig, expected, cap);
  if (orig > 0 && block == 0) fail_data("lz4: block size 0 in header");
  if (block > orig) block = orig;
  if (block > uint64_t(INT_MAX)) fail_data("lz4: block size " + num(block) + " too large");
  uint8_t* out = dst.get(size_t(orig));
  size_t pos = 12;
  uint64_t done = 0;
  while (done < orig) {
    const size_t bs = size_t(orig - done < block ? orig - done : block);
    if (n - pos < 4) fail_data("lz4: truncated (block header at byte " + num(pos) + ")");
    const size_t c = be32(src + pos);
    pos += 4;
    if (c > n - pos)
      fail_data("lz4: block of " + num(c) + " bytes at byte " + num(pos) + " runs past the end");
    if (c == bs) {
      std::memcpy(out + done, src + pos, bs);
    } else {
      if (c > size_t(INT_MAX)) fail_data("lz4: block size too large");
      int r = LZ4_decompress_safe(reinterpret_cast<const char*>(src + pos),
                                  reinterpret_cast<char*>(out + done), int(c), int(bs));
      if (r < 0 || size_t(r) != bs)
        fail_data("lz4: corrupt block at byte " + num(pos - 4));
    }
    pos += c;
    done += bs;
  }
  if (pos != n) fail_data("lz4: " + num(n - pos) + " trailing bytes after the last block");
  dst.produced(size_t(orig));
  return size_t(orig);
}

// ---------------------------------------------------------------------------------------------
// zstd (32015): one zstd frame (as ZSTD_compress writes it, with its content size).

namespace {
size_t zstd_into(const uint8_t* src, size_t n, uint8_t* out, size_t want, const char* who) {
  size_t r = ZSTD_decompressDCtx(tl_zstd.get(), out, want, src, n);
  if (ZSTD_isError(r)) fail_data(std::string(who) + ": " + ZSTD_getErrorName(r));
  return r;
}
}  // namespace

size_t zstd_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap) {
  const unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
  if (fcs == ZSTD_CONTENTSIZE_ERROR) fail_data("zstd: not a zstd frame");
  size_t want;
  if (fcs != ZSTD_CONTENTSIZE_UNKNOWN) {
    check_announced("zstd", fcs, expected, cap);
    want = size_t(fcs);
  } else {
    want = expected != kUnknown ? expected : cap;
  }
  uint8_t* out = dst.get(want);
  size_t r = zstd_into(src, n, out, want, "zstd");
  if (expected != kUnknown && r != expected)
    fail_data("zstd: frame decodes to " + num(r) + " bytes, expected " + num(expected));
  dst.produced(r);
  return r;
}

// ---------------------------------------------------------------------------------------------
// shuffle (2)

namespace {

#if defined(__SSE2__)
inline __m128i ld(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void st(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
#endif

size_t unshuffle2(const uint8_t* src, uint8_t* dst, size_t N) {
  size_t i = 0;
#if defined(__SSE2__)
  const uint8_t* s0 = src;
  const uint8_t* s1 = src + N;
  for (; i + 16 <= N; i += 16) {
    __m128i a = ld(s0 + i), b = ld(s1 + i);
    st(dst + 2 * i, _mm_unpacklo_epi8(a, b));
    st(dst + 2 * i + 16, _mm_unpackhi_epi8(a, b));
  }
#endif
  return i;
}

size_t unshuffle4(const uint8_t* src, uint8_t* dst, size_t N) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= N; i += 16) {
    __m128i a = ld(src + i), b = ld(src + N + i), c = ld(src + 2 * N + i), d = ld(src + 3 * N + i);
    __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
    __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
    uint8_t* o = dst + 4 * i;
    st(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
    st(o + 16, _mm_unpackhi_epi16(ab_lo, cd_lo));
    st(o + 32, _mm_unpacklo_epi16(ab_hi, cd_hi));
    st(o + 48, _mm_unpackhi_epi16(ab_hi, cd_hi));
  }
#endif
  return i;
}

size_t unshuffle8(const uint8_t* src, uint8_t* dst, size_t N) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= N; i += 16) {
    __m128i s[8];
    for (int k = 0; k < 8; ++k) s[k] = ld(src + size_t(k) * N + i);
    // level 1: byte pairs
    __m128i p01l = _mm_unpacklo_epi8(s[0], s[1]), p01h = _mm_unpackhi_epi8(s[0], s[1]);
    __m128i p23l = _mm_unpacklo_epi8(s[2], s[3]), p23h = _mm_unpackhi_epi8(s[2], s[3]);
    __m128i p45l = _mm_unpacklo_epi8(s[4], s[5]), p45h = _mm_unpackhi_epi8(s[4], s[5]);
    __m128i p67l = _mm_unpacklo_epi8(s[6], s[7]), p67h = _mm_unpackhi_epi8(s[6], s[7]);
    // level 2: 4-byte groups; q?_0: elements 0-3, _1: 4-7, _2: 8-11, _3: 12-15
    __m128i qa0 = _mm_unpacklo_epi16(p01l, p23l), qa1 = _mm_unpackhi_epi16(p01l, p23l);
    __m128i qa2 = _mm_unpacklo_epi16(p01h, p23h), qa3 = _mm_unpackhi_epi16(p01h, p23h);
    __m128i qb0 = _mm_unpacklo_epi16(p45l, p67l), qb1 = _mm_unpackhi_epi16(p45l, p67l);
    __m128i qb2 = _mm_unpacklo_epi16(p45h, p67h), qb3 = _mm_unpackhi_epi16(p45h, p67h);
    uint8_t* o = dst + 8 * i;
    st(o + 0, _mm_unpacklo_epi32(qa0, qb0));
    st(o + 16, _mm_unpackhi_epi32(qa0, qb0));
    st(o + 32, _mm_unpacklo_epi32(qa1, qb1));
    st(o + 48, _mm_unpackhi_epi32(qa1, qb1));
    st(o + 64, _mm_unpacklo_epi32(qa2, qb2));
    st(o + 80, _mm_unpackhi_epi32(qa2, qb2));
    st(o + 96, _mm_unpacklo_epi32(qa3, qb3));
    st(o + 112, _mm_unpackhi_epi32(qa3, qb3));
  }
#endif
  return i;
}

}  // namespace

void unshuffle(const uint8_t* src, uint8_t* dst, size_t nbytes, size_t es) {
  if (es <= 1 || nbytes < 2 * es) {
    if (nbytes) std::memcpy(dst, src, nbytes);
    return;
  }
  const size_t N = nbytes / es;
  size_t done = 0;  // elements already written by a vector path
  switch (es) {
    case 2: done = unshuffle2(src, dst, N); break;
    case 4: done = unshuffle4(src, dst, N); break;
    case 8: done = unshuffle8(src, dst, N); break;
    default: break;
  }
  if (done < N) {
    const size_t rest = N - done;
    for (size_t j = 0; j < es; ++j) {
      const uint8_t* s = src + j * N + done;
      uint8_t* d = dst + done * es + j;
      for (size_t i = 0; i < rest; ++i) d[i * es] = s[i];
    }
  }
  const size_t tail = nbytes - N * es;
  if (tail) std::memcpy(dst + N * es, src + N * es, tail);
}

// ---------------------------------------------------------------------------------------------
// fletcher32 (3), as H5_checksum_fletcher32 in H5checksum.c.

uint32_t fletcher32(const uint8_t* data, size_t nbytes) {
  size_t len = nbytes / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (len) {
    size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += (uint32_t(data[0]) << 8) | uint32_t(data[1]);
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (nbytes % 2) {
    sum1 += uint32_t(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

size_t fletcher32_check(const uint8_t* p, size_t n) {
  if (n < 4) fail_data("fletcher32: chunk of " + num(n) + " bytes cannot hold the checksum");
  const size_t m = n - 4;
  const uint32_t stored = uint32_t(p[m]) | (uint32_t(p[m + 1]) << 8) | (uint32_t(p[m + 2]) << 16) |
                          (uint32_t(p[m + 3]) << 24);
  const uint32_t sum = fletcher32(p, m);
  // HDF5 <= 1.6.2 on little-endian hosts stored the checksum with the two bytes of each 16-bit
  // half swapped; H5Zfletcher32.c accepts both.
  const uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
  if (stored != sum && stored != swapped)
    fail_data("fletcher32: checksum mismatch (data corrupt)");
  return m;
}

// ---------------------------------------------------------------------------------------------
// bitshuffle (32008)

size_t bitshuffle_default_block(size_t elem_size) {
  size_t b = 8192 / (elem_size ? elem_size : 1);
  b = (b / 8) * 8;
  return b < 128 ? 128 : b;
}

namespace {

// Transposes the 8x8 bit matrix held in x (row r = byte r, column c = bit c): bit 8r+c moves
// to bit 8c+r.
inline uint64_t transpose8x8(uint64_t x) {
  uint64_t t;
  t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x = x ^ t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x = x ^ t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  x = x ^ t ^ (t << 28);
  return x;
}

#if defined(__SSE2__)
inline __m128i transpose8x8x2(__m128i x) {
  const __m128i m1 = _mm_set1_epi64x(0x00AA00AA00AA00AALL);
  const __m128i m2 = _mm_set1_epi64x(0x0000CCCC0000CCCCLL);
  const __m128i m3 = _mm_set1_epi64x(0x00000000F0F0F0F0LL);
  __m128i t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 7)), m1);
  x = _mm_xor_si128(_mm_xor_si128(x, t), _mm_slli_epi64(t, 7));
  t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 14)), m2);
  x = _mm_xor_si128(_mm_xor_si128(x, t), _mm_slli_epi64(t, 14));
  t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 28)), m3);
  x = _mm_xor_si128(_mm_xor_si128(x, t), _mm_slli_epi64(t, 28));
  return x;
}
#endif

// Step 1 of the untranspose: from 8*es bit rows of nb = nelem/8 bytes each to the byte-shuffled
// layout (byte j of element i at j*nelem + i).
void bitrows_to_bytes(const uint8_t* src, uint8_t* dst, size_t nelem, size_t es) {
  const size_t nb = nelem / 8;
  for (size_t j = 0; j < es; ++j) {
    const uint8_t* rows = src + j * 8 * nb;  // rows k = 0..7 of byte j
    uint8_t* d = dst + j * nelem;
    size_t g = 0;
#if defined(__SSE2__)
    for (; g + 16 <= nb; g += 16) {
      __m128i r0 = ld(rows + g), r1 = ld(rows + nb + g), r2 = ld(rows + 2 * nb + g),
              r3 = ld(rows + 3 * nb + g), r4 = ld(rows + 4 * nb + g), r5 = ld(rows + 5 * nb + g),
              r6 = ld(rows + 6 * nb + g), r7 = ld(rows + 7 * nb + g);
      __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);
      __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);
      __m128i c0 = _mm_unpacklo_epi8(r4, r5), c1 = _mm_unpackhi_epi8(r4, r5);
      __m128i d0 = _mm_unpacklo_epi8(r6, r7), d1 = _mm_unpackhi_epi8(r6, r7);
      __m128i ab0 = _mm_unpacklo_epi16(a0, b0), ab1 = _mm_unpackhi_epi16(a0, b0);
      __m128i ab2 = _mm_unpacklo_epi16(a1, b1), ab3 = _mm_unpackhi_epi16(a1, b1);
      __m128i cd0 = _mm_unpacklo_epi16(c0, d0), cd1 = _mm_unpackhi_epi16(c0, d0);
      __m128i cd2 = _mm_unpacklo_epi16(c1, d1), cd3 = _mm_unpackhi_epi16(c1, d1);
      // each 64-bit lane now holds rows 0..7 (as bytes 0..7) of one byte column g'
      uint8_t* o = d + 8 * g;
      st(o + 0, transpose8x8x2(_mm_unpacklo_epi32(ab0, cd0)));
      st(o + 16, transpose8x8x2(_mm_unpackhi_epi32(ab0, cd0)));
      st(o + 32, transpose8x8x2(_mm_unpacklo_epi32(ab1, cd1)));
      st(o + 48, transpose8x8x2(_mm_unpackhi_epi32(ab1, cd1)));
      st(o + 64, transpose8x8x2(_mm_unpacklo_epi32(ab2, cd2)));
      st(o + 80, transpose8x8x2(_mm_unpackhi_epi32(ab2, cd2)));
      st(o + 96, transpose8x8x2(_mm_unpacklo_epi32(ab3, cd3)));
      st(o + 112, transpose8x8x2(_mm_unpackhi_epi32(ab3, cd3)));
    }
#endif
    for (; g < nb; ++g) {
      uint64_t x = 0;
      for (int k = 0; k < 8; ++k) x |= uint64_t(rows[size_t(k) * nb + g]) << (8 * k);
      x = transpose8x8(x);
      for (int b = 0; b < 8; ++b) d[8 * g + size_t(b)] = uint8_t(x >> (8 * b));
    }
  }
}

}  // namespace

void bitunshuffle_block(const uint8_t* src, uint8_t* dst, size_t nelem, size_t es) {
  if (nelem == 0) return;
  if (es == 1) {
    bitrows_to_bytes(src, dst, nelem, 1);
    return;
  }
  uint8_t* tmp = tl_block2.get(nelem * es);
  bitrows_to_bytes(src, tmp, nelem, es);
  unshuffle(tmp, dst, nelem * es, es);
}

void bitunshuffle(const uint8_t* src, uint8_t* dst, size_t nelem, size_t es, size_t block) {
  size_t off = 0;  // in elements
  const size_t full = nelem / block;
  for (size_t b = 0; b < full; ++b, off += block)
    bitunshuffle_block(src + off * es, dst + off * es, block, es);
  size_t last = nelem % block;
  last -= last % 8;
  if (last) {
    bitunshuffle_block(src + off * es, dst + off * es, last, es);
    off += last;
  }
  const size_t rest = (nelem - off) * es;
  if (rest) std::memcpy(dst + off * es, src + off * es, rest);
}

// Framing (bitshuffle's bshuf_h5filter.c, version >= 0.3, and bitshuffle.c):
//   cd_values = {major, minor, elem_size, block_size (elements, 0 = default), compression, level}
//   compression 0 (or absent): no header; the chunk is bshuf_bitshuffle's output, same size.
//   compression 2 (LZ4) / 3 (zstd): BE u64 decoded bytes, BE u32 block size in BYTES (the
//   decoder divides by elem_size and uses that instead of cd_values[3]), then for each block of
//   block_size elements (and one last block of the remaining elements rounded down to a multiple
//   of 8): BE u32 compressed size + LZ4 block / zstd frame of the bit-transposed block; finally
//   the last nelem % 8 elements raw (elem_size bytes each, not compressed).
size_t bitshuffle_decode(const uint8_t* src, size_t n, Sink& dst, size_t expected, size_t cap,
                         const std::vector<unsigned>& cd, size_t elem_size) {
  const size_t es = cd.size() > 2 && cd[2] ? cd[2] : elem_size;
  if (es == 0) fail_data("bitshuffle: element size 0");
  size_t block = cd.size() > 3 ? cd[3] : 0;
  const unsigned comp = cd.size() > 4 ? cd[4] : kBshufNone;

  if (comp != kBshufLz4 && comp != kBshufZstd) {
    if (expected != kUnknown && n != expected)
      fail_data("bitshuffle: chunk of " + num(n) + " bytes, expected " + num(expected));
    if (n % es) fail_data("bitshuffle: " + num(n) + " bytes is not a whole number of elements");
    if (block == 0) block = bitshuffle_default_block(es);
    if (block % 8) fail_data("bitshuffle: block size " + num(block) + " not a multiple of 8");
    uint8_t* out = dst.get(n);
    bitunshuffle(src, out, n / es, es, block);
    dst.produced(n);
    return n;
  }

  const char* who = comp == kBshufLz4 ? "bitshuffle-lz4" : "bitshuffle-zstd";
  if (n < 12) fail_data(std::string(who) + ": chunk shorter than the 12-byte header");
  const uint64_t total = be64(src);
  check_announced(who, total, expected, cap);
  block = be32(src + 8) / es;
  if (total % es)
    fail_data(std::string(who) + ": " + num(total) + " bytes is not a whole number of elements");
  if (block == 0) block = bitshuffle_default_block(es);
  if (block % 8) fail_data(std::string(who) + ": block size " + num(block) + " not a multiple of 8");
  const size_t nelem = size_t(total / es);
  uint8_t* out = dst.get(size_t(total));

  size_t pos = 12, off = 0;  // off in elements
  const size_t full = nelem / block;
  size_t last = nelem % block;
  last -= last % 8;
  const size_t nblocks = full + (last ? 1 : 0);
  uint8_t* tmp = nblocks ? tl_block.get((full ? block : last) * es) : nullptr;
  for (size_t b = 0; b < nblocks; ++b) {
    const size_t m = b < full ? block : last;
    const size_t bytes = m * es;
    if (n - pos < 4) fail_data(std::string(who) + ": truncated at block " + num(b));
    const size_t c = be32(src + pos);
    pos += 4;
    if (c > n - pos) fail_data(std::string(who) + ": block " + num(b) + " runs past the end");
    if (comp == kBshufLz4) {
      if (bytes > size_t(INT_MAX)) fail_data(std::string(who) + ": block too large");
      int r = LZ4_decompress_safe(reinterpret_cast<const char*>(src + pos),
                                  reinterpret_cast<char*>(tmp), int(c), int(bytes));
      if (r < 0 || size_t(r) != bytes)
        fail_data(std::string(who) + ": corrupt LZ4 block " + num(b));
    } else {
      size_t r = zstd_into(src + pos, c, tmp, bytes, who);
      if (r != bytes) fail_data(std::string(who) + ": zstd block " + num(b) + " has wrong size");
    }
    bitunshuffle_block(tmp, out + off * es, m, es);
    pos += c;
    off += m;
  }
  const size_t rest = (nelem - off) * es;
  if (n - pos < rest) fail_data(std::string(who) + ": truncated in the trailing raw elements");
  if (rest) std::memcpy(out + off * es, src + pos, rest);
  pos += rest;
  if (pos != n) fail_data(std::string(who) + ": " + num(n - pos) + " trailing bytes");
  dst.produced(size_t(total));
  return size_t(total);
}

}  // namespace codec
}  // namespace h5d::filters
