// Side: daemon. The write path's daemon side (writer.h): the Writer, the files it writes into,
// and the dataset writers that turn pwrites into file bytes: contiguous datasets in place,
// chunked ones assembled chunk by chunk in memory and compressed on the pool. libhdf5 is only
// ever reached through a WriteFile (write_file.cpp): in the daemon, a writer process.
#include "core/write/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <set>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/filters/encode.h"
#include "core/filters/filters.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"
#include "core/log.h"
#include "core/write/write_internal.h"

namespace h5d {

// One file the writer writes into, shared by the Writer and its dataset writers. It owns its
// descriptor and (files created here) its WriteFile: the destructor closes both, when the last
// of them lets go. close() (close_all) finishes the file before that: flushed, its libhdf5 file
// closed (its writer process ends), its bytes synced, `closed` set; the descriptor stays open
// until the destructor, so a write racing with close_all never lands in another file that took
// over the number.
struct Writer::FileState {
  FileState(std::string p, std::unique_ptr<WriteFile> file, int descriptor)
      : path(std::move(p)), created(bool(file)), fd(descriptor), h5(std::move(file)) {}
  ~FileState() {
    try {
      close();
    } catch (const std::exception& e) {
      log::error(path + ": closing: " + e.what());
    }
    if (fd >= 0) ::close(fd);
  }
  FileState(const FileState&) = delete;
  FileState& operator=(const FileState&) = delete;

  // Flushes and closes the libhdf5 file, syncs the bytes, sets `closed` (idempotent). Logs the
  // error (once: a writer process that died logged it already) and returns it, "" when none.
  std::string close() {
    std::lock_guard<std::mutex> g(mu);
    if (closed.exchange(true)) return "";
    std::string err;
    bool logged = false;
    if (h5) {
      try {
        h5->close();
      } catch (const std::exception& e) {
        err = path + ": closing: " + e.what();
        logged = already_logged(e);
      }
      h5.reset();  // ends the writer process (after its H5Fclose)
    }
    if (fd >= 0 && ::fdatasync(fd) != 0 && err.empty()) err = path + ": fdatasync: " + std::strerror(errno);
    if (!err.empty() && !logged) log::error(err);
    return err;
  }

  // Runs fn(WriteFile&) under mu; Error(EIO) once the file is closed.
  template <class Fn>
  auto with_file(const std::string& what, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu);
    if (closed || !h5) fail(EIO, what + ": closed");
    return fn(*h5);
  }

  const std::string path;
  const bool created;  // by this writer (takes new groups and datasets); else pwrite in place only
  const int fd;        // O_RDWR, for pwrite/pread/fdatasync; open until the destructor
  // Level 2 of the lock hierarchy (docs/architecture.md), before the HDF5 lock (an in-process
  // WriteFile takes it): serializes the calls of h5, and its closing. Held while the writer
  // process answers (at most hdf5_timeout): only this file's calls wait for it.
  std::mutex mu;
  std::unique_ptr<WriteFile> h5;    // empty for pwrite-only files and once closed
  std::atomic<bool> closed{false};  // set under mu; read from any thread
};

namespace {

void pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(errno, what + ": pwrite at " + std::to_string(off) + ": " + std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

void pread_all(int fd, uint8_t* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(errno, what + ": pread at " + std::to_string(off) + ": " + std::strerror(errno));
    }
    if (r == 0) {  // beyond the end of a sparse file: never written
      std::memset(p, 0, n);
      return;
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

// shape x itemsize, saturating at UINT64_MAX (no wrap: a caller compares it with a limit).
uint64_t saturating_bytes(const Shape& shape, uint64_t itemsize) {
  uint64_t n = itemsize;
  for (uint64_t x : shape) {
    if (__builtin_mul_overflow(n, x, &n)) return UINT64_MAX;
  }
  return n;
}

// About 1 MiB chunks: inner dimensions kept whole as long as possible.
Shape auto_chunks(const Shape& shape, size_t itemsize) {
  Shape c = shape;
  for (auto& x : c) x = std::max<uint64_t>(x, 1);
  const uint64_t target = 1u << 20;
  for (size_t k = 0; k < c.size(); ++k) {
    while (saturating_bytes(c, itemsize) > target && c[k] > 1) c[k] = (c[k] + 1) / 2;
  }
  return c;
}

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

// ---- contiguous ---------------------------------------------------------------------------------

class ContiguousWriter final : public DatasetWriter {
 public:
  ContiguousWriter(std::shared_ptr<Writer::FileState> f, std::string what, uint64_t addr,
                   uint64_t size)
      : f_(std::move(f)), what_(std::move(what)), addr_(addr), size_(size) {}
  uint64_t nbytes() const override { return size_; }
  std::string describe() const override {
    return what_ + " (contiguous at file offset " + std::to_string(addr_) + ")";
  }
  void write(uint64_t off, const uint8_t* p, size_t n) override {
    if (off > size_ || n > size_ - off) fail(EFBIG, what_ + ": write past the end of the data");
    if (f_->closed) fail(EIO, what_ + ": the writer is closed");
    pwrite_all(f_->fd, p, n, addr_ + off, what_);
  }
  void read(uint64_t off, size_t n, uint8_t* out) override {
    if (off > size_ || n > size_ - off) fail(EINVAL, what_ + ": read past the end of the data");
    pread_all(f_->fd, out, n, addr_ + off, what_);
  }
  void flush(bool durable) override {
    if (durable && !f_->closed && ::fdatasync(f_->fd) != 0) {
      fail(errno, what_ + ": fdatasync: " + std::strerror(errno));
    }
  }

 private:
  std::shared_ptr<Writer::FileState> f_;
  std::string what_;
  uint64_t addr_, size_;
};

// ---- chunked ------------------------------------------------------------------------------------

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

void ensure_size(int fd, uint64_t size, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail(errno, what + ": fstat: " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < size && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    fail(errno, what + ": ftruncate: " + std::strerror(errno));
  }
}

}  // namespace

namespace detail {

TypeStr parse_typestr(const std::string& ts) {
  auto bad = [&](const char* why) { fail(EINVAL, "unsupported dtype '" + ts + "'" + why); };
  if (ts.size() < 3 || ts.size() > 12) bad("");
  const char order = ts[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') bad("");
  for (size_t i = 2; i < ts.size(); ++i) {
    if (ts[i] < '0' || ts[i] > '9') bad("");
  }
  TypeStr t;
  t.kind = ts[1];
  t.big_endian = order == '>';
  t.size = std::stoull(ts.substr(2));  // at most 10 digits: no overflow
  const size_t n = t.size;
  switch (t.kind) {
    case 'u':
    case 'i':
      if (n != 1 && n != 2 && n != 4 && n != 8) bad("");
      break;
    case 'f':
      if (n != 4 && n != 8) bad(" (float32 and float64 only)");
      break;
    case 'c':
      if (n != 8 && n != 16) bad("");
      break;
    case 'b':
      if (n != 1) bad("");
      break;
    case 'S':
      // An HDF5 type size is a 32-bit field.
      if (n == 0 || n > 0xffffffffull) bad("");
      break;
    default:
      bad(" (integers, float32/64, bool, complex, bytes)");
  }
  return t;
}

}  // namespace detail

DatasetPlan plan_dataset(const NewDataset& spec) {
  const detail::TypeStr ts = detail::parse_typestr(spec.typestr);
  DatasetPlan p;
  p.itemsize = ts.size;
  const size_t rank = spec.shape.size();
  if (rank > 32) fail(EINVAL, "at most 32 dimensions (HDF5's limit)");
  // Byte offsets in files and in the .npy are signed 64-bit.
  p.nbytes = saturating_bytes(spec.shape, p.itemsize);
  if (p.nbytes > uint64_t(INT64_MAX)) fail(EFBIG, "the array would exceed 2^63 bytes");
  p.compression = spec.compression == "none" ? "" : spec.compression;
  bool chunked = !spec.chunks.empty() || !p.compression.empty();
  if (rank == 0 || p.nbytes == 0) chunked = false;  // scalars and empty arrays: contiguous
  if (!chunked) return p;
  if (!spec.chunks.empty()) {
    if (spec.chunks.size() != rank) fail(EINVAL, "chunks must have one entry per dimension");
    p.chunks = spec.chunks;
    for (size_t k = 0; k < rank; ++k) {
      if (p.chunks[k] == 0) fail(EINVAL, "chunk dimensions must be >= 1");
      p.chunks[k] = std::min(p.chunks[k], spec.shape[k]);
    }
  } else {
    p.chunks = auto_chunks(spec.shape, p.itemsize);
  }
  // HDF5 keeps a chunk's size in 32 bits.
  p.chunk_bytes = saturating_bytes(p.chunks, p.itemsize);
  if (p.chunk_bytes >= (4ull << 30)) fail(EINVAL, "chunks must be smaller than 4 GiB");
  p.pipeline = filters::write_pipeline(p.compression, spec.level, spec.shuffle, p.itemsize, p.chunk_bytes);
  return p;
}

bool WriteBudget::try_take(uint64_t n) {
  uint64_t cur = used_.load();
  do {
    if (n > limit_ || cur > limit_ - n) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n));
  return true;
}

Writer::Writer(H5Files& files, WriterOptions opts)
    : engine_(files.engine()),
      h5files_(files),
      make_write_file_(write_file_factory(files.helper_options())),
      opts_(std::move(opts)),
      budget_(std::make_shared<WriteBudget>(opts_.pending_budget)) {}

Writer::~Writer() {
  try {
    close_all();
  } catch (const std::exception& e) {
    log::error(std::string("closing written files: ") + e.what());
  }
}

void Writer::create_file(const std::string& path, const NewFileOwner* owner) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (files_.count(path)) fail(EEXIST, path + " exists");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) fail(EEXIST, path + " exists");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (closing_) fail(EIO, path + ": the writer is closed");
  }
  // Two creates of one path: H5Fcreate's O_EXCL lets one win, the other gets EEXIST.
  dev_t dev = 0;
  ino_t ino = 0;
  std::unique_ptr<WriteFile> h5 = make_write_file_(path, dev, ino);
  // The file libhdf5 created (O_EXCL), not whatever the path names by now: the directory may be
  // writable by others, who could put a symlink there meanwhile.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  struct stat mine;
  if (fd < 0 || ::fstat(fd, &mine) != 0 || mine.st_dev != dev || mine.st_ino != ino) {
    const int e = fd < 0 ? errno : EEXIST;
    if (fd >= 0) ::close(fd);
    try {
      h5->close();
    } catch (const std::exception&) {
    }
    fail(e, "cannot open " + path + " (the file created): " + std::strerror(e));
  }
  const pid_t pid = h5->pid();
  auto fs = std::make_shared<FileState>(path, std::move(h5), fd);
  if (owner) {
    // Belongs to the user who asked for it, with the mode asked for (the kernel applied the
    // user's umask): as root, the daemon gives it away; as another user it cannot, and the
    // mount shows the file's real owner (it follows the file, vfs/tree.h current_meta).
    if (::geteuid() == 0 && ::fchown(fs->fd, owner->uid, owner->gid) != 0) {
      log::warn(path + ": cannot give it to uid " + std::to_string(owner->uid) + ": " + std::strerror(errno));
    }
    if (::fchmod(fs->fd, owner->mode & 0666) != 0) {
      log::warn(path + ": cannot set its mode: " + std::string(std::strerror(errno)));
    }
  }
  log::info("created HDF5 file " + path + (pid > 0 ? " (HDF5 writer process pid " + std::to_string(pid) + ")" : ""));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!closing_) {
      files_[path] = fs;
      return;
    }
  }
  fs->close();  // close_all started meanwhile and did not see it
  fail(EIO, path + ": the writer is closed");
}

bool Writer::owns(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it != files_.end() && it->second->created && !it->second->closed;
}

pid_t Writer::writer_pid(const std::string& path) {
  std::shared_ptr<FileState> fs;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return 0;
    fs = it->second;
  }
  std::lock_guard<std::mutex> g(fs->mu);  // level 2: after mu_ (level 4) is let go
  return fs->h5 && !fs->closed ? fs->h5->pid() : 0;
}

std::shared_ptr<Writer::FileState> Writer::file_state(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  if (closing_ || (it != files_.end() && it->second->closed)) fail(EIO, path + ": closed");
  if (it == files_.end() || !it->second->created) {
    fail(EPERM, path + ": new groups and datasets only in files created through this mount");
  }
  return it->second;
}

void Writer::create_group(const std::string& file, const std::string& group_path) {
  auto fs = file_state(file);
  fs->with_file(file + ":" + group_path, [&](WriteFile& h5) {
    if (h5.exists(group_path)) fail(EEXIST, file + ":" + group_path + " exists");
    h5.create_group(group_path);
  });
}

DatasetWriterPtr Writer::create_dataset(const std::string& file, const std::string& path,
                                        const NewDataset& spec) {
  const std::string what = file + ":" + path;
  auto fs = file_state(file);
  DatasetPlan plan;
  try {
    plan = plan_dataset(spec);
  } catch (const Error& e) {
    fail(e.code(), what + ": " + e.what());
  }
  const bool chunked = !plan.chunks.empty();
  if (chunked) {
    if (plan.chunk_bytes > budget_->limit()) {
      const std::string msg = what + ": a chunk of " + std::to_string(plan.chunk_bytes) +
                              " bytes does not fit write_buffer=" + std::to_string(budget_->limit()) +
                              " (chunks written in part are held there): use smaller chunks or a larger write_buffer";
      log::error(msg);
      fail(EFBIG, msg);
    }
    if (plan.compression == "zstd") {
      // Readable where the zstd HDF5 plugin (filter 32015) is installed; Debian 12 ships none
      // (its h5py and hdf5plugin cannot read these files): say so once per mount.
      static std::once_flag warned;
      std::call_once(warned, [&] {
        log::warn(what + ": written with zstd (HDF5 filter 32015): other programs need the zstd HDF5 "
                  "filter plugin to read it (Debian 12's h5py and hdf5plugin have none; gzip, blosc and "
                  "lz4 are readable there)");
      });
    }
  }
  const uint64_t addr = fs->with_file(what, [&](WriteFile& h5) {
    if (h5.exists(path)) fail(EEXIST, what + " exists");
    return h5.create_dataset(path, spec);
  });
  DatasetWriterPtr w;
  if (chunked) {
    w = std::make_shared<ChunkedWriter>(engine_, fs, what, path, spec.shape, plan.chunks, plan.itemsize,
                                        plan.pipeline, budget_);
  } else {
    // From the writer process: checked before bytes are written there (past the superblock,
    // the data's end within signed 64-bit file offsets).
    if (plan.nbytes && (addr == 0 || addr > uint64_t(INT64_MAX) - plan.nbytes))
      fail(EIO, what + ": implausible file offset " + std::to_string(addr) + " from the HDF5 writer process");
    // A killed daemon must leave a file whose end covers the dataset (else "truncated file").
    ensure_size(fs->fd, addr + plan.nbytes, what);
    w = std::make_shared<ContiguousWriter>(fs, what, addr, plan.nbytes);
  }
  log::info("created dataset " + w->describe());
  std::lock_guard<std::mutex> g(mu_);
  // close_all started meanwhile (its snapshot did not see this one): as any create after it.
  if (closing_) fail(EIO, what + ": the writer is closed");
  datasets_.push_back(w);
  return w;
}

DatasetWriterPtr Writer::open_existing(const std::string& file, const std::string& path) {
  const std::string what = file + ":" + path;
  if (!opts_.write_existing) fail(EPERM, what + ": existing datasets are read-only (mount with -o write_existing)");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = existing_.find(what); it != existing_.end()) return it->second;
  }
  auto h5f = h5files_.open(file);
  auto info = h5f->dataset_info(path);
  const StorageInfo st = h5f->storage_info(path);
  if (info->layout != "contiguous" || !info->filters.empty() || st.external || st.library_only ||
      st.contiguous_addr == fmt::kUndefAddr) {
    fail(EPERM, what + ": only allocated, uncompressed contiguous datasets can be written in place (" +
                    info->layout + ")");
  }
  const uint64_t nbytes = product(info->shape) * info->dtype.itemsize;
  std::lock_guard<std::mutex> g(mu_);
  if (closing_) fail(EIO, what + ": the writer is closed");
  if (auto it = existing_.find(what); it != existing_.end()) return it->second;
  std::shared_ptr<FileState> fs;
  if (auto it = files_.find(file); it != files_.end()) {
    fs = it->second;
  } else {
    const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail(errno, "cannot open " + file + " for writing: " + std::strerror(errno));
    fs = std::make_shared<FileState>(file, nullptr, fd);
    files_[file] = fs;
  }
  auto w = std::make_shared<ContiguousWriter>(fs, what, st.contiguous_addr, nbytes);
  existing_[what] = w;
  log::info("writing in place: " + w->describe());
  return w;
}

void Writer::snapshot(std::vector<DatasetWriterPtr>& ds, std::vector<std::shared_ptr<FileState>>& files) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& w : datasets_) {
    if (auto p = w.lock()) ds.push_back(p);
  }
  for (auto& [p, f] : files_) files.push_back(f);
}

void Writer::flush_all() {
  std::vector<DatasetWriterPtr> ds;
  std::vector<std::shared_ptr<FileState>> files;
  snapshot(ds, files);
  for (auto& w : ds) w->flush(false);
  // Every file, even when one fails (its writer process died): the first error is reported.
  std::exception_ptr first;
  for (auto& f : files) {
    try {
      {
        std::lock_guard<std::mutex> g(f->mu);
        if (f->closed) continue;
        if (f->h5) f->h5->flush();
      }
      if (f->fd >= 0) ::fdatasync(f->fd);
    } catch (const std::exception&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Writer::close_all() {
  std::vector<DatasetWriterPtr> ds;
  std::vector<std::shared_ptr<FileState>> files;
  std::string first_error;
  {
    // No new files, groups or datasets from here on: create_* check closing_ again when they
    // register what they made, so the snapshot below holds every dataset writer of these files.
    std::lock_guard<std::mutex> g(mu_);
    closing_ = true;
  }
  snapshot(ds, files);
  for (auto& w : ds) {
    try {
      if (auto* c = dynamic_cast<ChunkedWriter*>(w.get())) c->close();
      else w->flush(false);
    } catch (const std::exception& e) {
      if (!already_logged(e)) log::error(e.what());
      if (first_error.empty()) first_error = e.what();
    }
  }
  for (auto& f : files) {
    const std::string e = f->close();  // logged there
    if (!e.empty() && first_error.empty()) first_error = e;
  }
  if (!first_error.empty()) throw Error(EIO, first_error, true);  // each was logged above
}

}  // namespace h5d

