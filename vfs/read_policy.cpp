#include "vfs/read_policy.h"

#include <algorithm>

namespace h5d::vfs {

SequentialPrefetcher::Range SequentialPrefetcher::on_read(uint64_t off, uint64_t len, uint64_t file_size) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t end = std::min(off + len, file_size);
  // Single-page windows: a reader's next request starts where its pages (read or pushed) end; only
  // the requests of one large read() arrive out of order, by less than their own size.
  const uint64_t tol = exact_ ? std::max<uint64_t>(len, 4096) : cfg_.seek_tolerance;
  const bool near_top = off + tol >= cursor_ && off <= cursor_ + tol;
  const bool near_bottom = end + tol >= lo_ && off <= lo_ + tol;
  bool goes_on = false;
  if (started_) {
    switch (dir_) {
      case Direction::Forward: goes_on = near_top; break;
      case Direction::Backward: goes_on = near_bottom; break;
      case Direction::None:
        if (off >= lo_ && near_top) {
          dir_ = Direction::Forward;
          frontier_ = cursor_;
          goes_on = true;
        } else if (off < lo_ && near_bottom) {
          dir_ = Direction::Backward;
          frontier_ = lo_;
          goes_on = true;
        }
        break;
    }
  }
  if (!goes_on) {
    started_ = true;
    dir_ = Direction::None;
    lo_ = off;
    cursor_ = end;
    frontier_ = end;
    window_ = cfg_.initial;
    return {};
  }
  lo_ = std::min(lo_, off);
  cursor_ = std::max(cursor_, end);
  if (cursor_ - lo_ < cfg_.after) return {};
  Range r;
  if (dir_ == Direction::Forward) {
    frontier_ = std::max(frontier_, cursor_);
    if (frontier_ >= file_size || frontier_ >= cursor_ + window_ / 2) return {};
    const uint64_t target = std::min(cursor_ + window_, file_size);
    r = {frontier_, target - frontier_};
    frontier_ = target;
  } else {
    frontier_ = std::min(frontier_, lo_);
    if (frontier_ == 0 || frontier_ + window_ / 2 <= lo_) return {};
    const uint64_t target = lo_ > window_ ? lo_ - window_ : 0;
    r = {target, frontier_ - target};
    frontier_ = target;
  }
  window_ = std::min(window_ * 2, std::max(cfg_.max, cfg_.initial));
  return r;
}

void SequentialPrefetcher::note_pushed(uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!started_ || hi <= lo) return;
  if (dir_ != Direction::Forward) lo_ = std::min(lo_, lo);
  if (dir_ != Direction::Backward) cursor_ = std::max(cursor_, hi);
}

void SequentialPrefetcher::single_page_windows(uint64_t unit) {
  std::lock_guard<std::mutex> lk(mu_);
  exact_ = true;
  cfg_.after = std::min(cfg_.after, 2 * unit);
}

bool SequentialPrefetcher::streaming() const {
  std::lock_guard<std::mutex> lk(mu_);
  return started_ && dir_ != Direction::None && cursor_ - lo_ >= cfg_.after;
}

SequentialPrefetcher::Direction SequentialPrefetcher::direction() const {
  std::lock_guard<std::mutex> lk(mu_);
  return dir_;
}

uint64_t SequentialPrefetcher::window() const {
  std::lock_guard<std::mutex> lk(mu_);
  return window_;
}

ByteSpan ReadPolicy::unit(uint64_t data_off) const {
  if (!g_.decodes || !g_.unit || data_off >= g_.data_size) return {};
  ByteSpan u;
  try {
    u = g_.unit(data_off);
  } catch (const std::exception&) {
    return {};  // e.g. a part that cannot be opened: its reader gets (and logs) the error
  }
  // A unit must hold the offset it was asked for; anything else is treated as no unit.
  if (u.empty() || u.lo > data_off || u.hi <= data_off) return {};
  return {u.lo, std::min(u.hi, g_.data_size)};
}

ByteRange ReadPolicy::pages(uint64_t from, uint64_t to) const {
  const uint64_t size = g_.header + g_.data_size;
  const uint64_t f = (g_.header + from + kPage - 1) / kPage * kPage;
  uint64_t t = g_.header + to;
  if (t != size) t = t / kPage * kPage;
  return t > f ? ByteRange{f, t - f} : ByteRange{};
}

ReadFollowUp ReadPolicy::after_read(uint64_t off, uint64_t n, const std::function<bool(ByteRange)>& decoded) {
  ReadFollowUp out;
  const uint64_t h = g_.header;
  const uint64_t e = std::min(off + n, h + g_.data_size);
  if (e <= h || e <= off) return out;  // the header alone
  const uint64_t d0 = off > h ? off - h : 0, d1 = e - h;
  out.prefetch = stream_.on_read(d0, d1 - d0, g_.data_size);
  const ByteSpan u0 = unit(d0), u1 = unit(d1 - 1);
  if (!u0.empty() && u0.lo < d0) out.around[0] = pages(std::max(u0.lo, d0 > kMaxPush ? d0 - kMaxPush : 0), d0);
  if (!u1.empty() && u1.hi > d1) out.around[1] = pages(d1, std::min(u1.hi, d1 + kMaxPush));
  if (stream_.streaming()) out.ahead = ahead_of(d0, d1, u0, u1, decoded);
  for (const ByteRange& r : {out.around[0], out.around[1], out.ahead})
    if (r.len) stream_.note_pushed(r.off - h, r.end() - h);
  return out;
}

ByteRange ReadPolicy::ahead_of(uint64_t d0, uint64_t d1, ByteSpan u0, ByteSpan u1,
                               const std::function<bool(ByteRange)>& decoded) {
  const auto usable = [&](const ByteSpan& u) {
    return !u.empty() && u.hi - u.lo <= kMaxPush && decoded({u.lo, u.hi - u.lo});
  };
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t lo, hi;
  if (stream_.direction() == SequentialPrefetcher::Direction::Forward) {
    if (u1.empty()) return {};
    // Continue from what was pushed already, when that lies just ahead of this read.
    lo = pushed_hi_ > u1.hi && pushed_hi_ <= d1 + kPushAhead ? pushed_hi_ : u1.hi;
    hi = lo;
    const uint64_t target = std::min(g_.data_size, d1 + kPushAhead);
    for (ByteSpan u; hi < target && usable(u = unit(hi));) hi = u.hi;
    if (hi > lo) pushed_hi_ = hi;
  } else {
    if (u0.empty()) return {};
    hi = pushed_lo_ < u0.lo && pushed_lo_ + kPushAhead >= d0 ? pushed_lo_ : u0.lo;
    lo = hi;
    const uint64_t target = d0 > kPushAhead ? d0 - kPushAhead : 0;
    for (ByteSpan u; lo > target && usable(u = unit(lo - 1));) lo = u.lo;
    if (hi > lo) pushed_lo_ = lo;
  }
  return hi > lo ? pages(lo, hi) : ByteRange{};
}

unsigned ReadPolicy::choose_readahead_kb(bool push, unsigned mount_kb) {
  if (!g_.decodes || !push) return mount_kb;
  // Single-page windows: a fault asks for its page alone (no read-around to mistake for a
  // stream), so reads that follow each other exactly are a stream: decode ahead once it has gone
  // two units.
  const ByteSpan u = unit(0);
  if (!u.empty()) stream_.single_page_windows(u.hi - u.lo);
  return 4;
}

}  // namespace h5d::vfs
