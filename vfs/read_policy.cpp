#include "vfs/read_policy.h"

#include <algorithm>

namespace h5d::vfs {

bool SequentialPrefetcher::goes_on(Stream& s, uint64_t off, uint64_t end, uint64_t tol) const {
  if (!s.started) return false;
  const bool near_top = off + tol >= s.cursor && off <= s.cursor + tol;
  const bool near_bottom = end + tol >= s.lo && off <= s.lo + tol;
  // A read inside what the stream has covered continues it: a push can miss pages (those of a
  // read in flight are skipped, a push may fail, and pushes made after the reply used to land
  // after the reader had asked), and taking such a request for a new stream restarted the
  // decode-ahead from its smallest window (55 times over a 4,000-frame mmap copy).
  const bool inside = off >= s.lo && end <= s.cursor;
  switch (s.dir) {
    case Direction::Forward: return near_top || inside;
    case Direction::Backward: return near_bottom || inside;
    case Direction::None:
      if (off >= s.lo && near_top) {
        s.dir = Direction::Forward;
        s.frontier = s.cursor;
        return true;
      }
      if (off < s.lo && near_bottom) {
        s.dir = Direction::Backward;
        s.frontier = s.lo;
        return true;
      }
      return false;
  }
  return false;
}

SequentialPrefetcher::Range SequentialPrefetcher::on_read(uint64_t off, uint64_t len, uint64_t file_size,
                                                          Seen* seen, bool waited,
                                                          const std::function<uint64_t()>& room) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t end = std::min(off + len, file_size);
  // Single-page windows: a reader's next request starts in the unit after its pages (read or
  // pushed) end: at once when it copies everything, further into it when it copies a region of
  // every row (a[:, 100:164]); the requests of one large read() arrive out of order by less than
  // their own size.
  const uint64_t tol = exact_ ? std::max<uint64_t>({len, 4096, unit_}) : cfg_.seek_tolerance;
  size_t i = 0;
  // Streams with a direction first: a read next to a stream's end continues it rather than
  // pairing with a lone read nearby.
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass)
    for (i = 0; i < kStreams && !found; ++i)
      if ((streams_[i].dir != Direction::None) == (pass == 0)) found = goes_on(streams_[i], off, end, tol);
  if (found) --i;
  Stream* st = found ? &streams_[i] : nullptr;
  if (!st) {  // a new stream in the least recently used slot
    i = 0;
    for (size_t k = 1; k < kStreams; ++k)
      if (streams_[k].used < streams_[i].used) i = k;
    st = &streams_[i];
    *st = Stream{};
    st->started = true;
    st->lo = off;
    st->cursor = end;
    st->frontier = end;
    st->window = cfg_.initial;
    st->cover = std::make_shared<ReadCover>();
  } else {
    st->lo = std::min(st->lo, off);
    st->cursor = std::max(st->cursor, end);
  }
  st->cover->set(st->lo, st->cursor);
  st->used = ++clock_;
  if (!found) st->born = st->used;
  ++st->reads;
  last_ = i;
  if (seen) *seen = {i, long_enough(*st), st->dir, st->cover};
  if (!found || !long_enough(*st)) return {};
  if (exact_ && !st->primed) {
    // Units read one at a time: the first window is at least what the stream has gone (two or
    // three units). With units of 1 MiB and more, the initial window is one unit, and each step
    // of the doubling that follows costs the reader a round trip it waits for.
    st->window = std::max(st->window, std::min(cfg_.max, st->cursor - st->lo));
  }
  st->primed = true;
  Range r;
  // Never further ahead than the stream has gone: a read that stops (a slice, a frame range)
  // then leaves at most as much decoded for nobody as it read, while a long stream still
  // reaches the full window after a few doublings (cold storage: the more it has read, the
  // more requests it keeps in flight).
  uint64_t window = std::min(st->window, std::max(cfg_.initial, st->cursor - st->lo));
  // A stream whose end the file's other reads tell (`end_ahead`: memmove walking down to the
  // slice's first page; the first of two threads copying halves running into the second's start)
  // reads everything up to there next, so it is asked for at once (up to `max`), not window by
  // window, each doubling a round trip the reader waits for. Other reads only bound it (`b`).
  const uint64_t b = bound(i), e = end_ahead(i);
  const uint64_t gap = st->dir == Direction::Forward ? (e == ~0ull ? 0 : e - st->cursor) : (e == 0 ? 0 : st->lo - e);
  if (gap) window = std::max(window, std::min(gap, cfg_.max));
  // Decoded ahead, chunks wait in the chunk cache until read, and a cache too small for them
  // evicts the oldest first: those nearest the reader, decoded again when it gets there
  // (cache_size=32M under 64 MiB windows decoded each chunk 1.5 times, docs/benchmarks.md, "What
  // each mechanism buys"). So the window asks for no more than `room`, from its near end; the
  // frontier stays where the ask stopped, and a later read asks for more as the reader frees room.
  // Never for less than a first window (unless that is all it wants): asks of a chunk or two, one
  // per read, were read by as many small requests, fewer in flight (cold at 2 ms: 0.50 s against
  // 0.29 s).
  const auto within_room = [&](uint64_t want) {
    if (!room) return want;
    const uint64_t have = room();
    if (want <= have) return want;
    const uint64_t ask = have >= std::min(want, cfg_.initial) ? have : 0;
    if (seen) seen->capped = want - ask;
    return ask;
  };
  if (st->dir == Direction::Forward) {
    st->frontier = std::max(st->frontier, st->cursor);
    if (st->frontier >= file_size || st->frontier >= st->cursor + window / 2) return {};
    const uint64_t target = std::min({st->cursor + window, file_size, b});
    if (target <= st->frontier) return {};
    r = {st->frontier, within_room(target - st->frontier)};
    st->frontier = r.end();
  } else {
    st->frontier = std::min(st->frontier, st->lo);
    if (st->frontier == 0 || st->frontier + window / 2 <= st->lo) return {};
    const uint64_t target = std::max(st->lo > window ? st->lo - window : 0, b);
    if (target >= st->frontier) return {};
    const uint64_t n = within_room(st->frontier - target);
    r = {st->frontier - n, n};
    st->frontier = r.off;
  }
  if (r.len == 0) return {};
  if (waited) st->window = std::min(st->window * 2, std::max(cfg_.max, cfg_.initial));
  return r;
}

uint64_t SequentialPrefetcher::nearest(size_t i, bool ends_only) const {
  const Stream& s = streams_[i];
  const bool fwd = s.dir == Direction::Forward;
  uint64_t b = fwd ? ~0ull : 0;
  for (size_t k = 0; k < kStreams; ++k) {
    const Stream& o = streams_[k];
    if (k == i || !o.started) continue;
    const bool live = o.used > s.born;                                         // read meanwhile
    const bool first_page = !fwd && o.reads == 1 && o.used + 1 == s.born;      // just before
    if (ends_only && !live && !first_page) continue;
    if (fwd && o.lo >= s.cursor) b = std::min(b, o.lo);
    if (!fwd && o.cursor <= s.lo) b = std::max(b, o.cursor);
  }
  return b;
}

void SequentialPrefetcher::note_pushed(size_t stream, uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> lk(mu_);
  Stream& s = streams_[stream % kStreams];
  if (!s.started || hi <= lo) return;
  if (s.dir != Direction::Forward) s.lo = std::min(s.lo, lo);
  if (s.dir != Direction::Backward) s.cursor = std::max(s.cursor, hi);
  s.cover->set(s.lo, s.cursor);
}

std::pair<uint64_t, uint64_t> SequentialPrefetcher::pushed(size_t stream) const {
  std::lock_guard<std::mutex> lk(mu_);
  const Stream& s = streams_[stream % kStreams];
  return {s.pushed_lo, s.pushed_hi};
}

void SequentialPrefetcher::set_pushed(size_t stream, uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> lk(mu_);
  Stream& s = streams_[stream % kStreams];
  s.pushed_lo = lo;
  s.pushed_hi = hi;
}

void SequentialPrefetcher::single_page_windows(uint64_t unit) {
  std::lock_guard<std::mutex> lk(mu_);
  exact_ = true;
  unit_ = unit;
  cfg_.after = std::min(cfg_.after, 2 * unit);
}

bool SequentialPrefetcher::streaming() const {
  std::lock_guard<std::mutex> lk(mu_);
  return long_enough(streams_[last_]);
}

SequentialPrefetcher::Direction SequentialPrefetcher::direction() const {
  std::lock_guard<std::mutex> lk(mu_);
  return streams_[last_].dir;
}

uint64_t SequentialPrefetcher::window() const {
  std::lock_guard<std::mutex> lk(mu_);
  return streams_[last_].started ? streams_[last_].window : cfg_.initial;
}

ByteSpan ReadPolicy::unit(uint64_t data_off) const {
  if (!g_.decodes || !g_.unit || data_off >= g_.data_size) return {};
  ByteSpan u;
  try {
    u = g_.unit(data_off);
  } catch (const std::exception&) {
    return {};  // e.g. a part that cannot be opened: its reader gets (and logs) the error
  }
  // A unit must hold the offset it was asked for; anything else is treated as no unit. Nor is
  // one smaller than a page: the kernel reads and caches whole pages, and a page then holds the
  // runs of several chunks (h5py's own chunk shape for 1,200 frames of 512x128, (75, 32, 16),
  // has runs of 32 bytes), so pushing "the rest of the unit" means nothing, and walking 1 MiB
  // ahead by such units cost 32,768 cache lookups per read (the daemon's CPU 8x that of frames).
  if (u.empty() || u.lo > data_off || u.hi <= data_off) return {};
  u.hi = std::min(u.hi, g_.data_size);
  if (u.hi - u.lo < kPage) return {};
  return u;
}

ByteRange ReadPolicy::pages(uint64_t from, uint64_t to) const {
  const uint64_t size = g_.header + g_.data_size;
  const uint64_t f = (g_.header + from + kPage - 1) / kPage * kPage;
  uint64_t t = g_.header + to;
  if (t != size) t = t / kPage * kPage;
  return t > f ? ByteRange{f, t - f} : ByteRange{};
}

ReadFollowUp ReadPolicy::after_read(uint64_t off, uint64_t n, const std::function<bool(ByteRange)>& decoded,
                                    bool waited, const std::function<uint64_t()>& room) {
  ReadFollowUp out;
  const uint64_t h = g_.header;
  const uint64_t e = std::min(off + n, h + g_.data_size);
  if (e <= h || e <= off) return out;  // the header alone
  const uint64_t d0 = off > h ? off - h : 0, d1 = e - h;
  SequentialPrefetcher::Seen seen;
  out.prefetch = stream_.on_read(d0, d1 - d0, g_.data_size, &seen, waited, room);
  out.cover = seen.cover;
  out.capped = seen.capped;
  const ByteSpan u0 = unit(d0), u1 = unit(d1 - 1);
  if (!u0.empty() && u0.lo < d0) out.around[0] = pages(std::max(u0.lo, d0 > kMaxPush ? d0 - kMaxPush : 0), d0);
  if (!u1.empty() && u1.hi > d1) out.around[1] = pages(d1, std::min(u1.hi, d1 + kMaxPush));
  if (seen.streaming) out.ahead = ahead_of(seen, d0, d1, u0, u1, decoded);
  for (const ByteRange& r : {out.around[0], out.around[1], out.ahead})
    if (r.len) stream_.note_pushed(seen.stream, r.off - h, r.end() - h);
  return out;
}

ByteRange ReadPolicy::ahead_of(const SequentialPrefetcher::Seen& seen, uint64_t d0, uint64_t d1, ByteSpan u0,
                               ByteSpan u1, const std::function<bool(ByteRange)>& decoded) {
  const auto usable = [&](const ByteSpan& u) {
    return !u.empty() && u.hi - u.lo <= kMaxPush && decoded({u.lo, u.hi - u.lo});
  };
  auto [pushed_lo, pushed_hi] = stream_.pushed(seen.stream);
  uint64_t lo, hi;
  if (seen.dir == SequentialPrefetcher::Direction::Forward) {
    if (u1.empty()) return {};
    // Continue from what was pushed already, when that lies just ahead of this read.
    lo = pushed_hi > u1.hi && pushed_hi <= d1 + kPushAhead ? pushed_hi : u1.hi;
    hi = lo;
    const uint64_t target = std::min(g_.data_size, d1 + kPushAhead);
    for (ByteSpan u; hi < target && usable(u = unit(hi));) hi = u.hi;
    if (hi > lo) pushed_hi = hi;
  } else {
    if (u0.empty()) return {};
    hi = pushed_lo < u0.lo && pushed_lo + kPushAhead >= d0 ? pushed_lo : u0.lo;
    lo = hi;
    const uint64_t target = d0 > kPushAhead ? d0 - kPushAhead : 0;
    for (ByteSpan u; lo > target && usable(u = unit(lo - 1));) lo = u.lo;
    if (hi > lo) pushed_lo = lo;
  }
  stream_.set_pushed(seen.stream, pushed_lo, pushed_hi);
  return hi > lo ? pages(lo, hi) : ByteRange{};
}

unsigned ReadPolicy::choose_readahead_kb(bool push, unsigned mount_kb) {
  if (!g_.decodes || !push) return mount_kb;
  // Single-page windows: a fault asks for its page alone (no read-around to mistake for a
  // stream), so reads that follow each other exactly are a stream: decode ahead once it has gone
  // two units. Without units (none of a page or more) nothing would be pushed: a fault
  // costs a request per page then, so the mount's read-ahead stays, as for other files.
  const ByteSpan u = unit(0);
  if (u.empty()) return mount_kb;
  stream_.single_page_windows(u.hi - u.lo);
  return 4;
}

}  // namespace h5d::vfs
