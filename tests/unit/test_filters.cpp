// Filter decoders against the independent encoders in tests/support/encoders.cpp, known-answer
// vectors, and corrupted input. (Decoders against libhdf5 itself: test_filters_hdf5.cpp.)
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/filters/codecs.h"
#include "core/filters/filters.h"
#include "tests/support/encoders.h"

using h5d::FilterInfo;
using namespace h5d::test;

namespace {

// Detector-like bytes: small noisy integers, compressible; `random_frac` of runs pure noise.
Bytes make_data(size_t n, uint32_t seed, double random_frac = 0.1) {
  std::mt19937 rng(seed);
  Bytes b(n);
  std::uniform_real_distribution<double> u(0, 1);
  size_t i = 0;
  while (i < n) {
    size_t run = 1 + rng() % 300;
    bool noise = u(rng) < random_frac;
    for (size_t k = 0; k < run && i < n; ++k, ++i)
      b[i] = noise ? uint8_t(rng()) : uint8_t((i % 7 == 0) ? (rng() % 4) : (i & 1 ? 0 : rng() % 3));
  }
  return b;
}

Bytes decode(const std::vector<FilterInfo>& p, uint32_t mask, size_t es, Bytes in,
             size_t out_size) {
  Bytes out;
  h5d::filters::decode_chunk(p, mask, es, in, out_size, out);
  return out;
}

Bytes roundtrip(const std::vector<FilterInfo>& p, size_t es, const Bytes& data,
                uint32_t mask = 0) {
  Bytes enc = encode_chunk(p, es, data, &mask);
  return decode(p, mask, es, enc, data.size());
}

}  // namespace

TEST_CASE("filter names and pipeline support", "[filters]") {
  CHECK(h5d::filters::filter_name(1) == "deflate");
  CHECK(h5d::filters::filter_name(2) == "shuffle");
  CHECK(h5d::filters::filter_name(3) == "fletcher32");
  CHECK(h5d::filters::filter_name(32000) == "lzf");
  CHECK(h5d::filters::filter_name(32001) == "blosc");
  CHECK(h5d::filters::filter_name(32004) == "lz4");
  CHECK(h5d::filters::filter_name(32008) == "bitshuffle");
  CHECK(h5d::filters::filter_name(32015) == "zstd");
  CHECK(h5d::filters::filter_name(4) == "szip");
  CHECK(h5d::filters::filter_name(12345) == "filter-12345");
  std::string why = "x";
  for (int id : {1, 2, 3, 32000, 32001, 32004, 32008, 32015}) {
    FilterInfo f;
    f.id = id;
    CHECK(h5d::filters::pipeline_supported({f}, &why));
    CHECK(why.empty());
  }
  CHECK(h5d::filters::pipeline_supported({}, &why));
  for (int id : {4, 5, 6, 307, 99999}) {
    FilterInfo a, b;
    a.id = 2;
    b.id = id;
    CHECK_FALSE(h5d::filters::pipeline_supported({a, b}, &why));
    CHECK(why.find(h5d::filters::filter_name(id)) != std::string::npos);
    CHECK(why.find(std::to_string(id)) != std::string::npos);
  }
  FilterInfo sz;
  sz.id = 4;
  CHECK_FALSE(h5d::filters::pipeline_supported({sz}, nullptr));
}

TEST_CASE("unshuffle matches the plain shuffle definition", "[filters]") {
  std::mt19937 rng(1);
  for (size_t es = 1; es <= 17; ++es) {
    for (size_t n : {size_t(0), size_t(1), es - 1, es, es + 1, size_t(31), size_t(255),
                     size_t(1000), size_t(4099), size_t(16 * 8 * 3 + 5)}) {
      Bytes d(n);
      for (auto& x : d) x = uint8_t(rng());
      Bytes s = encode_shuffle(d.data(), n, es);
      Bytes o(n);
      h5d::filters::codec::unshuffle(s.data(), o.data(), n, es);
      INFO("es=" << es << " n=" << n);
      REQUIRE(o == d);
      REQUIRE(roundtrip({shuffle_filter(es)}, es, d) == d);
    }
  }
}

TEST_CASE("shuffle uses cd_values[0], falls back to the element size", "[filters]") {
  Bytes d = make_data(1200, 5, 1.0);
  Bytes s = encode_shuffle(d.data(), d.size(), 4);
  FilterInfo f;
  f.id = 2;  // no cd_values: uses elem_size
  REQUIRE(decode({f}, 0, 4, s, d.size()) == d);
  REQUIRE(decode({shuffle_filter(4)}, 0, 2, s, d.size()) == d);  // cd_values win
}

TEST_CASE("fletcher32 matches the reference definition", "[filters]") {
  std::mt19937 rng(2);
  for (size_t n = 0; n < 1600; n += (n < 40 ? 1 : 37)) {
    Bytes d(n);
    for (auto& x : d) x = uint8_t(rng());
    if (n > 100) std::fill(d.begin() + 10, d.begin() + 60, 0xff);  // carries
    INFO("n=" << n);
    REQUIRE(h5d::filters::codec::fletcher32(d.data(), n) == fletcher32_simple(d.data(), n));
  }
  // All-0xff data exercises the end-around carry at every 360-word fold.
  Bytes ff(4000, 0xff);
  REQUIRE(h5d::filters::codec::fletcher32(ff.data(), ff.size()) == fletcher32_simple(ff.data(), ff.size()));

  Bytes d = make_data(1001, 3);
  Bytes enc = encode_fletcher32(d.data(), d.size());
  REQUIRE(decode({fletcher32_filter()}, 0, 1, enc, d.size()) == d);
  // HDF5 <= 1.6.2 byte-swapped variant: bytes swapped within each 16-bit half.
  Bytes old = enc;
  std::swap(old[d.size()], old[d.size() + 1]);
  std::swap(old[d.size() + 2], old[d.size() + 3]);
  REQUIRE(decode({fletcher32_filter()}, 0, 1, old, d.size()) == d);
  Bytes bad = enc;
  bad[10] ^= 1;
  REQUIRE_THROWS_AS(decode({fletcher32_filter()}, 0, 1, bad, d.size()), h5d::Error);
  REQUIRE_THROWS_AS(decode({fletcher32_filter()}, 0, 1, Bytes{1, 2, 3}, 0), h5d::Error);
}

TEST_CASE("bitshuffle known-answer vectors", "[filters]") {
  // Derived by hand from the definition in bitshuffle's bitshuffle_core.c
  // (bshuf_trans_bit_elem = trans_byte_elem, trans_bit_byte, trans_bitrow_eight): output bit
  // (j*8 + k)*n + i is bit k of byte j of element i, bits numbered from the least significant
  // one of each byte. Eight little-endian uint16 elements, so byte m of the output holds bit
  // plane m: byte j = m / 8, bit k = m % 8, bit i set when element i has that bit.
  const uint16_t v[8] = {0x0001, 0x0002, 0x0004, 0x0008, 0x0100, 0x8000, 0xFFFF, 0x0000};
  Bytes raw(16);
  std::memcpy(raw.data(), v, 16);  // little-endian host
  const Bytes want = {0x41, 0x42, 0x44, 0x48, 0x40, 0x40, 0x40, 0x40,
                      0x50, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x60};
  Bytes simple(16);
  bitshuffle_block_simple(raw.data(), simple.data(), 8, 2);
  REQUIRE(simple == want);
  Bytes o(16);
  h5d::filters::codec::bitunshuffle_block(want.data(), o.data(), 8, 2);
  REQUIRE(o == raw);
  // Without compression the filter output is just the transposed block (default block size
  // 4096 elements > 8: one partial block of 8).
  REQUIRE(decode({bitshuffle_filter(2, 0, 0)}, 0, 2, want, 16) == raw);

  // With LZ4 (bshuf_h5filter.c framing): BE u64 16, BE u32 8192 (default block 4096 elements
  // * 2 bytes), then BE u32 18 + LZ4 block of the 16 transposed bytes (token 0xF0: 15+ literals,
  // extra length byte 0x01 -> 16 literals, no match).
  Bytes framed = {0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0x20, 0, 0, 0, 0, 18, 0xF0, 0x01};
  // reserve first: without it GCC 12 -O2 reports a bogus -Warray-bounds for the reallocating
  // insert (the empty tail move inside vector::_M_range_insert); the insert itself is fine.
  framed.reserve(framed.size() + want.size());
  framed.insert(framed.end(), want.begin(), want.end());
  REQUIRE(decode({bitshuffle_filter(2, 0, 2)}, 0, 2, framed, 16) == raw);
  REQUIRE(encode_bitshuffle(raw.data(), 16, 2, 0, 2) == framed);

  // 11 elements: one block of 8, then 3 elements raw.
  const uint16_t v11[11] = {0x0001, 0x0002, 0x0004, 0x0008, 0x0100, 0x8000, 0xFFFF, 0x0000,
                            0x1234, 0x5678, 0x9abc};
  Bytes raw11(22);
  std::memcpy(raw11.data(), v11, 22);
  Bytes want11 = want;
  want11.insert(want11.end(), raw11.begin() + 16, raw11.end());
  REQUIRE(encode_bitshuffle(raw11.data(), 22, 2, 0, 0) == want11);
  REQUIRE(decode({bitshuffle_filter(2, 0, 0)}, 0, 2, want11, 22) == raw11);
}

TEST_CASE("bitunshuffle_block matches the bit-by-bit transpose", "[filters]") {
  std::mt19937 rng(4);
  for (size_t es : {1u, 2u, 3u, 4u, 5u, 8u, 12u, 16u}) {
    for (size_t m : {8u, 16u, 120u, 128u, 136u, 256u, 1000u, 1024u, 4096u}) {
      Bytes d(m * es);
      for (auto& x : d) x = uint8_t(rng());
      Bytes t(d.size()), o(d.size());
      bitshuffle_block_simple(d.data(), t.data(), m, es);
      h5d::filters::codec::bitunshuffle_block(t.data(), o.data(), m, es);
      INFO("es=" << es << " m=" << m);
      REQUIRE(o == d);
    }
  }
}

TEST_CASE("bitshuffle round trips over sizes, types, block sizes, compressions", "[filters]") {
  std::mt19937 rng(5);
  const unsigned blocks[] = {0, 8, 16, 64, 128, 200, 1024, 4096};
  for (int iter = 0; iter < 300; ++iter) {
    const size_t es_choices[] = {1, 2, 3, 4, 8, 12, 16};
    size_t es = es_choices[rng() % 7];
    size_t nelem = iter < 40 ? size_t(iter) : rng() % 6000;
    unsigned block = blocks[rng() % 8];
    const unsigned comps[] = {0, 2, 3};
    unsigned comp = comps[rng() % 3];
    Bytes d = make_data(nelem * es, uint32_t(iter), (iter % 5) * 0.2);
    INFO("es=" << es << " nelem=" << nelem << " block=" << block << " comp=" << comp);
    Bytes enc = encode_bitshuffle(d.data(), d.size(), es, block, comp, 1);
    FilterInfo f = bitshuffle_filter(es, block, comp, 1);
    REQUIRE(decode({f}, 0, es, enc, d.size()) == d);
    // cd_values[2] absent (old files): the dataset element size is used.
    if (comp == 0) {
      FilterInfo g;
      g.id = 32008;
      g.cd_values = {0, 4};
      if (block == 0) REQUIRE(decode({g}, 0, es, enc, d.size()) == d);
    }
  }
}

TEST_CASE("zstd, lz4, lzf, deflate, blosc round trips", "[filters]") {
  std::mt19937 rng(6);
  for (unsigned iter = 0; iter < 60; ++iter) {
    const size_t ess[] = {1, 2, 4, 8, 3};
    size_t es = ess[iter % 5];
    size_t n = (iter < 10 ? iter * 7 + 1 : rng() % 300000) / es * es;
    if (n == 0) n = es;
    Bytes d = make_data(n, uint32_t(100 + iter), (iter % 4) * 0.33);
    INFO("iter=" << iter << " n=" << n);
    REQUIRE(roundtrip({zstd_filter(1 + iter % 5)}, es, d) == d);
    Bytes zc = encode_zstd(d.data(), n, 3, true);
    REQUIRE(decode({zstd_filter()}, 0, es, zc, n) == d);
    REQUIRE(roundtrip({deflate_filter(iter % 10)}, es, d) == d);
    REQUIRE(roundtrip({lz4_filter(0)}, es, d) == d);
    REQUIRE(roundtrip({lz4_filter(1 + rng() % 5000)}, es, d) == d);
    REQUIRE(roundtrip({lzf_filter(n)}, es, d) == d);
    for (unsigned code : {0u, 1u, 2u, 4u, 5u})
      REQUIRE(roundtrip({blosc_filter(es, n, 5, iter % 3, code)}, es, d) == d);
    REQUIRE(roundtrip({shuffle_filter(es), deflate_filter(4), fletcher32_filter()}, es, d) == d);
  }
}

TEST_CASE("pipelines with stacked compressors (intermediate sizes unknown)", "[filters]") {
  Bytes d = make_data(65536 + 6, 7, 0.3);
  const size_t es = 2;
  std::vector<std::vector<FilterInfo>> pipes = {
      {deflate_filter(), lz4_filter(1000)},
      {zstd_filter(), lz4_filter()},
      {bitshuffle_filter(2, 0, 2), deflate_filter()},
      {shuffle_filter(2), deflate_filter(), fletcher32_filter(), zstd_filter()},
      {fletcher32_filter(), deflate_filter()},
      {fletcher32_filter(), shuffle_filter(2), fletcher32_filter()},
      {bitshuffle_filter(2, 0, 0), lzf_filter(0)},
      {lz4_filter(), blosc_filter(1, 0, 5, 0, 1)},
      {bitshuffle_filter(2, 64, 3, 2), zstd_filter(), deflate_filter()},
  };
  for (size_t i = 0; i < pipes.size(); ++i) {
    INFO("pipeline " << i);
    REQUIRE(roundtrip(pipes[i], es, d) == d);
  }
}

TEST_CASE("filter mask: skipped filters are not undone", "[filters]") {
  Bytes d = make_data(10000, 8, 0.2);
  std::vector<FilterInfo> p = {shuffle_filter(4), deflate_filter(), fletcher32_filter()};
  for (uint32_t mask = 0; mask < 8; ++mask) {
    INFO("mask=" << mask);
    REQUIRE(roundtrip(p, 4, d, mask) == d);
  }
  // An unsupported filter that was skipped for this chunk does not matter.
  FilterInfo szip;
  szip.id = 4;
  std::vector<FilterInfo> q = {szip, deflate_filter()};
  Bytes enc = encode_deflate(d.data(), d.size());
  REQUIRE(decode(q, 1, 4, enc, d.size()) == d);
  REQUIRE_THROWS_AS(decode(q, 0, 4, enc, d.size()), h5d::Error);
  // Everything skipped: the stored bytes are the data.
  REQUIRE(decode(p, 7, 4, d, d.size()) == d);
  REQUIRE(decode({}, 0, 4, d, d.size()) == d);
  REQUIRE_THROWS_AS(decode({}, 0, 4, d, d.size() + 1), h5d::Error);
  // Random data LZF cannot shrink: the encoder skips it like HDF5 and sets the bit.
  std::mt19937 rng(9);
  Bytes r(5000);
  for (auto& x : r) x = uint8_t(rng());
  uint32_t m = 0;
  Bytes e = encode_chunk({shuffle_filter(2), lzf_filter(5000)}, 2, r, &m);
  REQUIRE(m == 2u);
  REQUIRE(decode({shuffle_filter(2), lzf_filter(5000)}, m, 2, e, r.size()) == r);
}

TEST_CASE("decode_chunk reuses buffers and rejects wrong sizes", "[filters]") {
  Bytes d = make_data(1 << 20, 10, 0.1);
  std::vector<FilterInfo> p = {shuffle_filter(2), deflate_filter(1)};
  Bytes enc = encode_chunk(p, 2, d);
  Bytes in, out;
  for (int i = 0; i < 3; ++i) {
    in = enc;
    h5d::filters::decode_chunk(p, 0, 2, in, d.size(), out);
    REQUIRE(out == d);
  }
  in = enc;
  REQUIRE_THROWS_AS(h5d::filters::decode_chunk(p, 0, 2, in, d.size() - 2, out), h5d::Error);
  in = enc;
  REQUIRE_THROWS_AS(h5d::filters::decode_chunk(p, 0, 2, in, d.size() + 2, out), h5d::Error);
  for (auto f : {lz4_filter(), zstd_filter(), blosc_filter(2, 0), bitshuffle_filter(2)}) {
    Bytes e = encode_chunk({f}, 2, d);
    INFO("filter " << f.id);
    REQUIRE_THROWS_AS(decode({f}, 0, 2, e, d.size() - 2), h5d::Error);
    REQUIRE_THROWS_AS(decode({f}, 0, 2, e, d.size() + 2), h5d::Error);
  }
  try {
    decode({lz4_filter()}, 0, 2, Bytes{1, 2}, 10);
    FAIL("no exception");
  } catch (const h5d::Error& e) {
    CHECK(e.code() == EIO);
    CHECK(std::string(e.what()).rfind("lz4: ", 0) == 0);
  }
}

namespace {

// Corrupts `enc` in many ways; decoding must never crash and, when it does not throw, must give
// out_size bytes; formats with integrity checks must give the original data or throw.
void corrupt_all(const std::vector<FilterInfo>& p, size_t es, const Bytes& orig, const Bytes& enc,
                 bool integrity, uint32_t mask = 0) {
  std::mt19937 rng(uint32_t(enc.size()));
  std::vector<size_t> positions;
  if (enc.size() <= 700) {
    for (size_t i = 0; i < enc.size(); ++i) positions.push_back(i);
  } else {
    for (size_t i = 0; i < 64; ++i) positions.push_back(i);
    for (size_t i = enc.size() - 64; i < enc.size(); ++i) positions.push_back(i);
    for (int i = 0; i < 400; ++i) positions.push_back(rng() % enc.size());
  }
  size_t thrown = 0, tried = 0;
  auto attempt = [&](const Bytes& bad, const char* what, size_t where) {
    ++tried;
    Bytes out;
    Bytes in = bad;
    try {
      h5d::filters::decode_chunk(p, mask, es, in, orig.size(), out);
    } catch (const h5d::Error& e) {
      ++thrown;
      REQUIRE(e.code() == EIO);
      return;
    }
    INFO(what << " at " << where << " of " << enc.size());
    REQUIRE(out.size() == orig.size());
    if (integrity) REQUIRE(out == orig);
  };
  for (size_t pos : positions) {
    for (uint8_t x : {uint8_t(0xff), uint8_t(0x01), uint8_t(0x80)}) {
      Bytes bad = enc;
      bad[pos] ^= x;
      attempt(bad, "flip", pos);
    }
  }
  for (size_t len : {size_t(0), size_t(1), size_t(4), size_t(11), size_t(12), size_t(13),
                     enc.size() / 2, enc.size() - 5, enc.size() - 1}) {
    if (len >= enc.size()) continue;
    attempt(Bytes(enc.begin(), enc.begin() + long(len)), "truncate", len);
  }
  for (size_t extra : {1u, 3u, 16u}) {
    Bytes bad = enc;
    for (size_t i = 0; i < extra; ++i) bad.push_back(uint8_t(rng()));
    attempt(bad, "extend", extra);
  }
  CHECK(thrown > 0);
  (void)tried;
}

}  // namespace

TEST_CASE("corrupted chunks throw h5d::Error or decode to the right size", "[filters]") {
  Bytes d = make_data(6000, 11, 0.2);
  Bytes small = make_data(96, 12, 0.0);
  for (const Bytes* data : {&small, &d}) {
    const size_t n = data->size();
    struct C {
      std::vector<FilterInfo> p;
      bool integrity;
      const char* name;
    };
    std::vector<C> cases = {
        {{deflate_filter()}, true, "deflate"},
        {{shuffle_filter(4), deflate_filter()}, true, "shuffle+deflate"},
        {{fletcher32_filter()}, true, "fletcher32"},
        {{shuffle_filter(4), lz4_filter(100), fletcher32_filter()}, true, "lz4+fletcher32"},
        {{lzf_filter(n)}, false, "lzf"},
        {{blosc_filter(4, n, 5, 1, 0)}, false, "blosc-blosclz"},
        {{blosc_filter(4, n, 5, 2, 1)}, false, "blosc-lz4-bitshuffle"},
        {{blosc_filter(4, n, 5, 1, 4)}, false, "blosc-zlib"},
        {{blosc_filter(4, n, 5, 0, 5)}, false, "blosc-zstd"},
        {{lz4_filter(0)}, false, "lz4"},
        {{lz4_filter(1000)}, false, "lz4 blocks"},
        {{zstd_filter()}, false, "zstd"},
        {{bitshuffle_filter(4, 0, 0)}, false, "bitshuffle"},
        {{bitshuffle_filter(4, 0, 2)}, false, "bitshuffle-lz4"},
        {{bitshuffle_filter(4, 64, 3)}, false, "bitshuffle-zstd"},
        {{deflate_filter(), lz4_filter()}, true, "deflate,lz4"},
    };
    for (auto& c : cases) {
      uint32_t mask = 0;
      Bytes enc = encode_chunk(c.p, 4, *data, &mask);
      INFO(c.name << " n=" << n << " enc=" << enc.size() << " mask=" << mask);
      REQUIRE(decode(c.p, mask, 4, enc, n) == *data);
      corrupt_all(c.p, 4, *data, enc, c.integrity, mask);
    }
    // zstd with a content checksum must detect corruption.
    Bytes zc = encode_zstd(data->data(), n, 3, true);
    corrupt_all({zstd_filter()}, 4, *data, zc, true);
  }
}

TEST_CASE("hostile headers are rejected without huge allocations", "[filters]") {
  // LZ4 announcing 2^60 bytes.
  Bytes lz = {0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  REQUIRE_THROWS_AS(decode({lz4_filter()}, 0, 1, lz, 100), h5d::Error);
  // LZ4 block size 0.
  Bytes lz0 = {0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0};
  REQUIRE_THROWS_AS(decode({lz4_filter()}, 0, 1, lz0, 100), h5d::Error);
  // bitshuffle-lz4 announcing a huge size / non-multiple-of-8 block.
  Bytes bs = {0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0};
  REQUIRE_THROWS_AS(decode({bitshuffle_filter(2)}, 0, 2, bs, 64), h5d::Error);
  Bytes bs2 = {0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 6};
  REQUIRE_THROWS_AS(decode({bitshuffle_filter(2)}, 0, 2, bs2, 64), h5d::Error);
  // bitshuffle without compression: block size not a multiple of 8, odd byte count.
  REQUIRE_THROWS_AS(decode({bitshuffle_filter(2, 12, 0)}, 0, 2, Bytes(64), 64), h5d::Error);
  REQUIRE_THROWS_AS(decode({bitshuffle_filter(2, 0, 0)}, 0, 2, Bytes(63), 63), h5d::Error);
  // zstd frame with an absurd content size, stacked under another compressor (size unknown).
  Bytes z = encode_zstd(lz.data(), lz.size());
  REQUIRE_THROWS_AS(decode({zstd_filter()}, 0, 1, Bytes{0x28, 0xb5, 0x2f, 0xfd, 0xff}, 10),
                    h5d::Error);
  REQUIRE_THROWS_AS(decode({zstd_filter()}, 0, 1, z, 10), h5d::Error);
  REQUIRE_THROWS_AS(decode({blosc_filter(1, 0)}, 0, 1, Bytes(10), 10), h5d::Error);
  REQUIRE_THROWS_AS(decode({blosc_filter(1, 0)}, 0, 1, Bytes(100, 0x02), 100), h5d::Error);
  REQUIRE_THROWS_AS(decode({lzf_filter(0)}, 0, 1, Bytes(), 10), h5d::Error);
  REQUIRE_THROWS_AS(decode({deflate_filter()}, 0, 1, Bytes(), 10), h5d::Error);
}
