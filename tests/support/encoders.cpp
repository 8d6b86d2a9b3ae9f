// Forward filters for tests and fixtures (see encoders.h). Nothing here uses core/filters code.
#include "tests/support/encoders.h"

#include <blosc.h>
#include <lz4.h>
#include <lzf.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <stdexcept>

namespace h5d {
namespace test {

namespace {
void put_be32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i) {
    p[i] = uint8_t(v & 0xff);
    v >>= 8;
  }
}
void put_be64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = uint8_t(v & 0xff);
    v >>= 8;
  }
}
FilterInfo make(int id, const char* name, std::vector<unsigned> cd) {
  FilterInfo f;
  f.id = id;
  f.name = name;
  f.cd_values = std::move(cd);
  return f;
}
}  // namespace

FilterInfo deflate_filter(unsigned level) { return make(1, "deflate", {level}); }
FilterInfo shuffle_filter(size_t elem_size) { return make(2, "shuffle", {unsigned(elem_size)}); }
FilterInfo fletcher32_filter() { return make(3, "fletcher32", {}); }
FilterInfo lzf_filter(size_t chunk_bytes) {
  return make(32000, "lzf", {4, 0x0105, unsigned(chunk_bytes)});
}
FilterInfo blosc_filter(size_t typesize, size_t chunk_bytes, unsigned clevel, unsigned shuffle,
                        unsigned compcode) {
  return make(32001, "blosc",
              {2, 2, unsigned(typesize), unsigned(chunk_bytes), clevel, shuffle, compcode});
}
FilterInfo lz4_filter(unsigned block_bytes) { return make(32004, "lz4", {block_bytes}); }
FilterInfo bitshuffle_filter(size_t elem_size, unsigned block_elems, unsigned compression,
                             unsigned level) {
  std::vector<unsigned> cd = {0, 4, unsigned(elem_size), block_elems, compression};
  if (compression == 3) cd.push_back(level);
  return make(32008, "bitshuffle", cd);
}
FilterInfo zstd_filter(unsigned level) { return make(32015, "zstd", {level}); }

Bytes encode_deflate(const uint8_t* p, size_t n, unsigned level) {
  uLongf cap = compressBound(uLong(n));
  Bytes out(cap);
  if (compress2(out.data(), &cap, p, uLong(n), int(level)) != Z_OK)
    throw std::runtime_error("compress2 failed");
  out.resize(cap);
  return out;
}

Bytes encode_shuffle(const uint8_t* p, size_t n, size_t es) {
  Bytes out(p, p + n);
  if (es <= 1) return out;
  const size_t N = n / es;
  for (size_t i = 0; i < N; ++i)
    for (size_t j = 0; j < es; ++j) out[j * N + i] = p[i * es + j];
  return out;  // the n % es trailing bytes stay where they are
}

// Fletcher-32 over big-endian 16-bit words with end-around-carry folding, an odd last byte
// counting as the high byte of a final word (the definition H5_checksum_fletcher32 implements).
uint32_t fletcher32_simple(const uint8_t* p, size_t n) {
  uint64_t s1 = 0, s2 = 0;
  size_t words = n / 2;
  size_t i = 0;
  for (size_t w = 0; w < words; ++w, i += 2) {
    s1 += (uint32_t(p[i]) << 8) | p[i + 1];
    s2 += s1;
    // fold at the same points as HDF5 (every 360 words), since the unreduced representation
    // of 0 (0 or 0xffff) depends on where folding happens
    if ((w + 1) % 360 == 0) {
      s1 = (s1 & 0xffff) + (s1 >> 16);
      s2 = (s2 & 0xffff) + (s2 >> 16);
    }
  }
  if (words % 360) {
    s1 = (s1 & 0xffff) + (s1 >> 16);
    s2 = (s2 & 0xffff) + (s2 >> 16);
  }
  if (n % 2) {
    s1 += uint32_t(p[n - 1]) << 8;
    s2 += s1;
    s1 = (s1 & 0xffff) + (s1 >> 16);
    s2 = (s2 & 0xffff) + (s2 >> 16);
  }
  s1 = (s1 & 0xffff) + (s1 >> 16);
  s2 = (s2 & 0xffff) + (s2 >> 16);
  return uint32_t((s2 << 16) | s1);
}

Bytes encode_fletcher32(const uint8_t* p, size_t n) {
  Bytes out(p, p + n);
  uint32_t c = fletcher32_simple(p, n);
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(c >> (8 * i)));
  return out;
}

Bytes encode_lzf(const uint8_t* p, size_t n) {
  Bytes out(n ? n : 1);
  unsigned r = lzf_compress(p, unsigned(n), out.data(), unsigned(n));
  out.resize(r);
  return out;
}

Bytes encode_blosc(const uint8_t* p, size_t n, size_t typesize, unsigned clevel, unsigned shuffle,
                   unsigned compcode) {
  const char* name = nullptr;
  if (blosc_compcode_to_compname(int(compcode), &name) < 0 || !name)
    throw std::runtime_error("unknown blosc compcode");
  if (typesize > BLOSC_MAX_TYPESIZE) typesize = 1;
  Bytes out(n);
  int r = blosc_compress_ctx(int(clevel), int(shuffle), typesize, n, p, out.data(), n, name, 0, 1);
  if (r < 0) throw std::runtime_error("blosc_compress_ctx failed");
  out.resize(size_t(r));
  return out;
}

Bytes encode_lz4(const uint8_t* p, size_t n, unsigned block_bytes) {
  size_t block = block_bytes ? block_bytes : (size_t(1) << 30);
  if (block > n) block = n;
  Bytes out(12);
  put_be64(out.data(), n);
  put_be32(out.data() + 8, uint32_t(block));
  size_t done = 0;
  while (done < n) {
    size_t bs = n - done < block ? n - done : block;
    Bytes tmp(static_cast<size_t>(LZ4_compressBound(int(bs))));
    int c = LZ4_compress_default(reinterpret_cast<const char*>(p + done),
                                 reinterpret_cast<char*>(tmp.data()), int(bs), int(tmp.size()));
    const uint8_t* src = tmp.data();
    if (c <= 0 || size_t(c) >= bs) {  // store raw, as H5Zlz4.c does
      c = int(bs);
      src = p + done;
    }
    size_t at = out.size();
    out.resize(at + 4 + size_t(c));
    put_be32(out.data() + at, uint32_t(c));
    std::memcpy(out.data() + at + 4, src, size_t(c));
    done += bs;
  }
  return out;
}

void bitshuffle_block_simple(const uint8_t* in, uint8_t* out, size_t m, size_t es) {
  std::memset(out, 0, m * es);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < es; ++j)
      for (size_t k = 0; k < 8; ++k)
        if ((in[i * es + j] >> k) & 1) {
          size_t bit = (j * 8 + k) * m + i;
          out[bit / 8] = uint8_t(out[bit / 8] | (1u << (bit % 8)));
        }
}

Bytes encode_bitshuffle(const uint8_t* p, size_t n, size_t es, unsigned block_elems,
                        unsigned compression, int zstd_level) {
  if (es == 0 || n % es) throw std::runtime_error("bitshuffle: not a whole number of elements");
  size_t block = block_elems;
  if (block == 0) {
    block = 8192 / es;
    block = block / 8 * 8;
    if (block < 128) block = 128;
  }
  if (block % 8) throw std::runtime_error("bitshuffle: block size not a multiple of 8");
  const size_t nelem = n / es;
  const bool comp = compression == 2 || compression == 3;
  Bytes out;
  if (comp) {
    out.resize(12);
    put_be64(out.data(), n);
    put_be32(out.data() + 8, uint32_t(block * es));
  }
  std::vector<size_t> blocks(nelem / block, block);
  size_t last = nelem % block;
  last -= last % 8;
  if (last) blocks.push_back(last);
  size_t off = 0;
  Bytes t;
  for (size_t m : blocks) {
    t.assign(m * es, 0);
    bitshuffle_block_simple(p + off * es, t.data(), m, es);
    if (!comp) {
      out.insert(out.end(), t.begin(), t.end());
    } else {
      Bytes c;
      if (compression == 2) {
        c.resize(size_t(LZ4_compressBound(int(t.size()))));
        int r = LZ4_compress_default(reinterpret_cast<const char*>(t.data()),
                                     reinterpret_cast<char*>(c.data()), int(t.size()),
                                     int(c.size()));
        if (r <= 0) throw std::runtime_error("LZ4_compress_default failed");
        c.resize(size_t(r));
      } else {
        c.resize(ZSTD_compressBound(t.size()));
        size_t r = ZSTD_compress(c.data(), c.size(), t.data(), t.size(), zstd_level);
        if (ZSTD_isError(r)) throw std::runtime_error("ZSTD_compress failed");
        c.resize(r);
      }
      size_t at = out.size();
      out.resize(at + 4);
      put_be32(out.data() + at, uint32_t(c.size()));
      out.insert(out.end(), c.begin(), c.end());
    }
    off += m;
  }
  out.insert(out.end(), p + off * es, p + n);  // the last nelem % 8 elements, raw
  return out;
}

Bytes encode_zstd(const uint8_t* p, size_t n, int level, bool checksum) {
  Bytes out(ZSTD_compressBound(n));
  size_t r;
  if (!checksum) {
    r = ZSTD_compress(out.data(), out.size(), p, n, level);
  } else {
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    r = ZSTD_compress2(c, out.data(), out.size(), p, n);
    ZSTD_freeCCtx(c);
  }
  if (ZSTD_isError(r)) throw std::runtime_error("zstd compression failed");
  out.resize(r);
  return out;
}

Bytes encode_chunk(const std::vector<FilterInfo>& pipeline, size_t elem_size, const Bytes& bytes,
                   uint32_t* filter_mask) {
  uint32_t mask = filter_mask ? *filter_mask : 0;
  Bytes cur = bytes;
  for (size_t i = 0; i < pipeline.size(); ++i) {
    if (mask & (1u << i)) continue;
    const FilterInfo& f = pipeline[i];
    const auto& cd = f.cd_values;
    auto cdv = [&](size_t k, unsigned def) { return cd.size() > k ? cd[k] : def; };
    Bytes next;
    switch (f.id) {
      case 1: next = encode_deflate(cur.data(), cur.size(), cdv(0, 6)); break;
      case 2: next = encode_shuffle(cur.data(), cur.size(), cdv(0, unsigned(elem_size))); break;
      case 3: next = encode_fletcher32(cur.data(), cur.size()); break;
      case 32000:
        next = encode_lzf(cur.data(), cur.size());
        if (next.empty()) {
          mask |= 1u << i;
          continue;
        }
        break;
      case 32001:
        next = encode_blosc(cur.data(), cur.size(), cdv(2, unsigned(elem_size)), cdv(4, 5),
                            cdv(5, 1), cdv(6, 0));
        if (next.empty()) {
          mask |= 1u << i;
          continue;
        }
        break;
      case 32004: next = encode_lz4(cur.data(), cur.size(), cdv(0, 0)); break;
      case 32008:
        next = encode_bitshuffle(cur.data(), cur.size(), cdv(2, unsigned(elem_size)), cdv(3, 0),
                                 cdv(4, 0), int(cdv(5, 0)));
        break;
      case 32015: next = encode_zstd(cur.data(), cur.size(), int(cdv(0, 3))); break;
      default: throw std::runtime_error("encode_chunk: no encoder for filter " + std::to_string(f.id));
    }
    cur.swap(next);
  }
  if (filter_mask) *filter_mask = mask;
  return cur;
}

}  // namespace test
}  // namespace h5d
