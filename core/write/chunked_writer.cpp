// Side: daemon. The chunked dataset writer of the write path (writer.h): the bytes of each chunk
// gathered in memory, complete chunks compressed on the pool and written through the file's
// WriteFile, partial ones written padded with fill on flush (or when write_buffer is full).
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "core/array/region.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/filters/encode.h"
#include "core/filters/filters.h"
#include "core/log.h"
#include "core/write/dataset_writers.h"

namespace h5d {

namespace {


// Adds [s, e) to a set of disjoint intervals; returns how many bytes were not covered before.
uint64_t add_interval(std::map<uint64_t, uint64_t>& m, uint64_t s, uint64_t e) {
  auto it = m.upper_bound(s);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->second >= s) it = p;
  }
  uint64_t removed = 0;
  uint64_t ns = s, ne = e;
  while (it != m.end() && it->first <= ne) {
    ns = std::min(ns, it->first);
    ne = std::max(ne, it->second);
    removed += it->second - it->first;
    it = m.erase(it);
  }
  m[ns] = ne;
  return (ne - ns) - removed;
}

class ChunkedWriter final : public DatasetWriter,
                            public std::enable_shared_from_this<ChunkedWriter> {
 public:
  ChunkedWriter(Engine& engine, std::shared_ptr<Writer::FileState> f, std::string what,
                std::string dpath, const Shape& shape, const Shape& chunks, size_t itemsize,
                std::vector<FilterInfo> pipeline, std::shared_ptr<WriteBudget> budget)
      : engine_(engine), f_(std::move(f)), what_(std::move(what)), dpath_(std::move(dpath)),
        chunks_(chunks), itemsize_(itemsize), pipeline_(std::move(pipeline)), budget_(std::move(budget)) {
    const size_t r = shape.size();
    bshape_ = shape;
    bchunk_ = chunks;
    bshape_[r - 1] *= itemsize;
    bchunk_[r - 1] *= itemsize;
    grid_.resize(r);
    for (size_t k = 0; k < r; ++k) grid_[k] = (bshape_[k] + bchunk_[k] - 1) / bchunk_[k];
    gstride_.assign(r, 1);
    cstride_.assign(r, 1);
    for (size_t k = r - 1; k-- > 0;) {
      gstride_[k] = gstride_[k + 1] * grid_[k + 1];
      cstride_[k] = cstride_[k + 1] * bchunk_[k + 1];
    }
    chunk_bytes_ = product(bchunk_);
    nbytes_ = product(bshape_);
  }
  ~ChunkedWriter() override {
    try {
      close();
    } catch (const std::exception& e) {
      log::error(what_ + ": " + e.what());
    }
  }

  uint64_t nbytes() const override { return nbytes_; }
  std::string describe() const override {
    std::string f;
    for (const auto& x : pipeline_) f += (f.empty() ? "" : "+") + filters::filter_name(x.id);
    return what_ + " (chunked" + (f.empty() ? "" : ", " + f) + ")";
  }

  void write(uint64_t off, const uint8_t* p, size_t n) override {
    if (off > nbytes_ || n > nbytes_ - off) fail(EFBIG, what_ + ": write past the end of the data");
    std::map<uint64_t, std::shared_ptr<Pending>> loaded;
    bool spilled = false;
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      if (closed_) fail(EIO, what_ + ": the writer is closed");
      if (!async_error_.empty()) throw Error(EIO, async_error_, async_logged_);
      const std::set<uint64_t> touched = touched_chunks(off, n);
      if (wait_inflight(lk, touched)) continue;
      // Every chunk buffer this write needs, taken from the budget before any is allocated.
      uint64_t need = 0;
      for (uint64_t c : touched) {
        if (!pending_.count(c) && !loaded.count(c)) need += chunk_bytes_;
      }
      Hold hold(*budget_, 0);
      if (need && !budget_->try_take(need)) {
        if (!spilled) {
          lk.unlock();
          spill(touched);
          spilled = true;
          continue;
        }
        const std::string msg = what_ + ": no room for " + std::to_string(need / chunk_bytes_) + " more partly written chunk(s) of " +
                                std::to_string(chunk_bytes_) + " bytes: write_buffer=" + std::to_string(budget_->limit()) +
                                " bytes is full (" + std::to_string(budget_->used()) +
                                " held by chunks of this mount's datasets written in part)";
        log::error(msg);
        fail(ENOSPC, msg);
      }
      hold.bytes = need;
      std::vector<uint64_t> missing;
      for (uint64_t c : touched) {
        if (!pending_.count(c) && written_.count(c)) {
          auto it = loaded.find(c);
          if (it != loaded.end()) {
            pending_[c] = it->second;  // read-modify-write of a chunk already in the file
          } else {
            missing.push_back(c);
          }
        }
      }
      if (!missing.empty()) {
        lk.unlock();
        for (uint64_t c : missing) {
          auto pp = std::make_shared<Pending>();
          hold.pass_to(*pp, chunk_bytes_);
          pp->buf = load_chunk(c);
          pp->covered = valid_bytes(c);
          loaded[c] = pp;
        }
        continue;
      }
      for_each_piece(off, n, [&](uint64_t c, uint64_t in_chunk, uint64_t doff, uint64_t len) {
        auto& pp = pending_[c];
        if (!pp) {
          pp = std::make_shared<Pending>();
          hold.pass_to(*pp, chunk_bytes_);
          pp->buf.assign(chunk_bytes_, 0);
        }
        std::memcpy(pp->buf.data() + in_chunk, p + doff, len);
        pp->covered += add_interval(pp->cov, in_chunk, in_chunk + len);
        pp->dirty = true;
      });
      std::vector<Job> jobs;
      for (uint64_t c : touched) {
        auto it = pending_.find(c);
        if (it->second->covered >= valid_bytes(c)) {
          inflight_[c] = it->second;
          jobs.push_back({c, it->second, nullptr});
          pending_.erase(it);
        }
      }
      lk.unlock();
      submit(jobs);
      return;
    }
  }

  void read(uint64_t off, size_t n, uint8_t* out) override {
    if (off > nbytes_ || n > nbytes_ - off) fail(EINVAL, what_ + ": read past the end of the data");
    std::map<uint64_t, std::vector<uint8_t>> loaded;
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      std::vector<uint64_t> missing;
      for (uint64_t c : touched_chunks(off, n)) {
        if (!pending_.count(c) && !inflight_.count(c) && written_.count(c) && !loaded.count(c)) {
          missing.push_back(c);
        }
      }
      if (!missing.empty()) {
        lk.unlock();
        for (uint64_t c : missing) loaded[c] = load_chunk(c);
        continue;
      }
      for_each_piece(off, n, [&](uint64_t c, uint64_t in_chunk, uint64_t doff, uint64_t len) {
        const uint8_t* src = nullptr;
        if (auto it = pending_.find(c); it != pending_.end()) src = it->second->buf.data();
        else if (auto it2 = inflight_.find(c); it2 != inflight_.end()) src = it2->second->buf.data();
        else if (auto it3 = loaded.find(c); it3 != loaded.end()) src = it3->second.data();
        if (src) std::memcpy(out + doff, src + in_chunk, len);
        else std::memset(out + doff, 0, len);  // never written: the fill value (0)
      });
      return;
    }
  }

  void flush(bool durable) override {
    std::vector<Job> jobs;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (closed_) return;
      // Complete chunks being compressed in the background first.
      std::vector<uint64_t> busy;
      for (const auto& [c, pp] : inflight_) busy.push_back(c);
      cv_.wait(lk, [&] {
        for (uint64_t c : busy) {
          if (inflight_.count(c)) return false;
        }
        return true;
      });
      if (!async_error_.empty()) {
        // Reported once; the chunks that failed are pending again and are retried below.
        const std::string e = async_error_;
        async_error_.clear();
        if (!async_logged_) log::error(e);
      }
      for (auto& [c, pp] : pending_) {
        if (!pp->dirty || inflight_.count(c)) continue;
        pp->dirty = false;
        inflight_[c] = pp;
        jobs.push_back({c, pp, nullptr});
      }
    }
    write_one_by_one(jobs);
    {
      std::lock_guard<std::mutex> g(f_->mu);
      if (f_->h5 && !f_->closed) f_->h5->flush();
    }
    if (durable && !f_->closed && ::fdatasync(f_->fd) != 0) {
      fail(errno, what_ + ": fdatasync: " + std::strerror(errno));
    }
  }

  // Writes that race with close() either reach the file or fail with EIO: a chunk written
  // after the flush below is flushed again before the writer is marked closed.
  void close() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (closed_) return;
      }
      try {
        flush(false);
      } catch (...) {
        // Reported once, here: what is pending cannot reach the file (its writer process died,
        // say), and a later close (the destructor after close_all) would only fail again.
        std::lock_guard<std::mutex> lk(mu_);
        closed_ = true;
        throw;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        const bool dirty = std::any_of(pending_.begin(), pending_.end(), [](const auto& p) { return p.second->dirty; });
        if (dirty || !inflight_.empty()) continue;
        closed_ = true;  // no write starts a chunk from here on
      }
      std::lock_guard<std::mutex> g(f_->mu);
      if (f_->h5 && !f_->closed) f_->h5->close_dataset(dpath_);
      return;
    }
  }

 private:
  struct Pending {
    std::vector<uint8_t> buf;              // the whole chunk, C order, fill where not written
    std::map<uint64_t, uint64_t> cov;      // byte intervals written
    uint64_t covered = 0;                  // bytes written (of valid_bytes)
    bool dirty = false;                    // changed since last written to the file
    WriteBudget* budget = nullptr;         // what buf's bytes were taken from
    uint64_t held = 0;
    Pending() = default;
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    ~Pending() {
      if (held) budget->give(held);
    }
  };
  struct Job {
    uint64_t chunk;
    std::shared_ptr<Pending> pending;
    std::shared_ptr<std::vector<uint8_t>> encoded;
  };
  // Budget bytes taken for one write, passed on to the chunk buffers it creates; what is left
  // goes back. A chunk the write did not count (created meanwhile) takes its own bytes.
  struct Hold {
    WriteBudget& budget;
    uint64_t bytes;
    Hold(WriteBudget& b, uint64_t n) : budget(b), bytes(n) {}
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() {
      if (bytes) budget.give(bytes);
    }
    void pass_to(Pending& p, uint64_t n) {
      if (bytes >= n) {
        bytes -= n;
      } else if (!budget.try_take(n)) {
        fail(ENOSPC, "write_buffer is full (" + std::to_string(budget.used()) + " of " +
                         std::to_string(budget.limit()) + " bytes held by chunks written in part)");
      }
      p.budget = &budget;
      p.held = n;
    }
  };

  // Makes room in the budget: this dataset's partial chunks other than `keep` are written to
  // the file (padded with fill, as flush() does) and their buffers released; more bytes for
  // them later read them back. Complete chunks being written are waited for (they release
  // their buffers when done).
  void spill(const std::set<uint64_t>& keep) {
    std::vector<Job> jobs;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return inflight_.empty(); });
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (keep.count(it->first)) {
          ++it;
        } else if (!it->second->dirty && written_.count(it->first)) {
          it = pending_.erase(it);  // already in the file as it is
        } else {
          it->second->dirty = false;
          inflight_[it->first] = it->second;
          jobs.push_back({it->first, it->second, nullptr});
          ++it;
        }
      }
    }
    if (jobs.empty()) return;
    log::info(what_ + ": write_buffer full: " + std::to_string(jobs.size()) +
              " partly written chunk(s) written to the file to make room");
    write_one_by_one(jobs, /*release=*/true);
  }

  // Writes partial chunks (flush, spill) one at a time, on this thread: encoding one takes
  // buffers of its own (a copy, the shuffled copy, the compressed output: up to 3 chunks) that
  // the budget does not count; encoded in parallel they would add up. `release`: their buffers
  // are dropped once written (a later write reads the chunk back).
  void write_one_by_one(std::vector<Job>& jobs, bool release = false) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::vector<Job> one(1, jobs[i]);
      try {
        write_jobs(one, /*complete=*/false);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t k = i + 1; k < jobs.size(); ++k) {  // not tried: pending as before
          inflight_.erase(jobs[k].chunk);
          jobs[k].pending->dirty = true;
        }
        cv_.notify_all();
        throw;
      }
      if (!release) continue;
      std::lock_guard<std::mutex> lk(mu_);
      auto it = pending_.find(one[0].chunk);
      if (it != pending_.end() && it->second == one[0].pending && !one[0].pending->dirty) pending_.erase(it);
    }
  }

  template <class Fn>
  void for_each_piece(uint64_t off, uint64_t n, Fn&& fn) const {
    const size_t r = bshape_.size();
    const uint64_t inner = bshape_[r - 1];
    const uint64_t end = off + n;
    uint64_t b = off;
    while (b < end) {
      const uint64_t row = b / inner;
      uint64_t col = b % inner;
      uint64_t run = std::min(inner - col, end - b);
      uint64_t rr = row, cid = 0, inoff = 0;
      for (size_t k = r - 1; k-- > 0;) {
        const uint64_t i = rr % bshape_[k];
        rr /= bshape_[k];
        cid += (i / bchunk_[k]) * gstride_[k];
        inoff += (i % bchunk_[k]) * cstride_[k];
      }
      while (run > 0) {
        const uint64_t cl = col / bchunk_[r - 1], wl = col % bchunk_[r - 1];
        const uint64_t len = std::min(run, bchunk_[r - 1] - wl);
        fn(cid + cl, inoff + wl, b - off, len);
        col += len;
        b += len;
        run -= len;
      }
    }
  }

  std::set<uint64_t> touched_chunks(uint64_t off, uint64_t n) const {
    std::set<uint64_t> out;
    for_each_piece(off, n, [&](uint64_t c, uint64_t, uint64_t, uint64_t) { out.insert(c); });
    return out;
  }

  // Waits for chunks being written; true when it waited (the caller starts over).
  bool wait_inflight(std::unique_lock<std::mutex>& lk, const std::set<uint64_t>& touched) {
    for (uint64_t c : touched) {
      if (inflight_.count(c)) {
        cv_.wait(lk, [&] { return !inflight_.count(c); });
        return true;
      }
    }
    return false;
  }

  // Complete chunks: compressed and written on the pool in the background (the request returns
  // at once, so even one writer keeps every core busy); synchronously when the pool is busy
  // (backpressure: at most 2 chunks per pool thread wait).
  void submit(std::vector<Job>& jobs) {
    ThreadPool& pool = engine_.pool();
    std::vector<Job> now;
    for (auto& j : jobs) {
      auto one = std::make_shared<std::vector<Job>>(1, j);
      auto self = shared_from_this();
      const bool queued = pool.size() > 0 && pool.try_run_detached(
          {[self, one] {
            try {
              self->write_jobs(*one, /*complete=*/true);
            } catch (const std::exception& e) {
              std::lock_guard<std::mutex> lk(self->mu_);
              if (self->async_error_.empty()) {
                self->async_error_ = e.what();
                self->async_logged_ = already_logged(e);
              }
            }
          }},
          2 * engine_.options().threads);
      if (!queued) now.push_back(j);
    }
    if (!now.empty()) write_jobs(now, /*complete=*/true);
  }

  std::vector<uint64_t> chunk_offset(uint64_t c) const {
    const size_t r = grid_.size();
    std::vector<uint64_t> o(r);
    for (size_t k = 0; k < r; ++k) o[k] = ((c / gstride_[k]) % grid_[k]) * chunks_[k];
    return o;
  }

  uint64_t valid_bytes(uint64_t c) const {
    uint64_t v = 1;
    for (size_t k = 0; k < grid_.size(); ++k) {
      const uint64_t start = ((c / gstride_[k]) % grid_[k]) * bchunk_[k];
      v *= std::min(bchunk_[k], bshape_[k] - start);
    }
    return v;
  }

  std::string chunk_name(uint64_t c) const {
    std::string s = "(";
    for (uint64_t x : chunk_offset(c)) s += (s.size() > 1 ? "," : "") + std::to_string(x);
    return s + ")";
  }

  // Reads and decodes a chunk already in the file.
  std::vector<uint8_t> load_chunk(uint64_t c) {
    uint64_t size = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      size = written_.at(c);
    }
    uint32_t mask = 0;
    std::vector<uint8_t> in;
    try {
      in = f_->with_file(what_, [&](WriteFile& h5) { return h5.read_chunk(dpath_, chunk_offset(c), size, mask); });
    } catch (const Error& e) {
      throw Error(e.code(), what_ + ": chunk " + chunk_name(c) + ": " + e.what(), e.logged());
    }
    if (pipeline_.empty()) {
      in.resize(chunk_bytes_, 0);
      return in;
    }
    std::vector<uint8_t> out;
    try {
      // The file's bytes, which its owner may have changed behind the writer: checked by the
      // decoder like any chunk read (EIO), named here.
      decode_chunk(pipeline_, mask, itemsize_, in, chunk_bytes_, out);
    } catch (const Error& e) {
      const std::string msg = what_ + ": chunk " + chunk_name(c) + " read back from the file: " + e.what();
      log::error(msg);
      throw Error(EIO, msg, true);
    }
    return out;
  }

  // Compresses the jobs' chunks (on the pool when there are several), writes them under the
  // HDF5 lock and marks them written. complete: the chunks left pending_ (put back on failure).
  void write_jobs(std::vector<Job>& jobs, bool complete) {
    try {
      std::vector<std::function<void()>> tasks;
      for (auto& j : jobs) {
        tasks.push_back([this, &j] {
          CpuGate::Slot cpu(engine_.cpu());
          const auto& b = j.pending->buf;
          j.encoded = std::make_shared<std::vector<uint8_t>>(
              pipeline_.empty() ? b : encode_pipeline(pipeline_, itemsize_, b.data(), b.size()));
        });
      }
      if (tasks.size() == 1) tasks[0]();
      else engine_.pool().run_all(tasks);
      for (auto& j : jobs) {
        try {
          f_->with_file(what_, [&](WriteFile& h5) { h5.write_chunk(dpath_, chunk_offset(j.chunk), *j.encoded); });
        } catch (const Error& e) {
          throw Error(e.code(), what_ + ": chunk " + chunk_name(j.chunk) + ": " + e.what(), e.logged());
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& j : jobs) {
        inflight_.erase(j.chunk);
        j.pending->dirty = true;
        if (complete) pending_[j.chunk] = j.pending;
      }
      cv_.notify_all();
      throw;
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& j : jobs) {
      inflight_.erase(j.chunk);
      written_[j.chunk] = j.encoded->size();
    }
    cv_.notify_all();
  }

  Engine& engine_;
  std::shared_ptr<Writer::FileState> f_;
  std::string what_;
  std::string dpath_;  // the dataset's path in the file (f_->h5 names datasets by it)
  Shape chunks_;    // elements
  Shape bshape_, bchunk_, grid_;  // the last dimension in bytes
  std::vector<uint64_t> gstride_, cstride_;
  size_t itemsize_;
  uint64_t chunk_bytes_ = 0, nbytes_ = 0;
  std::vector<FilterInfo> pipeline_;
  std::shared_ptr<WriteBudget> budget_;

  // Lock level 4 (docs/architecture.md): after the HDF5 lock, before the log. Guards pending_,
  // inflight_, written_, closed_, async_error_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;
  std::map<uint64_t, std::shared_ptr<Pending>> inflight_;  // being written to the file
  std::map<uint64_t, uint64_t> written_;  // chunks in the file: their encoded size as written
  bool closed_ = false;
  std::string async_error_;  // a background chunk write that failed (reported by write/flush)
  bool async_logged_ = false;  // ... and was logged where it failed (a writer process that died)
};

}  // namespace

namespace detail {

DatasetWriterPtr make_chunked_writer(Engine& engine, std::shared_ptr<Writer::FileState> f, std::string what,
                                     std::string dpath, const Shape& shape, const Shape& chunks, size_t itemsize,
                                     std::vector<FilterInfo> pipeline, std::shared_ptr<WriteBudget> budget) {
  return std::make_shared<ChunkedWriter>(engine, std::move(f), std::move(what), std::move(dpath), shape, chunks,
                                         itemsize, std::move(pipeline), std::move(budget));
}

bool close_if_chunked(DatasetWriter& w) {
  auto* c = dynamic_cast<ChunkedWriter*>(&w);
  if (!c) return false;
  c->close();
  return true;
}

}  // namespace detail
}  // namespace h5d
