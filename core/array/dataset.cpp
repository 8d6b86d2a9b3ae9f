#include "core/array/dataset.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fcntl.h>

#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/h5lib/h5lib.h"
#include "core/log.h"

namespace h5d {

namespace {

std::string coords_str(const Shape& c) {
  std::string s = "(";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? "," : "") + std::to_string(c[i]);
  return s + ")";
}

// Bytes [addr, addr + n) of a file whose size was `id.size` when its metadata was read must lie
// inside it. A truncated file (the helper opens those, h5truncated.cpp) has intact metadata
// pointing past its cut: what lies there is EIO, named, and everything before it is served.
void check_in_file(const FileIdentity& id, uint64_t addr, uint64_t n, const std::string& what) {
  if (id.ino == 0) return;  // not stat'ed: pread finds out
  const uint64_t size = static_cast<uint64_t>(id.size);
  if (addr <= size && n <= size - addr) return;
  fail_data(what + " at file offset " + std::to_string(addr) + " (" + std::to_string(n) +
            " bytes): past the end of the file (" + std::to_string(size) + " bytes: truncated?)");
}

class DatasetArray : public Array {
 public:
  DatasetArray(Engine& engine, std::shared_ptr<const DatasetInfo> info)
      : engine_(engine), info_(std::move(info)), what_(info_->file + ":" + info_->path) {}
  const Shape& shape() const override { return info_->shape; }
  const DType& dtype() const override { return info_->dtype; }
  std::string describe() const override { return what_; }

 protected:
  Engine& engine_;
  std::shared_ptr<const DatasetInfo> info_;
  std::string what_;
};

// One contiguous byte run: `n` bytes at file offset `src` go to `dst`.
struct Run {
  uint64_t src;
  uint8_t* dst;
  uint64_t n;
};

// Cuts region `r` of a C-order block of `shape` stored at file offset `addr` into runs that are
// contiguous both in the file and in `dst`.
void collect_runs(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r, const DestView& dst,
                  std::vector<Run>& runs) {
  const size_t rank = shape.size();
  if (rank == 0) {
    runs.push_back({addr, dst.base, itemsize});
    return;
  }
  const auto sst = c_strides(shape, itemsize);
  size_t inner = rank;
  uint64_t run = itemsize;
  while (inner > 0) {
    size_t k = inner - 1;
    if (dst.strides[k] != static_cast<int64_t>(run) || sst[k] != static_cast<int64_t>(run)) break;
    run *= r.count[k];
    inner = k;
  }
  if (inner == rank) {  // destination not contiguous even in its last dimension: element runs
    inner = rank - 1;
    run = itemsize;
  }
  Shape idx(inner, 0);
  const size_t n_outer = inner;
  for (;;) {
    uint64_t s = addr;
    uint8_t* d = dst.base;
    for (size_t k = 0; k < rank; ++k) s += r.start[k] * static_cast<uint64_t>(sst[k]);
    for (size_t k = 0; k < n_outer; ++k) {
      s += idx[k] * static_cast<uint64_t>(sst[k]);
      d += static_cast<int64_t>(idx[k]) * dst.strides[k];
    }
    if (inner == rank - 1 && run == itemsize && r.count[rank - 1] > 1 && dst.strides[rank - 1] != static_cast<int64_t>(itemsize)) {
      for (uint64_t i = 0; i < r.count[rank - 1]; ++i)
        runs.push_back({s + i * itemsize, d + static_cast<int64_t>(i) * dst.strides[rank - 1], itemsize});
    } else {
      if (!runs.empty() && runs.back().src + runs.back().n == s && runs.back().dst + runs.back().n == d)
        runs.back().n += run;
      else
        runs.push_back({s, d, run});
    }
    size_t k = n_outer;
    for (;;) {
      if (k == 0) return;
      --k;
      if (++idx[k] < r.count[k]) break;
      idx[k] = 0;
    }
  }
}

// Turns runs into pool tasks of about `split` bytes each (large runs are cut).
// `id` is the file the runs were computed from: a file changed since fails with ESTALE, checked
// before and after the preads.
void plan_runs(Engine& engine, const std::string& path, const FileIdentity& id, const std::string& what,
               std::vector<Run>& runs, ReadPlan& plan) {
  const uint64_t split = std::max<uint64_t>(engine.options().contiguous_split, 64 * 1024);
  std::vector<Run> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    plan.add([&engine, path, id, what, b = std::move(batch)] {
      auto fd = engine.fds().get(path, &id);
      for (const Run& r : b) {
        pread_exact(fd->fd(), r.dst, r.n, r.src, what);
        engine.stats().bytes_pread.fetch_add(r.n, std::memory_order_relaxed);
      }
      FdCache::verify(path, id);
    });
    batch.clear();
    batch_bytes = 0;
  };
  for (Run r : runs) {
    while (r.n > split) {
      flush();
      batch.push_back({r.src, r.dst, split});
      batch_bytes = split;
      flush();
      r.src += split;
      r.dst += split;
      r.n -= split;
    }
    if (batch_bytes + r.n > split) flush();
    batch.push_back(r);
    batch_bytes += r.n;
  }
  flush();
}

// The decode-ahead of bytes stored as they are read (contiguous data, unfiltered chunks): ask the
// kernel to read the file ranges of `runs` into its page cache now (posix_fadvise WILLNEED starts
// the reads and returns), so that a stream over cold data finds them there. Neighbouring runs
// are merged; one pool task for all of them.
void plan_willneed(Engine& engine, const std::string& path, const FileIdentity& id, std::vector<Run>& runs,
                   ReadPlan& plan) {
  if (runs.empty()) return;
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.src < b.src; });
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, length)
  for (const Run& r : runs) {
    if (!ranges.empty() && r.src <= ranges.back().first + ranges.back().second + 4096)
      ranges.back().second = std::max(ranges.back().second, r.src + r.n - ranges.back().first);
    else
      ranges.emplace_back(r.src, r.n);
  }
  plan.add([&engine, path, id, ranges = std::move(ranges)] {
    try {
      auto fd = engine.fds().get(path, &id);
      for (const auto& [off, len] : ranges)
        ::posix_fadvise(fd->fd(), static_cast<off_t>(off), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    } catch (const std::exception&) {
      // A read-ahead hint only: the reader's own read reports what is wrong.
    }
  });
}

// The file bytes from the first to the last element of region `r` of a C-order block of `shape`
// stored at `addr` (a read-ahead hint: for regions of whole rows exactly their bytes).
Run file_span(uint64_t addr, const Shape& shape, size_t itemsize, const Region& r) {
  const auto st = c_strides(shape, itemsize);
  uint64_t lo = addr, hi = addr + itemsize;
  for (size_t k = 0; k < shape.size(); ++k) {
    lo += r.start[k] * static_cast<uint64_t>(st[k]);
    hi += (r.start[k] + r.count[k] - 1) * static_cast<uint64_t>(st[k]);
  }
  return {lo, nullptr, hi - lo};
}

// A contiguous dataset's bytes are the `stored` bytes at `addr` (the layout message's size,
// H5Dget_storage_size). A dataspace grown beyond them (a damaged or crafted shape) would read
// the file bytes that follow, which belong to something else (libhdf5 1.10.8 returns them):
// every read of such a dataset is EIO. Wholly, not only beyond the storage: the kernel reads
// whole pages and reads ahead, so which reads of the first part would succeed is not the
// reader's to know.
class ContiguousArray final : public DatasetArray {
 public:
  ContiguousArray(Engine& e, std::shared_ptr<const DatasetInfo> info, uint64_t addr, uint64_t stored,
                  const FileIdentity& id)
      : DatasetArray(e, std::move(info)), addr_(addr), stored_(stored), file_id_(id) {}

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    if (addr_ == fmt::kUndefAddr) {  // storage never allocated: fill value
      auto fill = info_->fill_value;
      plan.add([r, dst, fill] { fill_region(r.count, fill, dst.base, dst.strides); });
      return;
    }
    if (nbytes() > stored_)
      fail_data(what_ + ": shape x itemsize (" + std::to_string(nbytes()) + " bytes) lies beyond its storage (" +
                std::to_string(stored_) + " bytes at file offset " + std::to_string(addr_) +
                "): the dataspace or the layout is damaged");
    std::vector<Run> runs;
    collect_runs(addr_, shape(), dtype().itemsize, r, dst, runs);
    for (const Run& run : runs) check_in_file(file_id_, run.src, run.n, what_ + ": bytes");
    if (log::debug_enabled()) log::debug("read " + what_ + ": direct (contiguous)");
    plan_runs(engine_, info_->file, file_id_, what_, runs, plan);
  }

  void plan_prefetch(const Region& r, ReadPlan& plan) const override {
    if (r.empty() || addr_ == fmt::kUndefAddr) return;
    if (nbytes() > stored_) return;
    std::vector<Run> runs{file_span(addr_, shape(), dtype().itemsize, r)};
    plan_willneed(engine_, info_->file, file_id_, runs, plan);
  }

 private:
  uint64_t addr_;
  uint64_t stored_;
  FileIdentity file_id_;
};

class ChunkedArray final : public DatasetArray {
 public:
  ChunkedArray(Engine& e, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st)
      : DatasetArray(e, std::move(info)), st_(st), array_id_(ChunkCache::new_array_id()) {
    ds_rank_ = st.ds_rank;
    chunk_ext_ = info_->chunks;  // chunk dims over the dataspace, then the folded array dims
    for (size_t k = ds_rank_; k < info_->shape.size(); ++k) chunk_ext_.push_back(info_->shape[k]);
    // Checked, never wrapped: one decoded chunk is allocated at this size.
    unsigned __int128 cb = info_->dtype.itemsize;
    for (auto c : chunk_ext_) cb = cb * c > kMaxChunkBytes ? kMaxChunkBytes + 1 : cb * c;
    chunk_bytes_ = static_cast<uint64_t>(cb);
    filtered_ = !info_->filters.empty();
  }

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    const ChunkContext& ctx = context();
    // Unfiltered chunks become byte runs gathered across chunks, so neighbours in the file
    // merge into large preads straight into the destination.
    std::vector<Run> runs;
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
      check_in_file(st_.file_id, loc->addr, loc->size, what_ + ": chunk " + coords_str(cc));
      check_chunk(ctx, cc, lin, *loc);
      if (!needs_decode(cc, *loc)) {
        collect_runs(loc->addr, chunk_ext_, dtype().itemsize, in_chunk, d, runs);
        return;
      }
      fmt::ChunkLoc l = *loc;
      const bool to_end = reaches_chunk_end(cc, in_chunk);
      plan.add([this, cc, lin, l, in_chunk, d, to_end] {
        ChunkBytes bytes = get_chunk(cc, lin, l);
        copy_region(in_chunk.count, dtype().itemsize,
                    bytes->data() + offset_in_chunk(in_chunk.start), c_strides(chunk_ext_, dtype().itemsize),
                    d.base, d.strides);
        if (to_end) engine_.cache().consumed(ChunkKey{array_id_, lin});
      });
    });
    if (!runs.empty()) plan_runs(engine_, info_->file, st_.file_id, what_, runs, plan);
    if (log::debug_enabled()) log::debug("read " + what_ + ": direct (chunked, " + info_->chunk_index + ")");
  }

  void plan_prefetch(const Region& r, ReadPlan& plan) const override {
    if (r.empty()) return;
    const ChunkContext& ctx = context();
    std::vector<Run> runs;  // chunks stored as they are read: the kernel reads them ahead
    for_each_chunk(r, [&](const Shape& cc, uint64_t lin, const Region& sub) {
      const fmt::ChunkLoc* loc = ctx.map.find(lin);
      if (!loc || !chunk_ok(ctx, cc, lin, *loc)) return;
      if (!needs_decode(cc, *loc)) {
        Region in_chunk = sub;
        for (size_t k = 0; k < ds_rank_; ++k) in_chunk.start[k] -= cc[k] * chunk_ext_[k];
        runs.push_back(file_span(loc->addr, chunk_ext_, dtype().itemsize, in_chunk));
        return;
      }
      if (engine_.cache().contains(ChunkKey{array_id_, lin})) return;
      fmt::ChunkLoc l = *loc;
      plan.add([this, cc, lin, l] {
        try {
          get_chunk(cc, lin, l);
          engine_.stats().chunks_prefetched.fetch_add(1, std::memory_order_relaxed);
        } catch (const std::exception&) {
          // The reader that asks for this chunk gets (and logs) the error.
        }
      });
    });
    plan_willneed(engine_, info_->file, st_.file_id, runs, plan);
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
        auto fd = engine_.fds().get(info_->file, &st_.file_id);
        ctx->layout = fmt::read_layout(*fd, st_.geo, st_.ohdr_addr);
        Shape dims(info_->shape.data(), info_->shape.data() + ds_rank_);
        Shape maxdims(info_->maxshape.data(), info_->maxshape.data() + ds_rank_);
        const uint64_t h5_elem_size = chunk_bytes_ / std::max<uint64_t>(1, product(info_->chunks));
        // A truncated file keeps the records of its chunks past the cut: they fail alone, when
        // read (check_in_file), and the chunks before the cut are served.
        fmt::FileGeometry geo = st_.geo;
        geo.stored_end = fmt::read_stored_end(*fd);
        ctx->map = fmt::read_chunk_map(*fd, geo, ctx->layout, dims, maxdims, h5_elem_size, filtered_);
        FdCache::verify(info_->file, st_.file_id);
        if (ctx->map.beyond_extent)
          log::warn(what_ + ": chunk index: " + std::to_string(ctx->map.beyond_extent) +
                    " chunk record(s) beyond the current extent (inside the maximum one) ignored, as libhdf5 does");
        if (ctx->map.damaged())
          log::warn(what_ + ": chunk index: " + std::to_string(ctx->map.damaged()) +
                    " chunk(s) overlap other chunks or index nodes: reading them is EIO");
      } catch (...) {
        rethrow_with_context(what_ + ": chunk index");
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

  uint64_t offset_in_chunk(const Shape& start) const {
    auto st = c_strides(chunk_ext_, dtype().itemsize);
    uint64_t off = 0;
    for (size_t k = 0; k < start.size(); ++k) off += start[k] * static_cast<uint64_t>(st[k]);
    return off;
  }

  ChunkBytes get_chunk(const Shape& cc, uint64_t lin, const fmt::ChunkLoc& loc) const {
    bool hit = false;
    ChunkBytes b = engine_.cache().get_or_load(ChunkKey{array_id_, lin}, [&] { return decode(cc, loc); }, &hit);
    (hit ? engine_.stats().cache_hits : engine_.stats().cache_misses).fetch_add(1, std::memory_order_relaxed);
    return b;
  }

  ChunkBytes decode(const Shape& cc, const fmt::ChunkLoc& loc) const {
    try {
      if (loc.size > (uint64_t(1) << 34)) fail_data("stored chunk size " + std::to_string(loc.size) + " is implausible");
      const auto t0 = std::chrono::steady_clock::now();
      auto fd = engine_.fds().get(info_->file, &st_.file_id);
      thread_local std::vector<uint8_t> in;
      in.resize(loc.size);
      pread_exact(fd->fd(), in.data(), loc.size, loc.addr, info_->file);
      FdCache::verify(info_->file, st_.file_id);
      engine_.stats().bytes_pread.fetch_add(loc.size, std::memory_order_relaxed);
      auto out = engine_.buffers().get(chunk_bytes_);
      decode_chunk(info_->filters, loc.filter_mask, info_->dtype.itemsize, in, chunk_bytes_, *out);
      engine_.stats().chunks_decoded.fetch_add(1, std::memory_order_relaxed);
      engine_.stats().decode_ns.fetch_add(
          uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()),
          std::memory_order_relaxed);
      if (in.capacity() > (64u << 20)) std::vector<uint8_t>().swap(in);
      return out;
    } catch (...) {
      rethrow_with_context(what_ + ": chunk " + coords_str(cc) + " at file offset " + std::to_string(loc.addr) +
                           " (" + std::to_string(loc.size) + " bytes)");
    }
  }

  // HDF5 chunks are below 4 GiB (H5Pset_chunk; the v1 B-tree stores their size in 32 bits).
  static constexpr uint64_t kMaxChunkBytes = (uint64_t(1) << 32) - 1;
  StorageInfo st_;
  uint64_t array_id_;
  size_t ds_rank_ = 0;
  Shape chunk_ext_;
  uint64_t chunk_bytes_ = 0;
  bool filtered_ = false;
  // Lock level 4 (docs/architecture.md): after the HDF5 lock, before the fd cache. Guards ctx_ creation.
  mutable std::mutex ctx_mu_;
  mutable std::unique_ptr<ChunkContext> ctx_;
};

}  // namespace

// Follows the one direct-or-library decision, made when the metadata was read
// (decide_read_path in h5file.cpp: conversions, compact and external storage, unsupported
// filters, other layouts all set st.library_only).
ArrayPtr make_dataset_array(Engine& engine, std::shared_ptr<const DatasetInfo> info, const StorageInfo& st) {
  if (!info->is_array) fail(EINVAL, info->file + ":" + info->path + ": not an array: " + info->why_not_array);
  if (st.library_only) return make_library_array(engine, info, st, st.library_reason);
  if (info->layout == "contiguous") return std::make_shared<ContiguousArray>(engine, info, st.contiguous_addr, st.storage_size, st.file_id);
  if (info->layout == "chunked") return std::make_shared<ChunkedArray>(engine, info, st);
  if (info->layout == "virtual") return make_virtual_array(engine, info, st);
  fail(EIO, info->file + ":" + info->path + ": " + info->layout + " layout without a library read path");
}

}  // namespace h5d
