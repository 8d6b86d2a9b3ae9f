// Single-core decode rate of 1 MiB chunks (512 x 1024 uint16, detector-like: pedestal + noise +
// sparse photons) for the filters h5direct undoes itself. MB/s = 10^6 decoded bytes per second.
// Usage: bench_decode [seconds per row, default 1]
#include <blosc.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/filters/codecs.h"
#include "core/filters/filters.h"

using Bytes = std::vector<uint8_t>;
using h5d::FilterInfo;

namespace {

Bytes detector_chunk() {
  const size_t rows = 512, cols = 1024;
  std::vector<uint16_t> v(rows * cols);
  std::mt19937 rng(42);
  std::normal_distribution<double> noise(0, 6);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> pedestal(cols);
  for (auto& p : pedestal) p = 900 + 200 * u(rng);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      double x = pedestal[c] + noise(rng);
      if (u(rng) < 0.01) x += 300 + 2000 * u(rng);  // photon hits
      v[r * cols + c] = uint16_t(std::clamp(x, 0.0, 65535.0));
    }
  Bytes b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes shuffle(const Bytes& d, size_t es) {
  Bytes o(d.size());
  const size_t n = d.size() / es;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < es; ++j) o[j * n + i] = d[i * es + j];
  return o;
}

Bytes zlib_compress(const Bytes& d, int level) {
  uLongf cap = compressBound(uLong(d.size()));
  Bytes o(cap);
  compress2(o.data(), &cap, d.data(), uLong(d.size()), level);
  o.resize(cap);
  return o;
}

void be32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}
void be64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}

Bytes lz4_block(const uint8_t* p, size_t n) {
  Bytes o(static_cast<size_t>(LZ4_compressBound(int(n))));
  int c = LZ4_compress_default(reinterpret_cast<const char*>(p), reinterpret_cast<char*>(o.data()),
                               int(n), int(o.size()));
  o.resize(size_t(c));
  return o;
}

Bytes lz4_h5(const Bytes& d) {  // H5Zlz4 framing, one block
  Bytes o(16);
  be64(o.data(), d.size());
  be32(o.data() + 8, uint32_t(d.size()));
  Bytes c = lz4_block(d.data(), d.size());
  be32(o.data() + 12, uint32_t(c.size()));
  o.insert(o.end(), c.begin(), c.end());
  return o;
}

Bytes bitshuffle_lz4(const Bytes& d, size_t es) {
  const size_t block = 8192 / es, nelem = d.size() / es;  // default block size
  Bytes o(12);
  be64(o.data(), d.size());
  be32(o.data() + 8, uint32_t(block * es));
  for (size_t off = 0; off + block <= nelem; off += block) {  // nelem is a multiple of block
    Bytes t(block * es, 0);
    for (size_t i = 0; i < block; ++i)
      for (size_t j = 0; j < es; ++j)
        for (size_t k = 0; k < 8; ++k)
          if ((d[(off + i) * es + j] >> k) & 1) {
            size_t bit = (j * 8 + k) * block + i;
            t[bit / 8] = uint8_t(t[bit / 8] | (1u << (bit % 8)));
          }
    Bytes c = lz4_block(t.data(), t.size());
    size_t at = o.size();
    o.resize(at + 4);
    be32(o.data() + at, uint32_t(c.size()));
    o.insert(o.end(), c.begin(), c.end());
  }
  return o;
}

FilterInfo F(int id, std::vector<unsigned> cd = {}) {
  FilterInfo f;
  f.id = id;
  f.cd_values = std::move(cd);
  return f;
}

double g_seconds = 1.0;

// Runs fn repeatedly for g_seconds; returns the best of 5 rounds in MB/s.
double rate(size_t bytes, const std::function<void()>& fn) {
  fn();  // warm up
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    size_t iters = 0;
    auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      fn();
      ++iters;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < g_seconds / 5);
    best = std::max(best, double(bytes) * double(iters) / el / 1e6);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_seconds = std::atof(argv[1]);
  const Bytes raw = detector_chunk();
  const size_t n = raw.size();
  const Bytes shuf = shuffle(raw, 2);
  Bytes in, out(n), tmp(n);

  struct Row {
    std::string name;
    size_t stored;
    double mbs;
  };
  std::vector<Row> rows;
  auto decode_row = [&](const std::string& name, const std::vector<FilterInfo>& p,
                        const Bytes& stored) {
    in = stored;
    h5d::filters::decode_chunk(p, 0, 2, in, n, out);
    if (out != raw) {
      std::fprintf(stderr, "%s: decoded data differs\n", name.c_str());
      std::exit(1);
    }
    double r = rate(n, [&] {
      if (in.size() != stored.size()) in = stored;
      h5d::filters::decode_chunk(p, 0, 2, in, n, out);
    });
    rows.push_back({name, stored.size(), r});
  };

  const Bytes z_shuf = zlib_compress(shuf, 4);  // h5py's default gzip level is 4
  const Bytes z_raw = zlib_compress(raw, 4);
  rows.push_back({"zlib inflate (shuffled data, level 4)", z_shuf.size(), rate(n, [&] {
                    uLongf len = uLongf(n);
                    uncompress(tmp.data(), &len, z_shuf.data(), uLong(z_shuf.size()));
                  })});
  rows.push_back({"zlib inflate + unshuffle", z_shuf.size(), rate(n, [&] {
                    uLongf len = uLongf(n);
                    uncompress(tmp.data(), &len, z_shuf.data(), uLong(z_shuf.size()));
                    h5d::filters::codec::unshuffle(tmp.data(), out.data(), n, 2);
                  })});
  {
    // libdeflate alone: decode the shuffled stream without the shuffle step (check vs shuf).
    std::vector<FilterInfo> p = {F(1, {4})};
    in = z_shuf;
    h5d::filters::decode_chunk(p, 0, 2, in, n, out);
    if (out != shuf) return 1;
    rows.push_back({"libdeflate (shuffled data)", z_shuf.size(),
                    rate(n, [&] { h5d::filters::decode_chunk(p, 0, 2, in, n, out); })});
  }
  decode_row("libdeflate, unshuffled data (level 4)", {F(1, {4})}, z_raw);
  decode_row("libdeflate + unshuffle (decode_chunk)", {F(2, {2}), F(1, {4})}, z_shuf);
  {
    Bytes z1 = zlib_compress(shuf, 1);
    decode_row("libdeflate + unshuffle, level 1", {F(2, {2}), F(1, {1})}, z1);
  }
  {
    Bytes zf = z_shuf;
    // fletcher32 appended (over the compressed bytes, as in the pipeline order)
    const uint32_t c = h5d::filters::codec::fletcher32(zf.data(), zf.size());
    for (int i = 0; i < 4; ++i) zf.push_back(uint8_t(c >> (8 * i)));
    decode_row("libdeflate + unshuffle + fletcher32", {F(2, {2}), F(1, {4}), F(3)}, zf);
  }
  decode_row("unshuffle alone", {F(2, {2})}, shuf);
  {
    Bytes b(n + BLOSC_MAX_OVERHEAD);
    int c = blosc_compress_ctx(5, 1, 2, n, raw.data(), b.data(), b.size(), "lz4", 0, 1);
    b.resize(size_t(c));
    decode_row("blosc lz4 + byte shuffle (clevel 5)", {F(32001, {2, 2, 2, unsigned(n), 5, 1, 1})},
               b);
    Bytes b2(n + BLOSC_MAX_OVERHEAD);
    c = blosc_compress_ctx(5, 2, 2, n, raw.data(), b2.data(), b2.size(), "lz4", 0, 1);
    b2.resize(size_t(c));
    decode_row("blosc lz4 + bit shuffle (clevel 5)", {F(32001, {2, 2, 2, unsigned(n), 5, 2, 1})},
               b2);
  }
  decode_row("lz4 (H5Zlz4 framing, unshuffled)", {F(32004)}, lz4_h5(raw));
  decode_row("shuffle + lz4", {F(2, {2}), F(32004)}, lz4_h5(shuf));
  {
    Bytes z(ZSTD_compressBound(n));
    z.resize(ZSTD_compress(z.data(), z.size(), raw.data(), n, 3));
    decode_row("zstd level 3 (unshuffled)", {F(32015, {3})}, z);
    Bytes zs(ZSTD_compressBound(n));
    zs.resize(ZSTD_compress(zs.data(), zs.size(), shuf.data(), n, 3));
    decode_row("shuffle + zstd level 3", {F(2, {2}), F(32015, {3})}, zs);
  }
  decode_row("bitshuffle + lz4 (default block)", {F(32008, {0, 4, 2, 0, 2})},
             bitshuffle_lz4(raw, 2));

  std::printf("\nDecode rate, one core, 1 MiB chunk (512x1024 uint16, pedestal+noise+photons)\n\n");
  std::printf("| pipeline | stored bytes | ratio | MB/s |\n|---|---:|---:|---:|\n");
  for (const auto& r : rows)
    std::printf("| %s | %zu | %.2f | %.0f |\n", r.name.c_str(), r.stored,
                double(n) / double(r.stored), r.mbs);
  return 0;
}
