// ChunkedArray: the chunk map read from the file itself (fmt/), each touched chunk read and
// decoded on the pool through the decoded-chunk cache.
#include "core/array/dataset.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/array/dataset_array.h"
#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/error.h"
#include "core/filters/filters.h"
#include "core/log.h"

// In h5d::detail, beside the base class and file runs it is built from (dataset_array.h).
namespace h5d::detail {
namespace {

// A source file whose prefetch hint (the chunk index's next nodes) is served by reading the
// ranges at once on the engine's pool, so that the index parser's reads of them that follow,
// one after another, find them in the page cache: a cold v1 B-tree of 1,200 chunks took 80 ms
// of serial round trips at 2 ms before its first byte, on emulated GPFS. Waits for the reads
// under ChunkedArray::ctx_mu_ (level 4): its tasks take no lock but the descriptor cache's.
class ParallelSource final : public fmt::ByteSource {
 public:
  ParallelSource(SourceIo& io, const OpenFd& fd) : io_(io), fd_(fd) {}
  void read_at(uint64_t off, void* buf, size_t n) const override { io_.read_structure(fd_, buf, n, off); }
  uint64_t size() const override { return fd_.size(); }
  std::string name() const override { return fd_.name(); }
  void prefetch(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const override {
    io_.read_ahead_ranges(fd_, ranges);
  }

 private:
  SourceIo& io_;
  const OpenFd& fd_;
};

// The times of one chunk's decoding (its read, the wait for a CPU slot, the decode itself) and,
// once decoded, its counts: chunks_decoded, bytes_decoded and decode_ns (the CPU time of
// decoding, inside the slot: with many I/O workers the time waiting for the source or for a slot
// says nothing about the cores). A chunk that fails counts nothing.
class DecodeTimes {
 public:
  using Clock = std::chrono::steady_clock;
  DecodeTimes(Stats& st, uint64_t bytes) : st_(st), bytes_(bytes), t0_(Clock::now()) {}
  void read() { t_read_ = Clock::now(); }
  void slot() { t_slot_ = Clock::now(); }
  void decoded() {
    t_done_ = Clock::now();
    st_.chunks_decoded.fetch_add(1, std::memory_order_relaxed);
    st_.bytes_decoded.fetch_add(bytes_, std::memory_order_relaxed);
    st_.decode_ns.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t_done_ - t_slot_).count()),
                            std::memory_order_relaxed);
  }
  std::string read_ms() const { return ms(t_read_ - t0_); }
  std::string decode_ms() const { return ms(t_done_ - t_read_); }  // the slot's wait included

 private:
  static std::string ms(Clock::duration d) { return std::to_string(std::chrono::duration<double, std::milli>(d).count()); }
  Stats& st_;
  uint64_t bytes_;
  Clock::time_point t0_, t_read_, t_slot_, t_done_;
};

std::string coords_str(const Shape& c) {
  std::string s = "(";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? "," : "") + std::to_string(c[i]);
  return s + ")";
}

class ChunkedArray final : public DatasetArray {
 public:
  ChunkedArray(Engine& e, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st)
      : DatasetArray(e, std::move(info), st.file_id), st_(st), array_id_(ChunkCache::new_array_id()) {
    ds_rank_ = st.ds_rank;
    chunk_ext_ = info_->chunks;  // chunk dims over the dataspace, then the folded array dims
    for (size_t k = ds_rank_; k < info_->shape.size(); ++k) chunk_ext_.push_back(info_->shape[k]);
    // Checked, never wrapped: one decoded chunk is allocated at this size.
    unsigned __int128 cb = info_->dtype.itemsize;
    for (auto c : chunk_ext_) cb = cb * c > kMaxChunkBytes ? kMaxChunkBytes + 1 : cb * c;
    chunk_bytes_ = static_cast<uint64_t>(cb);
    filtered_ = !info_->filters.empty();
    // The longest run of a chunk's bytes that is contiguous in the file and in the array: the
    // axes the chunk spans whole, from the last, times its extent along the first it does not.
    unsigned __int128 run = info_->dtype.itemsize;
    for (size_t k = chunk_ext_.size(); k-- > 0;) {
      run *= std::min<uint64_t>(chunk_ext_[k], info_->shape[k]);
      if (chunk_ext_[k] != info_->shape[k] || run > kMaxChunkBytes) break;
    }
    narrow_ = run < chunk_bytes_ && run < SourceIo::kMinRequest;
  }

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    const ChunkContext& ctx = context();
    // Unfiltered chunks become byte runs gathered across chunks, so neighbours in the file
    // merge into large preads straight into the destination.
    std::vector<Run> runs;
    std::vector<ChunkJob> jobs;  // chunks read whole through the decoded-chunk cache
    for_each_chunk(r, [&](const Shape& cc, uint64_t lin, const Region& sub) {
      DestView d = dst;
      for (size_t k = 0; k < sub.start.size(); ++k)
        d.base += static_cast<int64_t>(sub.start[k] - r.start[k]) * dst.strides[k];
      Region in_chunk = sub;
      for (size_t k = 0; k < ds_rank_; ++k) in_chunk.start[k] -= cc[k] * chunk_ext_[k];
      const fmt::ChunkLoc* loc = ctx.map.find(lin);
      if (!loc) {
        auto fill = info_->fill_value;
        plan.add([in_chunk, d, fill] { fill_region(in_chunk.count, fill, d.base, d.strides); });
        return;
      }
      try {
        check_in_file(st_.file_id, info_->file, loc->addr, loc->size, what_ + ": chunk " + coords_str(cc));
        check_chunk(ctx, cc, lin, *loc);
      } catch (...) {
        rethrow_at(Place{info_->file, info_->path, coords_str(cc)});
      }
      if (!through_cache(cc, *loc)) {
        collect_runs(loc->addr, chunk_ext_, dtype().itemsize, in_chunk, d, runs);
        return;
      }
      jobs.push_back(job(cc, lin, *loc, plan.request, /*prefetch=*/false));
      jobs.back().deliver = [this, in_chunk, d, key = jobs.back().key, to_end = reaches_chunk_end(cc, in_chunk)](
                                const ChunkBytes& bytes) {
        copy_region(in_chunk.count, dtype().itemsize, bytes->data() + offset_in_chunk(in_chunk.start),
                    c_strides(chunk_ext_, dtype().itemsize), d.base, d.strides);
        if (to_end) engine_.cache().consumed(key);  // a reader going forward is done with it
      };
    });
    engine_.io().plan_chunks(source_, std::move(jobs), plan, /*prefetch=*/false);
    if (!runs.empty()) engine_.io().plan_runs(source_, runs, plan);
    if (log::debug_enabled()) log::debug("read " + what_ + ": direct (chunked, " + info_->chunk_index + ")");
  }

  // Chunks as wide as the array's rows hold rows [i * c0, (i + 1) * c0) as one block of bytes:
  // those stored unfiltered and sound (the checks of plan()) are runs of the file.
  bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const override {
    const Shape& s = shape();
    if (s.empty() || ds_rank_ == 0 || off > nbytes() || len > nbytes() - off) return false;
    for (size_t k = 1; k < s.size(); ++k)
      if (chunk_ext_[k] != s[k]) return false;
    const uint64_t cbytes = chunk_bytes_;
    if (cbytes == 0 || cbytes > kMaxChunkBytes) return false;
    const ChunkContext& ctx = context();
    std::shared_ptr<const OpenFd> fd;
    const size_t mark = out.size();
    Shape cc(ds_rank_, 0);
    for (uint64_t pos = off, end = off + len; pos < end;) {
      cc[0] = pos / cbytes;
      const uint64_t lin = ctx.map.linear(cc.data());
      const fmt::ChunkLoc* loc = ctx.map.find(lin);
      const uint64_t in = pos - cc[0] * cbytes, n = std::min(end - pos, cbytes - in);
      const uint64_t size = static_cast<uint64_t>(st_.file_id.size);
      if (!loc || needs_decode(cc, *loc) || !chunk_ok(ctx, cc, lin, *loc) || st_.file_id.ino == 0 ||
          loc->addr > size || loc->size > size - loc->addr) {
        out.resize(mark);
        return false;
      }
      if (!fd) fd = engine_.io().storage().open(*source_);
      append_run(out, fd, loc->addr + in, n);
      pos += n;
    }
    return true;
  }

  void source_files(std::vector<SourceFile>& out, size_t) const override { out.push_back({info_->file, st_.file_id}); }

  // The chunk index, then every chunk's record against the file and the index (the checks of
  // plan(), without reading a chunk).
  std::string damage() const override {
    const ChunkContext* ctx = nullptr;
    try {
      ctx = &context();
    } catch (const std::exception& e) {
      return e.what();
    }
    uint64_t bad = 0, past = 0;
    std::string first;
    const uint64_t size = static_cast<uint64_t>(st_.file_id.size);
    ctx->map.for_each([&](uint64_t lin, const fmt::ChunkLoc& loc) {
      if (st_.file_id.ino != 0 && (loc.addr > size || loc.size > size - loc.addr)) {
        ++past;
        return;
      }
      Shape cc(ds_rank_);
      uint64_t rest = lin;
      for (size_t k = ds_rank_; k-- > 0;) {
        cc[k] = rest % ctx->map.grid()[k];
        rest /= ctx->map.grid()[k];
      }
      const std::string why = chunk_problem(*ctx, cc, lin, loc);
      if (!why.empty() && bad++ == 0) first = "chunk " + coords_str(cc) + ": " + why;
    });
    std::string out;
    if (past) {
      uint64_t stored = 0;
      try {
        stored = fmt::read_stored_end(*engine_.io().storage().open(*source_));
      } catch (const std::exception&) {
      }
      out = std::to_string(past) + " of " + std::to_string(ctx->map.allocated()) +
            " chunks lie past the end of the file (" +
            (stored > size ? fmt::truncated_message(size, stored) : std::to_string(size) + " bytes") + ")";
    }
    if (bad) out += (out.empty() ? "" : "; ") + std::to_string(bad) + " chunk record(s) damaged: " + first;
    return out;
  }

  void plan_prefetch(const Region& r, ReadPlan& plan) const override {
    if (r.empty()) return;
    const ChunkContext& ctx = context();
    std::vector<Run> runs;  // chunks stored as they are read: read into the source's page cache
    std::vector<ChunkJob> jobs;
    for_each_chunk(r, [&](const Shape& cc, uint64_t lin, const Region& sub) {
      const fmt::ChunkLoc* loc = ctx.map.find(lin);
      if (!loc || !chunk_ok(ctx, cc, lin, *loc)) return;
      if (!through_cache(cc, *loc)) {
        Region in_chunk = sub;
        for (size_t k = 0; k < ds_rank_; ++k) in_chunk.start[k] -= cc[k] * chunk_ext_[k];
        runs.push_back(file_span(loc->addr, chunk_ext_, dtype().itemsize, in_chunk));
        return;
      }
      if (engine_.cache().contains(ChunkKey{array_id_, lin})) return;
      jobs.push_back(job(cc, lin, *loc, plan.request, /*prefetch=*/true));
    });
    engine_.io().plan_chunks(source_, std::move(jobs), plan, /*prefetch=*/true);
    engine_.io().plan_readahead(source_, std::move(runs), plan);
  }

  // The chunk's run of C-order bytes around `off`: along the last axis the chunk does not span
  // whole (the axes after it are whole in the chunk), the chunk's extent, the earlier axes fixed.
  ByteSpan decode_span(uint64_t off) const override {
    const Shape& sh = info_->shape;
    const uint64_t isz = dtype().itemsize;
    if (!filtered_ || ds_rank_ == 0 || isz == 0 || off >= nbytes()) return {};
    size_t j = ds_rank_;  // the last partial axis; ds_rank_: every axis whole (one chunk)
    for (size_t k = ds_rank_; k-- > 0;) {
      if (chunk_ext_[k] < sh[k]) {
        j = k;
        break;
      }
    }
    if (j == ds_rank_) return {0, nbytes()};
    uint64_t inner = isz;  // bytes of one step along axis j
    for (size_t k = j + 1; k < sh.size(); ++k) inner *= sh[k];
    const uint64_t outer = inner * sh[j];  // bytes of one step along axis j - 1
    const uint64_t base = off / outer * outer;
    const uint64_t c = (off - base) / inner / chunk_ext_[j] * chunk_ext_[j];
    const uint64_t n = std::min(chunk_ext_[j], sh[j] - c);
    return {base + c * inner, base + (c + n) * inner};
  }
  bool decodes() const override { return filtered_ && ds_rank_ > 0 && nbytes() > 0; }

  bool decoded(const Region& r) const override {
    if (r.empty() || !filtered_) return false;
    const ChunkContext& ctx = context();
    bool all = true;
    for_each_chunk(r, [&](const Shape& cc, uint64_t lin, const Region&) {
      if (!all) return;
      const fmt::ChunkLoc* loc = ctx.map.find(lin);
      all = loc && needs_decode(cc, *loc) && engine_.cache().ready(ChunkKey{array_id_, lin});
    });
    return all;
  }

  // Exposed for tests and benchmarks: the chunk map (loads it on first use).
  const fmt::ChunkMap& chunk_map() const { return context().map; }

 private:
  struct ChunkContext {
    fmt::ChunkMap map;
    fmt::LayoutInfo layout;
  };

  const ChunkContext& context() const {
    std::lock_guard<std::mutex> lk(ctx_mu_);
    if (!ctx_) {
      auto ctx = std::make_unique<ChunkContext>();
      try {
        if (chunk_bytes_ > kMaxChunkBytes)
          fail_data("chunks of more than " + std::to_string(kMaxChunkBytes) +
                    " bytes (libhdf5 writes none of 4 GiB or more): a damaged chunk shape");
        auto fd = engine_.io().storage().open(*source_);
        const ParallelSource src(engine_.io(), *fd);
        ctx->layout = fmt::read_layout(*fd, st_.geo, st_.ohdr_addr);
        Shape dims(info_->shape.data(), info_->shape.data() + ds_rank_);
        Shape maxdims(info_->maxshape.data(), info_->maxshape.data() + ds_rank_);
        const uint64_t h5_elem_size = chunk_bytes_ / std::max<uint64_t>(1, product(info_->chunks));
        // A truncated file keeps the records of its chunks past the cut: they fail alone, when
        // read (check_in_file), and the chunks before the cut are served.
        fmt::FileGeometry geo = st_.geo;
        geo.stored_end = fmt::read_stored_end(*fd);
        ctx->map = fmt::read_chunk_map(src, geo, ctx->layout, dims, maxdims, h5_elem_size, filtered_);
        engine_.io().storage().recheck(*source_);
        if (ctx->map.beyond_extent)
          log::warn(what_ + ": chunk index: " + std::to_string(ctx->map.beyond_extent) +
                    " chunk record(s) beyond the current extent (inside the maximum one) ignored, as libhdf5 does");
        if (ctx->map.damaged())
          log::warn(what_ + ": chunk index: " + std::to_string(ctx->map.damaged()) +
                    " chunk(s) overlap other chunks or index nodes: reading them is EIO");
      } catch (...) {
        rethrow_with_context(what_ + ": chunk index", Place{info_->file, info_->path, ""});
      }
      ctx_ = std::move(ctx);
    }
    return *ctx_;
  }

  template <class Fn>
  void for_each_chunk(const Region& r, Fn&& fn) const {
    const size_t rank = ds_rank_;
    Shape c0(rank), c1(rank);
    for (size_t k = 0; k < rank; ++k) {
      c0[k] = r.start[k] / chunk_ext_[k];
      c1[k] = (r.start[k] + r.count[k] - 1) / chunk_ext_[k];
    }
    const fmt::ChunkMap& map = context().map;
    Shape cc = c0;
    for (;;) {
      Region chunk;
      chunk.start.resize(r.start.size());
      chunk.count.resize(r.start.size());
      for (size_t k = 0; k < r.start.size(); ++k) {
        if (k < rank) {
          chunk.start[k] = cc[k] * chunk_ext_[k];
          chunk.count[k] = chunk_ext_[k];
        } else {
          chunk.start[k] = 0;
          chunk.count[k] = info_->shape[k];
        }
      }
      Region sub;
      if (intersect(chunk, r, sub)) fn(cc, rank ? map.linear(cc.data()) : 0, sub);
      size_t k = rank;
      bool done = true;
      while (k > 0) {
        --k;
        if (++cc[k] <= c1[k]) {
          done = false;
          break;
        }
        cc[k] = c0[k];
      }
      if (done) return;
    }
  }

  // Whether a read of `in_chunk` (coordinates within chunk `cc`) includes the chunk's last
  // element inside the dataset: a reader going forward is done with the chunk.
  bool reaches_chunk_end(const Shape& cc, const Region& in_chunk) const {
    for (size_t k = 0; k < in_chunk.start.size(); ++k) {
      const uint64_t valid = k < ds_rank_ ? std::min(chunk_ext_[k], info_->shape[k] - cc[k] * chunk_ext_[k])
                                          : info_->shape[k];
      if (in_chunk.start[k] + in_chunk.count[k] != valid) return false;
    }
    return true;
  }

  bool is_partial_edge(const Shape& cc) const {
    for (size_t k = 0; k < ds_rank_; ++k)
      if ((cc[k] + 1) * chunk_ext_[k] > info_->shape[k]) return true;
    return false;
  }

  // Why chunk `lin` must not be read, or "": the index marked it damaged (it overlaps another
  // chunk or an index node), or it is stored unfiltered (read as it lies in the file) in other
  // than exactly the chunk's bytes: a short record would serve the file bytes after it, a
  // longer one means the record is wrong.
  std::string chunk_problem(const ChunkContext& ctx, const Shape& cc, uint64_t lin, const fmt::ChunkLoc& loc) const {
    if (const std::string* why = ctx.map.damage(lin)) return *why;
    if (!needs_decode(cc, loc) && loc.size != chunk_bytes_)
      return "stored unfiltered (filter mask " + std::to_string(loc.filter_mask) + ") in " + std::to_string(loc.size) +
             " bytes, but the chunk holds " + std::to_string(chunk_bytes_) + ": its index record is damaged";
    return {};
  }
  bool chunk_ok(const ChunkContext& ctx, const Shape& cc, uint64_t lin, const fmt::ChunkLoc& loc) const {
    return chunk_problem(ctx, cc, lin, loc).empty();
  }
  void check_chunk(const ChunkContext& ctx, const Shape& cc, uint64_t lin, const fmt::ChunkLoc& loc) const {
    const std::string why = chunk_problem(ctx, cc, lin, loc);
    if (!why.empty())
      fail_data(what_ + ": chunk " + coords_str(cc) + " at file offset " + std::to_string(loc.addr) + ": " + why);
  }

  // Unfiltered chunks (no pipeline, every filter skipped, or an unfiltered partial edge chunk)
  // are read straight from the file.
  bool needs_decode(const Shape& cc, const fmt::ChunkLoc& loc) const {
    if (!filtered_) return false;
    const uint32_t all = info_->filters.size() >= 32 ? ~0u : ((1u << info_->filters.size()) - 1);
    if ((loc.filter_mask & all) == all) return false;
    if (context().layout.dont_filter_partial_edge_chunks && is_partial_edge(cc)) return false;
    return true;
  }

  // Chunks read whole into the decoded-chunk cache and copied out from there: compressed ones,
  // and (`narrow_`) unfiltered ones whose runs are shorter than the smallest request worth making
  // (SourceIo::kMinRequest, the kernel's default read-ahead) and than the chunk. h5py's own chunk
  // shape for 512x128 frames, (75, 32, 16), has runs of 32 bytes: a read of 8 frames read 8 KiB
  // of each of 128 chunks, the next read the next 8 KiB, 11,000 requests for a 157 MB array
  // where h5py, reading chunks whole, made 1,300 (cold, 0.5x its speed).
  bool through_cache(const Shape& cc, const fmt::ChunkLoc& loc) const { return narrow_ || needs_decode(cc, loc); }

  uint64_t offset_in_chunk(const Shape& start) const {
    auto st = c_strides(chunk_ext_, dtype().itemsize);
    uint64_t off = 0;
    for (size_t k = 0; k < start.size(); ++k) off += start[k] * static_cast<uint64_t>(st[k]);
    return off;
  }

  // Chunk `cc` (number `lin`, stored at `loc`) as source I/O reads it: its cache entry, and its
  // decoding (a reader's chunk takes the next CPU slot; `request`: the read's request size, in
  // which a large chunk the page cache lacks is read in pieces). The caller adds the delivery.
  ChunkJob job(const Shape& cc, uint64_t lin, const fmt::ChunkLoc& loc, uint64_t request, bool prefetch) const {
    ChunkJob j;
    j.addr = loc.addr;
    j.size = loc.size;
    j.key = ChunkKey{array_id_, lin};
    // A decode-ahead job runs when nobody waits for it: it holds the array.
    std::shared_ptr<const DatasetArray> keep = prefetch ? weak_from_this().lock() : nullptr;
    j.decode = [this, keep, cc, loc, request, urgent = !prefetch](const uint8_t* stored) {
      return decode(cc, loc, stored, urgent, request);
    };
    return j;
  }

  // Reads (unless `stored` holds its bytes already) and decodes one chunk; the decoding holds
  // one of the engine's CPU slots.
  ChunkBytes decode(const Shape& cc, const fmt::ChunkLoc& loc, const uint8_t* stored, bool urgent,
                    uint64_t request) const {
    try {
      if (loc.size > (uint64_t(1) << 34)) fail_data("stored chunk size " + std::to_string(loc.size) + " is implausible");
      DecodeTimes times(engine_.stats(), chunk_bytes_);
      // Each pool worker keeps its stored-chunk buffer (fresh pages cost a fault and a zeroed
      // page each on every read otherwise), up to kKeepStored: the pool has many workers.
      thread_local std::vector<uint8_t> in;
      struct Trim {
        ~Trim() {
          if (in.capacity() > kKeepStored) std::vector<uint8_t>().swap(in);
        }
      } trim;
      if (!stored) {
        in.resize(loc.size);
        engine_.io().read_stored(*source_, in.data(), loc.size, loc.addr, request);
      }
      times.read();
      auto out = engine_.buffers().get(chunk_bytes_);
      if (!needs_decode(cc, loc)) {  // a narrow chunk stored as it is read: its bytes as they are
        if (loc.size != chunk_bytes_)
          fail_data("stored unfiltered in " + std::to_string(loc.size) + " bytes, but the chunk holds " +
                    std::to_string(chunk_bytes_));
        out->resize(chunk_bytes_);
        std::memcpy(out->data(), stored ? stored : in.data(), chunk_bytes_);
        times.slot();
      } else {
        CpuGate::Slot cpu(engine_.cpu(), urgent);
        times.slot();
        if (stored)  // decoded from the merged request's buffer, not copied out of it first
          decode_chunk(info_->filters, loc.filter_mask, info_->dtype.itemsize, stored, loc.size, chunk_bytes_, *out);
        else
          decode_chunk(info_->filters, loc.filter_mask, info_->dtype.itemsize, in, chunk_bytes_, *out);
      }
      times.decoded();
      if (log::debug_enabled())
        log::debug("chunk " + coords_str(cc) + " of " + what_ + ": " +
                   (stored ? std::string("in a merged request") : "read in " + times.read_ms() + " ms") +
                   ", decoded in " + times.decode_ms() + " ms (waiting for a CPU slot included)");
      return out;
    } catch (...) {
      rethrow_with_context(what_ + ": chunk " + coords_str(cc) + " at file offset " + std::to_string(loc.addr) +
                               " (" + std::to_string(loc.size) + " bytes)",
                           Place{info_->file, info_->path, coords_str(cc)});
    }
  }

  static constexpr uint64_t kKeepStored = 4ull << 20;

  // HDF5 chunks are below 4 GiB (H5Pset_chunk; the v1 B-tree stores their size in 32 bits).
  static constexpr uint64_t kMaxChunkBytes = (uint64_t(1) << 32) - 1;
  StorageInfo st_;
  uint64_t array_id_;
  size_t ds_rank_ = 0;
  Shape chunk_ext_;
  uint64_t chunk_bytes_ = 0;
  bool filtered_ = false;
  bool narrow_ = false;  // through_cache
  // Lock level 4 (docs/architecture.md): after the HDF5 lock, before the fd cache. Guards ctx_ creation.
  mutable std::mutex ctx_mu_;
  mutable std::unique_ptr<ChunkContext> ctx_;
};

}  // namespace
}  // namespace h5d::detail

namespace h5d {

ArrayPtr make_chunked_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st) {
  return std::make_shared<detail::ChunkedArray>(engine, std::move(info), st);
}

}  // namespace h5d
