// The read policy (vfs/read_policy.h) without a mount: which pages a read makes worth pushing,
// which way a stream runs, what is decoded ahead of it.
#include <catch2/catch.hpp>

#include <set>

#include "vfs/read_policy.h"

using namespace h5d;
using namespace h5d::vfs;

namespace {

constexpr uint64_t kUnit = 128 << 10;  // one 512x128 uint16 frame per chunk
constexpr uint64_t kHeader = 4096;

ReadPolicy::Geometry frames(uint64_t n, uint64_t unit = kUnit, uint64_t header = kHeader) {
  ReadPolicy::Geometry g;
  g.header = header;
  g.data_size = n * unit;
  g.decodes = true;
  g.unit = [unit](uint64_t off) { return ByteSpan{off / unit * unit, off / unit * unit + unit}; };
  return g;
}

SequentialPrefetcher::Config stream_cfg() { return {1 << 20, 64 << 20, 1 << 20, 4 << 20}; }

auto all_decoded = [](ByteRange) { return true; };
auto none_decoded = [](ByteRange) { return false; };

// Simulates a reader that faults one page at a time (mmap, read-ahead of one page) over data
// pages in the order given, with pushes landing in a page set: returns the requests made.
struct PageCache {
  std::set<uint64_t> pages;  // file offsets
  void add(ByteRange r) {
    for (uint64_t p = r.off; p < r.end(); p += 4096) pages.insert(p);
  }
};

}  // namespace

TEST_CASE("read policy: a read inside a unit pushes the rest of it, on both sides", "[vfs][policy]") {
  ReadPolicy p(frames(100), stream_cfg());
  // A fault in the middle of frame 10.
  const uint64_t off = kHeader + 10 * kUnit + 16 * 4096;
  const ReadFollowUp f = p.after_read(off, 4096, none_decoded);
  CHECK(f.around[0].off == kHeader + 10 * kUnit);
  CHECK(f.around[0].end() == off);
  CHECK(f.around[1].off == off + 4096);
  CHECK(f.around[1].end() == kHeader + 11 * kUnit);
  CHECK(f.ahead.len == 0);
  CHECK(f.prefetch.len == 0);
}

TEST_CASE("read policy: no pushes for data without decode units", "[vfs][policy]") {
  ReadPolicy::Geometry g = frames(100);
  g.decodes = false;
  ReadPolicy p(g, stream_cfg());
  CHECK(p.choose_readahead_kb(true, 1024) == 1024);
  const ReadFollowUp f = p.after_read(kHeader + 5 * 4096, 4096, all_decoded);
  CHECK(f.around[0].len == 0);
  CHECK(f.around[1].len == 0);
  ReadPolicy q(frames(100), stream_cfg());
  CHECK(q.choose_readahead_kb(false, 1024) == 1024);
  CHECK(q.choose_readahead_kb(true, 1024) == 4);
}

TEST_CASE("read policy: pushes are whole pages inside the file", "[vfs][policy]") {
  // A .raw of 3-byte elements: units not page aligned; the file's last page may be partial.
  ReadPolicy::Geometry g = frames(10, 10000, 0);
  ReadPolicy p(g, stream_cfg());
  const ReadFollowUp f = p.after_read(8192, 4096, none_decoded);  // inside unit [0, 10000)
  CHECK(f.around[0] == ByteRange{0, 8192});
  CHECK(f.around[1] == ByteRange{12288, 4096});  // the read reached into unit [10000, 20000)
  const ReadFollowUp l = p.after_read(94208, 4096, none_decoded);  // unit [90000, 100000)
  CHECK(l.around[0].off == 90112);
  CHECK(l.around[1] == ByteRange{98304, 100000 - 98304});  // to the end of the file
}

// Both walk orders of a page-faulting reader cost one request per unit: forward (a loop over the
// array) and backward (glibc's memmove when the destination lies above the mapping).
TEST_CASE("read policy: a page-faulting reader costs one request per unit, forward or backward", "[vfs][policy]") {
  for (bool backward : {false, true}) {
    const uint64_t n = 300;
    ReadPolicy p(frames(n), stream_cfg());
    PageCache cache;
    uint64_t requests = 0;
    const uint64_t pages = n * kUnit / 4096;
    for (uint64_t i = 0; i < pages; ++i) {
      const uint64_t page = kHeader + (backward ? pages - 1 - i : i) * 4096;
      if (cache.pages.count(page)) continue;
      ++requests;
      const ReadFollowUp f = p.after_read(page, 4096, all_decoded);
      cache.add({page, 4096});
      cache.add(f.around[0]);
      cache.add(f.around[1]);
      cache.add(f.ahead);
    }
    INFO((backward ? "backward" : "forward"));
    CHECK(requests <= n);
    CHECK(cache.pages.size() == pages);
    // Once a stream is seen (4 MiB), the decoded units ahead are pushed too: fewer requests.
    CHECK(requests < n / 2);
    CHECK(p.stream().direction() ==
          (backward ? SequentialPrefetcher::Direction::Backward : SequentialPrefetcher::Direction::Forward));
  }
}

TEST_CASE("read policy: nothing is pushed ahead that is not decoded, nor before a stream", "[vfs][policy]") {
  ReadPolicy p(frames(300), stream_cfg());
  for (uint64_t i = 0; i < 64; ++i) {
    const ReadFollowUp f = p.after_read(kHeader + i * kUnit, 4096, none_decoded);
    CHECK(f.ahead.len == 0);
  }
  ReadPolicy q(frames(300), stream_cfg());
  for (uint64_t i = 0; i < 20; ++i) CHECK(q.after_read(kHeader + i * kUnit, 4096, all_decoded).ahead.len == 0);
}

TEST_CASE("read policy: backward streams are decoded ahead downwards", "[vfs][policy]") {
  ReadPolicy p(frames(1000), stream_cfg());
  uint64_t lowest = ~0ull;
  for (uint64_t i = 0; i < 200; ++i) {
    const uint64_t off = kHeader + (999 - i) * kUnit;
    const ReadFollowUp f = p.after_read(off, 4096, none_decoded);
    if (f.prefetch.len) {
      CHECK(f.prefetch.end() <= off - kHeader);  // below the reader
      lowest = std::min(lowest, f.prefetch.off);
    }
  }
  CHECK(lowest < (999 - 200) * kUnit);  // ahead of the reader
}

TEST_CASE("read policy: with single-page windows a stream starts after two units", "[vfs][policy]") {
  ReadPolicy p(frames(100), stream_cfg());
  CHECK(p.choose_readahead_kb(true, 1024) == 4);
  CHECK(p.after_read(kHeader, 4096, none_decoded).prefetch.len == 0);
  ReadFollowUp f = p.after_read(kHeader + kUnit, 4096, none_decoded);
  CHECK(f.prefetch.len == 0);  // one unit and a page
  f = p.after_read(kHeader + 2 * kUnit, 4096, none_decoded);
  CHECK(f.prefetch.off >= 2 * kUnit);  // decoding ahead now
  CHECK(f.prefetch.len > 0);
  // Without the small windows (push off, or no per-file read-ahead) the configured distance holds.
  ReadPolicy q(frames(100), stream_cfg());
  for (uint64_t i = 0; i < 3; ++i) CHECK(q.after_read(kHeader + i * kUnit, 4096, none_decoded).prefetch.len == 0);
}

TEST_CASE("read policy: a stream of large units decodes ahead what it has gone from its start", "[vfs][policy]") {
  // Units of 4 MiB, read a page at a time backwards (memmove of a slice): at the third unit the
  // first window is the three units gone (12 MiB), not the configured 1 MiB, a quarter unit.
  const uint64_t unit = 4ull << 20, n = 20;
  ReadPolicy p(frames(n, unit), stream_cfg());
  REQUIRE(p.choose_readahead_kb(true, 1024) == 4);
  ReadFollowUp f;
  for (uint64_t k = 0; k < 3; ++k) f = p.after_read(kHeader + (n - 1 - k) * unit, 4096, none_decoded);
  CHECK(p.stream().direction() == SequentialPrefetcher::Direction::Backward);
  REQUIRE(f.prefetch.len > 0);
  CHECK(f.prefetch.end() == (n - 3) * unit);  // from the stream's lowest byte downwards
  CHECK(f.prefetch.len == 3 * unit);
  // Units below the configured window keep it: three 128 KiB units gone, 1 MiB asked for.
  ReadPolicy q(frames(100), stream_cfg());
  REQUIRE(q.choose_readahead_kb(true, 1024) == 4);
  for (uint64_t k = 0; k < 3; ++k) f = q.after_read(kHeader + k * kUnit, 4096, none_decoded);
  CHECK(f.prefetch.len == (1u << 20));
}

TEST_CASE("read policy: a stream gets decoded units pushed up to 1 MiB ahead, each once", "[vfs][policy]") {
  ReadPolicy p(frames(300), stream_cfg());
  p.choose_readahead_kb(true, 1024);
  std::set<uint64_t> pushed;
  uint64_t next = 0;  // the reader's next data page not in the page cache
  for (int i = 0; i < 100 && next < 300 * kUnit; ++i) {
    const ReadFollowUp f = p.after_read(kHeader + next, 4096, all_decoded);
    uint64_t reach = next + 4096;
    for (const ByteRange& r : {f.around[0], f.around[1], f.ahead}) {
      for (uint64_t q = r.off; q < r.end(); q += 4096) CHECK(pushed.insert(q).second);  // once each
      if (r.len) reach = std::max(reach, r.end() - kHeader);
    }
    CHECK(f.ahead.end() <= kHeader + next + 4096 + ReadPolicy::kPushAhead + kUnit);
    next = reach;
  }
  CHECK(next == 300 * kUnit);
}

TEST_CASE("read policy: two readers of one open file keep a stream each", "[vfs][policy]") {
  // Two threads copying the two halves of one mapping: their faults interleave.
  const uint64_t n = 400;
  ReadPolicy p(frames(n), stream_cfg());
  p.choose_readahead_kb(true, 1024);
  PageCache cache;
  uint64_t next[2] = {0, n / 2 * kUnit}, requests = 0, prefetched = 0, ahead = 0;
  for (unsigned step = 0; step < 2000; ++step) {
    const unsigned t = step % 2;
    if (next[t] >= (t + 1) * n / 2 * kUnit) continue;
    const uint64_t page = kHeader + next[t];
    ++requests;
    const ReadFollowUp f = p.after_read(page, 4096, all_decoded);
    prefetched += f.prefetch.len;
    if (t == 0 && f.prefetch.len) CHECK(f.prefetch.end() <= n / 2 * kUnit);  // not into the other half
    ahead += f.ahead.len;
    cache.add({page, 4096});
    for (const ByteRange& r : {f.around[0], f.around[1], f.ahead}) cache.add(r);
    while (next[t] < (t + 1) * n / 2 * kUnit && cache.pages.count(kHeader + next[t])) next[t] += 4096;
  }
  CHECK(next[0] == n / 2 * kUnit);
  CHECK(next[1] == n * kUnit);
  CHECK(prefetched >= n * kUnit / 2);  // both halves decoded ahead
  CHECK(ahead > 0);
  CHECK(requests < n / 2);              // push-ahead in both streams
}

TEST_CASE("read policy: a read inside what a stream covered continues it", "[vfs][policy]") {
  // A push of the units ahead that lands late (or skips pages of a read in flight) makes the
  // reader ask for a page the stream already reached over. That request must continue the
  // stream: taking it for a new one restarted the decode-ahead from its smallest window (55 new
  // streams over a 4,000-frame mmap copy, before).
  ReadPolicy p(frames(400), stream_cfg());
  p.choose_readahead_kb(true, 1024);
  uint64_t next = 0;
  ReadFollowUp f;
  for (int i = 0; i < 6; ++i) {  // a stream with pushes ahead
    f = p.after_read(kHeader + next, 4096, all_decoded);
    next = f.ahead.len ? f.ahead.end() - kHeader : next + kUnit;
  }
  REQUIRE(p.stream().streaming());
  const uint64_t window = p.stream().window();
  const auto cover = f.cover;
  REQUIRE(cover);
  CHECK(cover->covers(0, next));  // what was read and pushed
  // The reader asks for a page two units below the top of the pushes, then goes on.
  const ReadFollowUp g = p.after_read(kHeader + next - 2 * kUnit, 4096, all_decoded);
  CHECK(g.cover == cover);  // the same stream
  CHECK(p.stream().streaming());
  CHECK(p.stream().window() >= window);
  const ReadFollowUp h = p.after_read(kHeader + next, 4096, all_decoded);
  CHECK(h.cover == cover);
  CHECK(cover->covers(0, next + 4096));
  // A read far from it is another stream, with its own cover.
  const ReadFollowUp k = p.after_read(kHeader + 300 * kUnit, 4096, all_decoded);
  CHECK(k.cover != cover);
  CHECK_FALSE(k.cover->covers(0, kUnit));
}

TEST_CASE("read policy: a backward stream's cover grows downwards", "[vfs][policy]") {
  ReadPolicy p(frames(200), stream_cfg());
  p.choose_readahead_kb(true, 1024);
  std::shared_ptr<const ReadCover> cover;
  for (uint64_t i = 199; i > 190; --i) cover = p.after_read(kHeader + i * kUnit, 4096, none_decoded).cover;
  REQUIRE(p.stream().direction() == SequentialPrefetcher::Direction::Backward);
  CHECK(cover->covers(191 * kUnit, 200 * kUnit));
  CHECK_FALSE(cover->covers(189 * kUnit, 200 * kUnit));
}

TEST_CASE("read policy: decode-ahead stops at what another stream of the file read", "[vfs][policy]") {
  // glibc's memmove copies a slice below its non-temporal threshold backwards when the
  // destination lies above the source: it touches the slice's first page, then walks down from
  // its end. The walk's decode-ahead must stop at the first page's unit, where the walk ends,
  // not decode as far below it as the walk has gone (75 frames for nobody under a 120-frame
  // slice, before).
  const uint64_t n = 1200, lo = 600, hi = 720;
  ReadPolicy p(frames(n), stream_cfg());
  REQUIRE(p.choose_readahead_kb(true, 1024) == 4);
  PageCache cache;
  auto fault = [&](uint64_t page, auto&& check) {
    if (cache.pages.count(page)) return;
    const ReadFollowUp f = p.after_read(page, 4096, none_decoded);
    check(f);
    cache.add({page, 4096});
    for (const ByteRange& r : {f.around[0], f.around[1], f.ahead}) cache.add(r);
  };
  uint64_t decoded_ahead = 0;
  const auto above_lo = [&](const ReadFollowUp& f) {
    if (!f.prefetch.len) return;
    CHECK(f.prefetch.off >= lo * kUnit);
    decoded_ahead += f.prefetch.len;
  };
  fault(kHeader + lo * kUnit, above_lo);
  for (uint64_t pg = hi * kUnit / 4096; pg-- > lo * kUnit / 4096;) fault(kHeader + pg * 4096, above_lo);
  CHECK(decoded_ahead > 0);  // the walk was decoded ahead
  // Going forward, the same: a reader that read a frame at 700 before, then streams from 600.
  ReadPolicy q(frames(n), stream_cfg());
  q.choose_readahead_kb(true, 1024);
  q.after_read(kHeader + 700 * kUnit, 4096, none_decoded);
  uint64_t top = 0;
  for (uint64_t u = 600; u < 700; ++u) {
    const ReadFollowUp f = q.after_read(kHeader + u * kUnit, 4096, none_decoded);
    if (f.prefetch.len) top = std::max(top, f.prefetch.end());
  }
  CHECK(top > 600 * kUnit);
  CHECK(top <= 700 * kUnit);
  // With no other stream the window goes on as before (the file's end).
  ReadPolicy r(frames(n), stream_cfg());
  r.choose_readahead_kb(true, 1024);
  top = 0;
  for (uint64_t u = 600; u < 700; ++u) {
    const ReadFollowUp f = r.after_read(kHeader + u * kUnit, 4096, none_decoded);
    if (f.prefetch.len) top = std::max(top, f.prefetch.end());
  }
  CHECK(top > 700 * kUnit);
}

TEST_CASE("read policy: a stream walking towards another stream's read asks for all between at once", "[vfs][policy]") {
  // memmove copying frames [600, 720) backwards: the first page of 600, then down from 720. Once
  // the walk is a stream, what lies between it and frame 600 is read next, all of it: one request
  // for the rest (a round trip), not windows doubling from 1 MiB (a round trip each: 0.14 s
  // against 0.10 s for a 120-frame slice of 1 MiB chunks at 5 ms per request).
  const uint64_t n = 1200, lo = 600, hi = 720;
  const auto first_prefetch = [&](ReadPolicy& p, bool with_first_page) {
    p.choose_readahead_kb(true, 1024);
    if (with_first_page) p.after_read(kHeader + lo * kUnit, 4096, none_decoded);
    for (uint64_t u = hi; u-- > lo;) {
      const ReadFollowUp f = p.after_read(kHeader + u * kUnit, 4096, none_decoded);
      if (f.prefetch.len) return f.prefetch;
    }
    return ByteRange{};
  };
  ReadPolicy p(frames(n), stream_cfg());
  const ByteRange r = first_prefetch(p, true);
  REQUIRE(r.len > 0);
  CHECK(r.off == (lo + 1) * kUnit);  // down to the unit the copy touched first (pushed), not below
  CHECK(r.end() >= (hi - 3) * kUnit);  // from where the walk was when it became a stream
  // Without the first page the walk's end is unknown: the window starts from what it has gone.
  ReadPolicy q(frames(n), stream_cfg());
  const ByteRange w = first_prefetch(q, false);
  REQUIRE(w.len > 0);
  CHECK(w.len <= stream_cfg().initial);
  // Forward, the same: two threads copying halves, the first runs into the second's start.
  ReadPolicy f(frames(n), stream_cfg());
  f.choose_readahead_kb(true, 1024);
  ByteRange first{};
  for (uint64_t u = 0; u < 400 && !first.len; ++u) {
    f.after_read(kHeader + (400 + u) * kUnit, 4096, none_decoded);  // the second thread
    first = f.after_read(kHeader + u * kUnit, 4096, none_decoded).prefetch;
  }
  REQUIRE(first.len > 0);
  CHECK(first.end() == 400 * kUnit);
  // A read made before the stream began (a frame read earlier) bounds it but is no end: the
  // stream may stop anywhere before it, so the window starts small.
  ReadPolicy e(frames(n), stream_cfg());
  e.choose_readahead_kb(true, 1024);
  e.after_read(kHeader + 400 * kUnit, 4096, none_decoded);
  e.after_read(kHeader + 900 * kUnit, 4096, none_decoded);
  first = {};
  for (uint64_t u = 0; u < 400 && !first.len; ++u) first = e.after_read(kHeader + u * kUnit, 4096, none_decoded).prefetch;
  REQUIRE(first.len > 0);
  CHECK(first.len <= stream_cfg().initial);
  // A gap larger than the largest window is asked for a window at a time.
  ReadPolicy g(frames(n), stream_cfg());
  g.choose_readahead_kb(true, 1024);
  first = {};
  for (uint64_t u = 0; u < n / 2 && !first.len; ++u) {
    g.after_read(kHeader + (n / 2 + u) * kUnit, 4096, none_decoded);
    first = g.after_read(kHeader + u * kUnit, 4096, none_decoded).prefetch;
  }
  REQUIRE(first.len > 0);
  CHECK(first.len <= stream_cfg().max);
  CHECK(first.len > stream_cfg().max / 2);
}

TEST_CASE("read policy: decode-ahead asks for no more than the cache's room, and the rest later", "[vfs][policy]") {
  // A chunk cache too small for the window evicts the decoded-ahead chunks nearest the reader
  // before it gets there (decoded twice). With `room`, a stream asks for at most that much from
  // its near end, and asks for what it left out at the next reads: no gap, nothing asked twice.
  for (const bool forward : {true, false}) {
    ReadPolicy p(frames(2000), stream_cfg());
    uint64_t room = 12 * kUnit;
    const auto have = [&] { return room; };
    std::vector<ByteRange> asked;
    uint64_t capped = 0;
    for (uint64_t i = 0; i < 400; ++i) {
      const uint64_t u = forward ? i : 1999 - i;
      if (i == 200) room = 64 * kUnit;  // the reader freed room
      const ReadFollowUp f = p.after_read(kHeader + u * kUnit, kUnit, none_decoded, true, have);
      capped += f.capped;
      if (!f.prefetch.len) continue;
      CHECK(f.prefetch.len <= room);
      // From the near end: next to the reader or to what was asked before.
      const uint64_t near = forward ? f.prefetch.off : f.prefetch.end();
      if (asked.empty())
        CHECK((forward ? near - (u + 1) * kUnit : u * kUnit - near) <= kUnit);
      else
        CHECK(near == (forward ? asked.back().end() : asked.back().off));
      asked.push_back(f.prefetch);
    }
    REQUIRE(asked.size() > 2);
    CHECK(capped > 0);
    // Once there is room the window grows past the old cap.
    uint64_t largest = 0;
    for (const ByteRange& r : asked) largest = std::max(largest, r.len);
    CHECK(largest > 12 * kUnit);
    // With room for less than a first window nothing is asked for (asks of a chunk or two, one
    // per read, made many small requests), and the frontier stays.
    ReadPolicy q(frames(2000), stream_cfg());
    uint64_t zero = stream_cfg().initial - 1;
    bool any = false;
    for (uint64_t i = 0; i < 100; ++i) {
      const uint64_t u = forward ? i : 1999 - i;
      any = any || q.after_read(kHeader + u * kUnit, kUnit, none_decoded, true, [&] { return zero; }).prefetch.len > 0;
    }
    CHECK_FALSE(any);
  }
}

TEST_CASE("read policy: units smaller than a page are no units: the mount's read-ahead, no pushes", "[vfs][policy]") {
  // h5py's own chunk shape for frames of 512x128, (75, 32, 16): a chunk's runs are 32 bytes, a
  // page holds runs of 8 chunks. Walking such units cost the daemon 8x its CPU on frames.
  ReadPolicy p(frames(1 << 20, 32), stream_cfg());  // 32 MiB
  CHECK(p.choose_readahead_kb(true, 1928) == 1928);
  uint64_t prefetched = 0;
  for (uint64_t k = 0; k < 16; ++k) {  // a stream of 1 MiB requests
    const ReadFollowUp f = p.after_read(kHeader + k * (1 << 20), 1 << 20, all_decoded);
    CHECK(f.around[0].len == 0);
    CHECK(f.around[1].len == 0);
    CHECK(f.ahead.len == 0);
    prefetched += f.prefetch.len;
  }
  CHECK(prefetched > 0);  // the stream is still decoded ahead
  // A page-sized unit is a unit.
  ReadPolicy q(frames(1000, 4096), stream_cfg());
  CHECK(q.choose_readahead_kb(true, 1928) == 4);
}
