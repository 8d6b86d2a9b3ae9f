// Source I/O (source_io.h): every decision about the requests the source files get.
#include "core/engine/source_io.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/engine/buffer_pool.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/log.h"

namespace h5d {

uint64_t file_key(const std::string& path) {
  const uint64_t k = std::hash<std::string>()(path);
  return k ? k : 1;
}

SourcePtr make_source(std::string path, const FileIdentity& id, std::string what) {
  auto s = std::make_shared<Source>();
  s->key = file_key(path);
  s->path = std::move(path);
  s->id = id;
  s->what = std::move(what);
  return s;
}

SourceIo::SourceIo(Engine& engine, Storage& storage) : engine_(engine), storage_(storage) {}

uint64_t SourceIo::request_size(uint64_t bytes) const {
  return std::clamp<uint64_t>(bytes / std::max(1u, engine_.options().io_depth), kMinRequest, kMaxRequest);
}

uint64_t SourceIo::request_end(uint64_t at, uint64_t piece, uint64_t end) {
  constexpr uint64_t a = kMinRequest;
  if (end <= at) return end;
  piece = std::max(a, (piece + a / 2) / a * a);
  const uint64_t cut = (at + piece) / a * a;  // > at, since piece >= a
  return cut >= end || end - cut < a ? end : cut;
}

std::vector<std::pair<uint64_t, uint64_t>> SourceIo::pieces(uint64_t off, uint64_t n, uint64_t piece) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  if (n == 0) return out;
  const uint64_t count = (n + piece - 1) / piece;
  const uint64_t each = (n + count - 1) / count;  // about equal
  for (uint64_t at = off; at < off + n;) {
    const uint64_t cut = request_end(at, each, off + n);
    out.emplace_back(at, cut - at);
    at = cut;
  }
  return out;
}

// ---- Reads -------------------------------------------------------------------------------------

void SourceIo::read(const OpenFd& fd, void* buf, uint64_t n, uint64_t off, bool cold, Kind kind) {
  Stats& st = engine_.stats();
  const uint64_t now = st.source_in_flight.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t max = st.source_in_flight_max.load(std::memory_order_relaxed);
  while (now > max && !st.source_in_flight_max.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
  }
  struct Done {
    std::atomic<uint64_t>& c;
    ~Done() { c.fetch_sub(1, std::memory_order_relaxed); }
  } done{st.source_in_flight};
  const bool dbg = log::debug_enabled();
  const auto t0 = dbg ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  {
    // A read the page cache cannot answer waits for the storage: another worker may start
    // meanwhile (that is the I/O depth). One it can answer is a copy: the worker keeps its place.
    std::optional<ThreadPool::Waiting> waiting;
    if (cold) waiting.emplace();
    storage_.pread(fd, buf, n, off);
  }
  st.source_requests.fetch_add(1, std::memory_order_relaxed);
  (kind == Kind::ReadAhead ? st.readahead_bytes : st.bytes_pread).fetch_add(n, std::memory_order_relaxed);
  if (dbg) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log::debug("source read " + fd.path() + " at " + std::to_string(off) + " (" + std::to_string(n) + " bytes): " +
               std::to_string(ms) + " ms, " + std::to_string(now) + " in flight");
  }
}

void SourceIo::read_stored(const Source& s, void* buf, uint64_t n, uint64_t off, uint64_t piece) {
  auto fd = storage_.open(s);
  const bool cold = !storage_.resident(*fd, off, n);
  if (piece) piece = std::max(piece, kMinRequest);
  if (!piece || n <= piece || !cold) {
    read(*fd, buf, n, off, cold);
  } else {
    // One large chunk costs one round trip, not its size over one request's bandwidth.
    std::vector<std::function<void()>> tasks;
    auto* out = static_cast<uint8_t*>(buf);
    for (const auto& [at, len] : pieces(off, n, piece))
      tasks.push_back([this, &fd, dst = out + (at - off), len = len, at = at] { read(*fd, dst, len, at, true); });
    engine_.pool().run_all(tasks, s.key);
  }
  storage_.recheck(s);
}

bool SourceIo::read_into_page_cache(const OpenFd& fd, uint64_t off, uint64_t n, Kind kind) {
  if (n == 0 || storage_.resident(fd, off, n)) return false;
  thread_local std::vector<uint8_t> scratch;  // at most kMaxScratchRequest per worker
  if (scratch.size() < n) scratch.resize(n);
  read(fd, scratch.data(), n, off, /*cold=*/true, kind);
  return true;
}

void SourceIo::read_ahead_ranges(const OpenFd& fd, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::vector<std::function<void()>> tasks;
  for (const auto& [off, len] : ranges) {
    if (off >= fd.size() || len == 0) continue;
    const uint64_t n = std::min<uint64_t>({len, fd.size() - off, kMaxScratchRequest});
    tasks.push_back([this, &fd, off = off, n] {
      try {
        read_into_page_cache(fd, off, n, Kind::Data);
      } catch (const std::exception&) {
        // A hint: the parser's own read reports what is wrong.
      }
    });
  }
  engine_.pool().run_all(tasks);
}

// ---- Byte runs ---------------------------------------------------------------------------------

void SourceIo::plan_runs(const SourcePtr& s, const std::vector<ByteRun>& runs, ReadPlan& plan) {
  const uint64_t piece = plan.request ? plan.request : kMaxRequest;
  std::vector<ByteRun> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    plan.add([this, s, b = std::move(batch)] {
      auto fd = storage_.open(*s);
      for (const ByteRun& r : b) read(*fd, r.dst, r.n, r.src, !storage_.resident(*fd, r.src, r.n));
      storage_.recheck(*s);
    }, s->key);
    batch.clear();
    batch_bytes = 0;
  };
  for (const ByteRun& r : runs) {
    if (r.n >= kMinRequest) {  // a request of its own, or several in parallel
      flush();
      for (const auto& [at, len] : pieces(r.src, r.n, piece)) {
        batch.push_back({at, r.dst + (at - r.src), len});
        flush();
      }
      continue;
    }
    if (batch_bytes + r.n > kMinRequest) flush();
    batch.push_back(r);
    batch_bytes += r.n;
  }
  flush();
}

void SourceIo::plan_readahead(const SourcePtr& s, std::vector<ByteRun> runs, ReadPlan& plan) {
  if (runs.empty()) return;
  std::sort(runs.begin(), runs.end(), [](const ByteRun& a, const ByteRun& b) { return a.src < b.src; });
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, length)
  for (const ByteRun& r : runs) {
    if (!ranges.empty() && r.src <= ranges.back().first + ranges.back().second + kMergeGap)
      ranges.back().second = std::max(ranges.back().second, r.src + r.n - ranges.back().first);
    else
      ranges.emplace_back(r.src, r.n);
  }
  const uint64_t piece = std::min(plan.request ? plan.request : kMinRequest, kMaxScratchRequest);
  // A range starts and ends on multiples of kMinRequest in the file (not past the file's end):
  // the stream reads on from its end (forward) or its start (backward) next, and the next range's
  // block there is then in the page cache or on its way (the client asks only for pages it
  // lacks, and waits for those being read), so its requests start on that multiple too.
  // Ranges cut where the decode-ahead's windows end made a short request at each end: 1,500
  // requests on the emulated storage for a cold 157 MB copy where 1,200 do.
  const uint64_t a = kMinRequest;
  for (auto& range : ranges) {
    const uint64_t end = range.first + range.second;
    uint64_t up = (end + a - 1) / a * a;
    if (s->id.size > 0) up = std::min(up, std::max(end, static_cast<uint64_t>(s->id.size)));
    range.first = range.first / a * a;
    range.second = up - range.first;
  }
  for (const auto& range : ranges) {
    uint64_t off = range.first, len = range.second;  // not a structured binding: lambdas capture these
    if (plan.readahead_key == s->key && off < plan.readahead_hi && off >= plan.readahead_lo) {
      if (off + len <= plan.readahead_hi) continue;  // asked for already
      len -= plan.readahead_hi - off;
      off = plan.readahead_hi;
    }
    if (plan.readahead_key == s->key && off == plan.readahead_hi) {
      plan.readahead_hi = off + len;
    } else {
      plan.readahead_key = s->key;
      plan.readahead_lo = off;
      plan.readahead_hi = off + len;
    }
    while (len > 0) {
      const uint64_t n = request_end(off, piece, off + len) - off;
      plan.add([this, s, off, n] {
        try {
          auto fd = storage_.open(*s);
          if (!read_into_page_cache(*fd, off, n, Kind::ReadAhead))
            engine_.stats().readahead_resident_bytes.fetch_add(n, std::memory_order_relaxed);
        } catch (const std::exception&) {
          // Read-ahead only: the reader's own read reports what is wrong.
        }
      }, s->key);
      off += n;
      len -= n;
    }
  }
}

// ---- Stored chunks -----------------------------------------------------------------------------

// Chunks that lie next to each other in the file (at most kMergeGap apart) are read with one
// request, up to the read's request size and at most kMaxScratchRequest (a recycled buffer of the
// decode pool); their decoding then fans out over the pool. A group whose bytes the page cache
// holds already costs no round trip, so its chunks are planned one by one (a merged group's
// decoding is a nested batch: on warm data those cost a wake-up and a context switch each, 0.86x
// the speed of per-chunk tasks). A chunk already decoded or being decoded joins no group.
void SourceIo::plan_chunks(const SourcePtr& s, std::vector<ChunkJob> jobs, ReadPlan& plan, bool prefetch) {
  if (jobs.empty()) return;
  const uint64_t cap = std::min(plan.request, kMaxScratchRequest);
  std::vector<ChunkJob> alone;
  if (jobs.size() > 1 && cap > 0) {
    std::stable_sort(jobs.begin(), jobs.end(), [](const ChunkJob& a, const ChunkJob& b) { return a.addr < b.addr; });
    std::vector<ChunkJob> group;
    uint64_t lo = 0, hi = 0;
    std::shared_ptr<const OpenFd> fd;
    const auto cached = [&] {
      try {
        if (!fd) fd = storage_.open(*s);
        return storage_.resident(*fd, lo, hi - lo);
      } catch (const std::exception&) {
        return false;  // the group's own read reports what is wrong
      }
    };
    const auto flush = [&] {
      if (group.size() == 1 || (group.size() > 1 && cached())) {
        for (ChunkJob& j : group) alone.push_back(std::move(j));
      } else if (!group.empty()) {
        plan.add(group_task(s, std::move(group), prefetch), s->key);
      }
      group.clear();
    };
    for (ChunkJob& j : jobs) {
      const uint64_t end = j.addr + j.size;
      const bool joins = !group.empty() && j.addr >= hi && j.addr - hi <= kMergeGap && end - lo <= cap &&
                         !engine_.cache().contains(j.key);
      if (!joins) {
        flush();
        lo = j.addr;
      }
      hi = end;
      group.push_back(std::move(j));
    }
    flush();
  } else {
    alone = std::move(jobs);
  }
  for (ChunkJob& j : alone) plan.add(chunk_task(s, std::move(j), prefetch), s->key);
}

// One chunk: found in the decoded-chunk cache, waited for (another read decodes it), or read
// and decoded here; then the reader's part delivered.
std::function<void()> SourceIo::chunk_task(const SourcePtr& s, ChunkJob job, bool prefetch) {
  return [this, s, job = std::move(job), prefetch] {
    Stats& st = engine_.stats();
    bool hit = false;
    ChunkBytes bytes;
    try {
      bytes = engine_.cache().get_or_load(job.key, [&] { return job.decode(nullptr); }, &hit);
    } catch (...) {
      if (prefetch) return;  // the reader that asks for this chunk gets (and logs) the error
      throw;
    }
    (hit ? st.cache_hits : st.cache_misses).fetch_add(1, std::memory_order_relaxed);
    if (prefetch) st.chunks_prefetched.fetch_add(1, std::memory_order_relaxed);
    if (job.deliver) job.deliver(bytes);
  };
}

// One source request for chunks adjacent in the file, then their decoding on the pool. The
// group claims the chunks nobody has cached or is decoding (ChunkCache::claim) before its
// request, and reads only those: reads of them meanwhile wait for this group instead of
// reading them again (h5py's own chunk shape puts a frame in 128 chunks of 75 frames, so the
// kernel's concurrent read-ahead requests for neighbouring frames all wanted the same block:
// twice the file's bytes were read). When the request fails, each claimed chunk is read on
// its own, so the error names the chunk it is about. The claimed chunks are decoded in one
// batch before the group waits for any chunk another group claimed: a group never waits while
// holding claims, so two groups cannot wait for each other.
std::function<void()> SourceIo::group_task(const SourcePtr& s, std::vector<ChunkJob> group, bool prefetch) {
  return [this, s, group = std::move(group), prefetch]() mutable {
    ChunkCache& cache = engine_.cache();
    std::vector<ChunkCache::Claim> claims(group.size());
    uint64_t lo = ~0ull, hi = 0;
    size_t n = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      claims[i] = cache.claim(group[i].key);
      if (!claims[i]) continue;
      lo = std::min(lo, group[i].addr);
      hi = std::max(hi, group[i].addr + group[i].size);
      ++n;
    }
    // Claims a task did not end (a batch that threw skips the tasks not started) fail, so that
    // nobody waits for them forever.
    struct Unclaim {
      ChunkCache& cache;
      std::vector<ChunkCache::Claim>& claims;
      const std::vector<ChunkJob>& group;
      ~Unclaim() {
        for (size_t i = 0; i < claims.size(); ++i)
          if (claims[i])
            cache.fail(group[i].key, claims[i],
                       std::make_exception_ptr(Error(EIO, "chunk not decoded: its merged request ended early")));
      }
    } unclaim{cache, claims, group};
    std::shared_ptr<std::vector<uint8_t>> stored;
    if (n > 1) {
      try {
        // A recycled buffer of the pool (a fresh zeroed one cost a page fault and a memset per
        // 4 KiB, a tenth of the daemon's CPU on a cold deflate read): groups are at most
        // kMaxScratchRequest, so one pooled size serves them all.
        auto buf = engine_.buffers().get(std::max<uint64_t>(hi - lo, kMaxScratchRequest));
        read_stored(*s, buf->data(), hi - lo, lo, 0);
        engine_.stats().merged_requests.fetch_add(1, std::memory_order_relaxed);
        stored = std::move(buf);
      } catch (const std::exception&) {
        stored.reset();  // each chunk reads (and names) itself
      }
    }
    std::vector<std::function<void()>> mine, others;
    for (size_t i = 0; i < group.size(); ++i) {
      ChunkJob& j = group[i];
      if (!claims[i]) {
        if (!prefetch) others.push_back(chunk_task(s, std::move(j), false));
        continue;
      }
      const bool in_buf = stored && j.addr >= lo && j.addr + j.size <= hi;
      const uint8_t* src = in_buf ? stored->data() + (j.addr - lo) : nullptr;
      mine.push_back([this, &j, &claim = claims[i], src, prefetch] {
        ChunkBytes bytes;
        try {
          bytes = j.decode(src);
        } catch (...) {
          engine_.cache().fail(j.key, claim, std::current_exception());
          claim.reset();
          if (prefetch) return;  // the reader that asks for this chunk gets (and logs) the error
          throw;
        }
        engine_.cache().fulfill(j.key, claim, bytes);
        claim.reset();
        engine_.stats().cache_misses.fetch_add(1, std::memory_order_relaxed);
        if (prefetch)
          engine_.stats().chunks_prefetched.fetch_add(1, std::memory_order_relaxed);
        else if (j.deliver)
          j.deliver(bytes);
      });
    }
    engine_.pool().run_all(mine, s->key);
    if (!others.empty()) engine_.pool().run_all(others, s->key);
  };
}

}  // namespace h5d
