// Reading an array's bytes (reader.h): regions and byte ranges planned into tasks and run on the
// engine's pool, and the decode-ahead of a stream.
#include "core/array/reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/engine/source_io.h"

namespace h5d {

void run(Engine& engine, ReadPlan& plan) {
  engine.pool().run_all(plan.tasks, plan.common_key());
  plan.keys.clear();
}

void read_region(Engine& engine, const Array& a, const Region& r, const DestView& dst) {
  ReadPlan plan;
  plan.request = engine.io().request_size(r.elements() * a.dtype().itemsize);
  a.plan(r, dst, plan);
  run(engine, plan);
}

void read_bytes(Engine& engine, const Array& a, uint64_t off, uint64_t len, uint8_t* out) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  const Shape& shape = a.shape();
  const auto strides = c_strides(shape, E);

  // Whole elements [m0, m1) go straight to `out`; partial elements at either end go through a
  // one-element scratch buffer.
  uint64_t m0 = (off + E - 1) / E, m1 = (off + len) / E;
  std::vector<uint8_t> head, tail;
  const uint64_t e_head = off / E, e_tail = (off + len) / E;
  const bool has_head = off % E != 0;
  const bool has_tail = (off + len) % E != 0 && !(has_head && e_tail == e_head);
  if (has_head) head.resize(E);
  if (has_tail) tail.resize(E);

  ReadPlan plan;
  plan.request = engine.io().request_size(len);
  auto plan_elems = [&](uint64_t e0, uint64_t e1, uint8_t* base_for_e0) {
    for_each_region_in_range(shape, e0, e1, [&](const Region& r) {
      uint64_t flat = 0;
      for (size_t k = 0; k < shape.size(); ++k) flat += r.start[k] * static_cast<uint64_t>(strides[k]);
      DestView d{base_for_e0 + (flat - e0 * E), strides};
      a.plan(r, d, plan);
    });
  };
  if (has_head) plan_elems(e_head, e_head + 1, head.data());
  if (m1 > m0) plan_elems(m0, m1, out + (m0 * E - off));
  if (has_tail) plan_elems(e_tail, e_tail + 1, tail.data());
  run(engine, plan);
  if (has_head) {
    uint64_t skip = off - e_head * E;
    std::memcpy(out, head.data() + skip, std::min<uint64_t>(E - skip, len));
  }
  if (has_tail) {
    uint64_t n = (off + len) - e_tail * E;
    std::memcpy(out + (len - n), tail.data(), n);
  }
}

bool bytes_decoded(const Array& a, uint64_t off, uint64_t len) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return false;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  bool all = true;
  for_each_region_in_range(a.shape(), off / E, (off + len + E - 1) / E,
                           [&](const Region& r) { all = all && a.decoded(r); });
  return all;
}

uint64_t decode_ahead_room(Engine& engine) {
  const uint64_t budget = engine.cache().budget();
  const uint64_t room = budget - std::min(budget, engine.cache().used()) + engine.cache().used_consumed();
  // Asked for and not decoded yet, it is not in the cache but will be: without it, the reads
  // that follow one another while it decodes each found the room free and asked for it again.
  const uint64_t pending = engine.prefetch_pending().load(std::memory_order_relaxed);
  return room > pending ? (room - pending) / 2 : 0;
}

namespace {

// Decode-ahead bytes planned and not yet done (Engine::prefetch_pending_): each task takes its
// share off when it ends (the shares add up to the whole), the last owner (the batch, run or
// rejected) what tasks that never ran left.
struct PendingPrefetch {
  std::atomic<uint64_t>& total;
  std::atomic<uint64_t> left;
  PendingPrefetch(std::atomic<uint64_t>& t, uint64_t n) : total(t), left(n) { total.fetch_add(n, std::memory_order_relaxed); }
  ~PendingPrefetch() { total.fetch_sub(left.load(), std::memory_order_relaxed); }
  void done(uint64_t n) {
    left.fetch_sub(n, std::memory_order_relaxed);
    total.fetch_sub(n, std::memory_order_relaxed);
  }
};

}  // namespace

void prefetch_bytes(Engine& engine, const Array& a, uint64_t off, uint64_t len, std::shared_ptr<const ReadCover> cover) {
  const uint64_t total = a.nbytes();
  if (off >= total || len == 0) return;
  len = std::min(len, total - off);
  const uint64_t E = a.dtype().itemsize;
  const uint64_t end = off + len;
  ReadPlan plan;
  plan.request = engine.io().request_size(len);
  const auto plan_range = [&](uint64_t lo, uint64_t hi) {
    for_each_region_in_range(a.shape(), lo / E, (hi + E - 1) / E, [&](const Region& r) { a.plan_prefetch(r, plan); });
  };
  if (!cover) {
    plan_range(off, end);
  } else {
    for (uint64_t lo = off; lo < end;) {
      // Pieces end where a decode unit ends, so that a chunk is planned in one piece.
      uint64_t hi = std::min(lo + kPrefetchPiece, end);
      const ByteSpan u = a.decode_span(hi - 1);
      if (!u.empty()) hi = std::max(hi, u.hi);
      hi = std::min((hi + E - 1) / E * E, end);
      const size_t first = plan.tasks.size();
      plan_range(lo, hi);
      for (size_t i = first; i < plan.tasks.size(); ++i)
        plan.tasks[i] = [&engine, cover, lo, hi, t = std::move(plan.tasks[i])] {
          if (cover->covers(lo, hi)) {
            engine.stats().prefetch_dropped.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          t();
        };
      lo = hi;
    }
  }
  if (plan.tasks.empty()) return;
  auto pending = std::make_shared<PendingPrefetch>(engine.prefetch_pending(), len);
  const uint64_t count = plan.tasks.size();
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t share = len / count + (k < len % count ? 1 : 0);
    auto& task = plan.tasks[k];
    task = [pending, share, t = std::move(task)] {
      struct Done {
        PendingPrefetch& p;
        uint64_t n;
        ~Done() { p.done(n); }
      } done{*pending, share};
      t();
    };
  }
  engine.pool().try_run_detached(std::move(plan.tasks), 64, plan.common_key());
}

}  // namespace h5d
