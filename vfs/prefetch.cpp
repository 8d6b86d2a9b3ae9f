#include "vfs/prefetch.h"

#include <algorithm>

namespace h5d::vfs {

SequentialPrefetcher::Range SequentialPrefetcher::on_read(uint64_t off, uint64_t len,
                                                          uint64_t file_size) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t end = std::min(off + len, file_size);
  const bool sequential = started_ && off + cfg_.seek_tolerance >= cursor_ &&
                          off <= cursor_ + cfg_.seek_tolerance;
  if (!sequential) {
    started_ = true;
    start_ = off;
    cursor_ = end;
    frontier_ = end;
    window_ = cfg_.initial;
    streak_ = 0;
    return {};
  }
  cursor_ = std::max(cursor_, end);
  ++streak_;
  frontier_ = std::max(frontier_, cursor_);
  if (cursor_ - std::min(start_, cursor_) < cfg_.after) return {};
  if (frontier_ >= file_size || frontier_ >= cursor_ + window_ / 2) return {};
  const uint64_t target = std::min(cursor_ + window_, file_size);
  Range r{frontier_, target - frontier_};
  frontier_ = target;
  window_ = std::min(window_ * 2, std::max(cfg_.max, cfg_.initial));
  return r;
}

bool SequentialPrefetcher::streaming() const {
  std::lock_guard<std::mutex> lk(mu_);
  return started_ && cursor_ - std::min(start_, cursor_) >= cfg_.after;
}

uint64_t SequentialPrefetcher::window() const {
  std::lock_guard<std::mutex> lk(mu_);
  return window_;
}

}  // namespace h5d::vfs
