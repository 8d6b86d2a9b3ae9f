#include "core/filters/encode.h"

#include <blosc.h>
#include <libdeflate.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace h5d::filters {
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

struct CompressorDeleter {
  void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
};

}  // namespace

EncodedBytes encode_deflate(const uint8_t* p, size_t n, unsigned level) {
  // One compressor per thread and level (allocation is not free: ~1 MB of tables).
  thread_local std::unique_ptr<libdeflate_compressor, CompressorDeleter> comp;
  thread_local unsigned comp_level = ~0u;
  if (level > 12) level = 12;
  if (!comp || comp_level != level) {
    comp.reset(libdeflate_alloc_compressor(static_cast<int>(level)));
    comp_level = level;
    if (!comp) fail(ENOMEM, "deflate: cannot allocate a compressor");
  }
  EncodedBytes out(libdeflate_zlib_compress_bound(comp.get(), n));
  const size_t r = libdeflate_zlib_compress(comp.get(), p, n, out.data(), out.size());
  if (r == 0) fail(EIO, "deflate: compression failed");
  out.resize(r);
  return out;
}

EncodedBytes encode_shuffle(const uint8_t* p, size_t n, size_t es) {
  EncodedBytes out(p, p + n);
  if (es <= 1) return out;
  const size_t N = n / es;
  for (size_t j = 0; j < es; ++j) {
    uint8_t* dst = out.data() + j * N;
    const uint8_t* src = p + j;
    for (size_t i = 0; i < N; ++i) dst[i] = src[i * es];
  }
  return out;
}

EncodedBytes encode_blosc(const uint8_t* p, size_t n, size_t typesize, unsigned clevel,
                          unsigned shuffle, unsigned compcode) {
  const char* name = nullptr;
  if (blosc_compcode_to_compname(int(compcode), &name) < 0 || !name) {
    fail(EINVAL, "blosc: unknown compressor code " + std::to_string(compcode));
  }
  if (typesize > BLOSC_MAX_TYPESIZE || typesize == 0) typesize = 1;
  EncodedBytes out(n + BLOSC_MAX_OVERHEAD);
  const int r = blosc_compress_ctx(int(clevel), int(shuffle), typesize, n, p, out.data(),
                                   out.size(), name, 0, 1);
  if (r <= 0) fail(EIO, "blosc: compression failed");
  out.resize(size_t(r));
  return out;
}

EncodedBytes encode_lz4(const uint8_t* p, size_t n, unsigned block_bytes) {
  size_t block = block_bytes ? block_bytes : (size_t(1) << 30);
  if (block > n) block = n;
  EncodedBytes out(12);
  put_be64(out.data(), n);
  put_be32(out.data() + 8, uint32_t(block));
  size_t done = 0;
  EncodedBytes tmp;
  while (done < n) {
    const size_t bs = n - done < block ? n - done : block;
    tmp.resize(static_cast<size_t>(LZ4_compressBound(int(bs))));
    int c = LZ4_compress_default(reinterpret_cast<const char*>(p + done),
                                 reinterpret_cast<char*>(tmp.data()), int(bs), int(tmp.size()));
    const uint8_t* src = tmp.data();
    if (c <= 0 || size_t(c) >= bs) {  // stored raw, as H5Zlz4.c does
      c = int(bs);
      src = p + done;
    }
    const size_t at = out.size();
    out.resize(at + 4 + size_t(c));
    put_be32(out.data() + at, uint32_t(c));
    std::memcpy(out.data() + at + 4, src, size_t(c));
    done += bs;
  }
  return out;
}

EncodedBytes encode_zstd(const uint8_t* p, size_t n, int level) {
  EncodedBytes out(ZSTD_compressBound(n));
  const size_t r = ZSTD_compress(out.data(), out.size(), p, n, level);
  if (ZSTD_isError(r)) fail(EIO, std::string("zstd: ") + ZSTD_getErrorName(r));
  out.resize(r);
  return out;
}

std::vector<FilterInfo> write_pipeline(const std::string& c, int level, bool shuffle,
                                       size_t elem_size, size_t chunk_bytes) {
  std::vector<FilterInfo> p;
  if (c.empty() || c == "none") return p;
  if (c == "gzip" || c == "deflate") {
    if (shuffle && elem_size > 1) p.push_back(make(kShuffle, "shuffle", {unsigned(elem_size)}));
    p.push_back(make(kDeflate, "deflate", {unsigned(level < 0 ? 4 : std::min(level, 9))}));
  } else if (c == "blosc") {
    // cd: filter revision, blosc version, typesize, chunk bytes, clevel, shuffle, compressor
    p.push_back(make(kBlosc, "blosc",
                     {2, 2, unsigned(elem_size), unsigned(chunk_bytes),
                      unsigned(level < 0 ? 5 : std::min(level, 9)), shuffle ? 1u : 0u, 1 /*lz4*/}));
  } else if (c == "lz4") {
    if (shuffle && elem_size > 1) p.push_back(make(kShuffle, "shuffle", {unsigned(elem_size)}));
    p.push_back(make(kLz4, "lz4", {0}));
  } else if (c == "zstd") {
    if (shuffle && elem_size > 1) p.push_back(make(kShuffle, "shuffle", {unsigned(elem_size)}));
    p.push_back(make(kZstd, "zstd", {unsigned(level < 0 ? 3 : level)}));
  } else {
    fail(EINVAL, "unknown compression '" + c + "' (use gzip, blosc, lz4, zstd or none)");
  }
  return p;
}

EncodedBytes encode_pipeline(const std::vector<FilterInfo>& pipeline, size_t elem_size,
                             const uint8_t* p, size_t n) {
  EncodedBytes cur(p, p + n);
  for (const FilterInfo& f : pipeline) {
    auto cdv = [&](size_t k, unsigned def) { return f.cd_values.size() > k ? f.cd_values[k] : def; };
    switch (f.id) {
      case kDeflate: cur = encode_deflate(cur.data(), cur.size(), cdv(0, 4)); break;
      case kShuffle: cur = encode_shuffle(cur.data(), cur.size(), cdv(0, unsigned(elem_size))); break;
      case kBlosc:
        cur = encode_blosc(cur.data(), cur.size(), cdv(2, unsigned(elem_size)), cdv(4, 5),
                           cdv(5, 1), cdv(6, 0));
        break;
      case kLz4: cur = encode_lz4(cur.data(), cur.size(), cdv(0, 0)); break;
      case kZstd: cur = encode_zstd(cur.data(), cur.size(), int(cdv(0, 3))); break;
      default: fail(EINVAL, "no encoder for filter " + filter_name(f.id));
    }
  }
  return cur;
}

}  // namespace h5d::filters
