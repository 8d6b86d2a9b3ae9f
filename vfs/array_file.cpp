// NAME.npy and NAME.raw: an in-memory .npy header (npy only) followed by the array's C-order
// bytes, read through read_bytes (core/array/reader.h); what each read leads to (pushes, decode-ahead, the
// kernel's read-ahead) is decided by vfs/read_policy.h from the array's decode units.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/array/reader.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/engine/fd_cache.h"
#include "core/engine/source_io.h"
#include "core/error.h"
#include "core/log.h"
#include "vfs/npy.h"
#include "vfs/read_policy.h"
#include "vfs/tree.h"
#include "vfs/writable.h"

namespace h5d::vfs {
namespace {

class ArrayFileNode final : public FileNode {
 public:
  ArrayFileNode(const TreeContext& ctx, ArrayFormat format, ArraySpec spec, const NodeMeta& meta)
      : FileNode(meta), ctx_(ctx), format_(format), spec_(std::move(spec)) {
    if (format_ == ArrayFormat::Npy) header_ = npy_header(spec_.dtype, spec_.shape);
    // Never a wrapped size: a shape whose bytes (with the header) exceed 2^63 (file sizes and
    // offsets are signed 64-bit) lists as an empty file that cannot be opened (EFBIG). HDF5
    // datasets never get here (proto::validate makes them non-arrays); this holds for every
    // composite (runs, detector views) alike.
    unsigned __int128 n = spec_.dtype.itemsize;
    const unsigned __int128 limit = (static_cast<unsigned __int128>(1) << 63) - header_.size();
    for (auto d : spec_.shape) {
      n *= d;
      if (n >= limit) {
        too_big_ = true;
        break;
      }
    }
    data_size_ = too_big_ ? 0 : static_cast<uint64_t>(n);
  }
  uint64_t size() const override { return header_.size() + data_size_; }
  std::unique_ptr<OpenFile> open() override;
  ArrayPtr listed_rows(ArrayPtr a) const;
  // rw mounts with -o write_existing: in-place writes (vfs/writable.h, Writer::open_existing).
  std::unique_ptr<OpenFile> open_write(int) override {
    if (!ctx_.writer || spec_.file.empty()) fail(EROFS, spec_.what + ": read-only");
    return make_inplace_open_file(header_, ctx_.writer->open_existing(spec_.file, spec_.dset));
  }

  const TreeContext& ctx_;
  const ArrayFormat format_;
  const ArraySpec spec_;
  std::string header_;
  uint64_t data_size_ = 0;
  bool too_big_ = false;  // shape x itemsize above 2^63: listed empty, open() is EFBIG
  std::mutex open_mu_;  // lock level 5 (docs/architecture.md), a leaf; guards last_, opened_
  std::weak_ptr<const Array> last_;  // the array the previous open read from
  bool opened_ = false;
};

class ArrayOpenFile final : public OpenFile {
 public:
  ArrayOpenFile(const ArrayFileNode& node, ArrayPtr array)
      : node_(node), array_(std::move(array)), policy_(geometry(node, array_), stream_config(node)) {}

  size_t read(uint64_t off, size_t size, char* buf) override {
    Pushes ignored;
    return read_pushing(off, size, buf, ignored);
  }

  size_t read_pushing(uint64_t off, size_t size, char* buf, Pushes& pushes) override {
    const bool waited = !decoded_already(off, size);
    const size_t n = read_bytes(off, size, buf);
    follow_up(off, n, pushes, waited);
    return n;
  }

  bool read_spliced(uint64_t off, size_t size, size_t max_buffers, Spliced& out) override {
    const std::string& header = node_.header_;
    const uint64_t total = node_.size();
    if (!array_ || off >= total || size == 0) return false;
    const uint64_t end = std::min<uint64_t>(off + size, total);
    const HeadSplit part = split_at_header(header.size(), off, end - off);
    const uint64_t doff = part.data_off, dlen = part.data_len;
    out = Spliced{};
    if (part.head) {
      out.head = header.data() + off;
      out.head_len = static_cast<size_t>(part.head);
    }
    if (dlen == 0) return false;  // the header alone: nothing to splice
    try {
      if (!array_->file_runs(doff, dlen, out.runs)) return false;
      // More buffers than the reply's pipe holds: libfuse would copy them through a buffer of
      // its own, slower than the ordinary read.
      if (out.runs.size() + (out.head_len ? 1 : 0) > max_buffers) {
        node_.ctx_.counters.splice_fragmented.fetch_add(1, std::memory_order_relaxed);
        out = Spliced{};
        return false;
      }
      // Cold bytes are not spliced (SourceIo::may_splice).
      for (const FileRun& r : out.runs) {
        if (!node_.ctx_.engine.io().may_splice(*r.fd, r.file_off, r.n)) {
          node_.ctx_.counters.splice_cold.fetch_add(1, std::memory_order_relaxed);
          out = Spliced{};
          return false;
        }
      }
    } catch (const std::exception&) {
      return false;  // the ordinary read gives (and logs) the error
    }
    if (log::debug_enabled()) {
      log::debug("read " + node_.spec_.what + (node_.format_ == ArrayFormat::Npy ? " (.npy)" : " (.raw)") +
                 " data bytes [" + std::to_string(doff) + ", " + std::to_string(doff + dlen) + ") via " +
                 node_.spec_.read_path + ", spliced from " + std::to_string(out.runs.size()) + " file run(s)");
    }
    node_.ctx_.counters.note_spliced(out.size(), out.size() - out.head_len);
    Pushes none;
    follow_up(off, static_cast<size_t>(end - off), none);
    return true;
  }

 private:
  // Whether the data bytes of a read of [off, off + size) are decoded already (the decode-ahead
  // was ahead of it); false for arrays that do not decode.
  bool decoded_already(uint64_t off, size_t size) {
    const uint64_t total = node_.size();
    if (!array_ || off >= total) return false;
    const HeadSplit part = split_at_header(node_.header_.size(), off, std::min<uint64_t>(size, total - off));
    if (part.data_len == 0) return false;
    try {
      return array_->decodes() && bytes_decoded(*array_, part.data_off, part.data_len);
    } catch (const std::exception&) {
      return false;
    }
  }

  // After a read of [off, off + n): the stream, pushes around it, decode-ahead (read_policy.h).
  // `waited`: the read did not find its bytes decoded already.
  void follow_up(uint64_t off, size_t n, Pushes& pushes, bool waited = true) {
    Engine& engine = node_.ctx_.engine;
    const ReadFollowUp next = policy_.after_read(
        off, n, [&](ByteRange r) { return bytes_decoded(*array_, r.off, r.len); }, waited,
        [&] { return decode_ahead_room(engine); });
    if (next.capped) {
      engine.stats().prefetch_capped_bytes.fetch_add(next.capped, std::memory_order_relaxed);
      if (log::debug_enabled())
        log::debug("decode-ahead of " + node_.spec_.what + " cut by " + std::to_string(next.capped) +
                   " bytes: no more room in the chunk cache");
    }
    pushes.ranges[0] = next.around[0];
    pushes.ranges[1] = next.around[1];
    pushes.ranges[2] = next.ahead;
    if (next.prefetch.len > 0) {
      if (log::debug_enabled())
        log::debug("decode-ahead of " + node_.spec_.what + ": data bytes [" + std::to_string(next.prefetch.off) + ", " +
                   std::to_string(next.prefetch.end()) + ") after a read of [" + std::to_string(off) + ", " +
                   std::to_string(off + n) + ")" + (waited ? " that waited" : "") + ", window " +
                   std::to_string(policy_.stream().window()));
      try {
        prefetch_bytes(engine, *array_, next.prefetch.off, next.prefetch.len, next.cover);
      } catch (const std::exception& e) {
        log::debug("prefetch of " + node_.spec_.what + " failed: " + e.what());
      }
    }
  }

 public:
  size_t read_for_push(uint64_t off, size_t size, char* buf) override { return read_bytes(off, size, buf); }

  unsigned choose_readahead_kb(bool push, unsigned mount_kb) override { return policy_.choose_readahead_kb(push, mount_kb); }

 private:
  static ReadPolicy::Geometry geometry(const ArrayFileNode& node, const ArrayPtr& a) {
    ReadPolicy::Geometry g;
    g.header = node.header_.size();
    g.data_size = node.data_size_;
    if (a && node.data_size_ > 0) {
      try {
        g.decodes = a->decodes();
      } catch (const std::exception&) {
        g.decodes = false;  // a part that cannot be opened: its reader gets (and logs) the error
      }
      const Array* raw = a.get();  // kept alive by array_
      g.unit = [raw](uint64_t off) { return raw->decode_span(off); };
    }
    return g;
  }

  static SequentialPrefetcher::Config stream_config(const ArrayFileNode& node) {
    const VfsOptions& o = node.ctx_.opts;
    // A window is held decoded in the chunk cache until read: at most half of what the cache
    // keeps for chunks not yet read through (the rest of its budget holds those read through),
    // so that it fits beside another stream's (read_policy.h: the room each ask takes).
    const ChunkCache& cc = node.ctx_.engine.cache();
    const uint64_t fits = (cc.budget() - std::min(cc.budget(), cc.consumed_budget())) / 2;
    return {o.prefetch_initial, std::max(o.prefetch_initial, std::min(o.prefetch_max, fits)), o.prefetch_seek_tolerance,
            o.prefetch_after};
  }

  size_t read_bytes(uint64_t off, size_t size, char* buf) {
    const std::string& header = node_.header_;
    const uint64_t total = node_.size();
    if (off >= total || size == 0) return 0;
    const uint64_t end = std::min<uint64_t>(off + size, total);
    const HeadSplit part = split_at_header(header.size(), off, end - off);
    const size_t done = static_cast<size_t>(part.head);
    std::memcpy(buf, header.data() + off, done);
    const uint64_t doff = part.data_off, dlen = part.data_len;
    if (dlen > 0) {
      if (log::debug_enabled()) {
        log::debug("read " + node_.spec_.what + (node_.format_ == ArrayFormat::Npy ? " (.npy)" : " (.raw)") +
                   " data bytes [" + std::to_string(doff) + ", " + std::to_string(doff + dlen) +
                   ") via " + node_.spec_.read_path);
      }
      ReadCounters& counted = node_.ctx_.counters;  // a read of data (a push's copy included)
      counted.reads.fetch_add(1, std::memory_order_relaxed);
      try {
        h5d::read_bytes(node_.ctx_.engine, *array_, doff, dlen, reinterpret_cast<uint8_t*>(buf) + done);
        counted.bytes_served.fetch_add(dlen, std::memory_order_relaxed);
      } catch (...) {
        // core's message names the file, the dataset and the chunk; add the byte range.
        rethrow_with_context(std::string(node_.format_ == ArrayFormat::Npy ? ".npy" : ".raw") +
                                 " data bytes [" + std::to_string(doff) + ", " +
                                 std::to_string(doff + dlen) + ")",
                             Place{node_.spec_.file, node_.spec_.file.empty() ? node_.spec_.what : node_.spec_.dset, ""});
      }
    }
    return end - off;
  }

  const ArrayFileNode& node_;  // kept alive by the inode table
  ArrayPtr array_;
  ReadPolicy policy_;

 public:
  HeldSources held;  // the source files held open while this file is open
};

// The array's source changed since this node was listed (a dataset grew: its directory is
// listed again at the next lookup, within VfsOptions::revalidate seconds). When the new array
// extends the listed one along its first axis (same dtype and trailing shape), this node serves
// the rows it was listed with, from the new array; else the open fails with ESTALE.
ArrayPtr ArrayFileNode::listed_rows(ArrayPtr a) const {
  const Shape& now = a->shape();
  const Shape& was = spec_.shape;
  const bool extends = !was.empty() && now.size() == was.size() && same_dtype(a->dtype(), spec_.dtype) &&
                       now[0] >= was[0] && std::equal(was.begin() + 1, was.end(), now.begin() + 1);
  if (!extends) {
    fail(ESTALE, spec_.what + ": array size changed since it was listed (" +
                     std::to_string(a->nbytes()) + " bytes, listed " + std::to_string(data_size_) +
                     "); look its directory up again to see the new shape");
  }
  log::info(spec_.what + ": grew since it was listed; this name serves its first " +
            std::to_string(was[0]) + " rows until its directory is listed again");
  const Shape trailing(was.begin() + 1, was.end());
  std::vector<ConcatArray::Part> parts{{[a] { return a; }, 0, was[0], spec_.what, "", ""}};
  return std::make_shared<ConcatArray>(std::move(parts), trailing, spec_.dtype, spec_.what);
}

std::unique_ptr<OpenFile> ArrayFileNode::open() {
  if (too_big_)
    fail(EFBIG, spec_.what + ": shape x itemsize exceeds 2^63 bytes: no .npy or .raw can hold it");
  ArrayPtr a;
  if (data_size_ > 0) {
    a = spec_.loader();
    if (!a) fail(EIO, spec_.what + ": no array");
    if (a->nbytes() != data_size_) a = listed_rows(std::move(a));
  }
  // A different array than at the previous open means the source file changed and its metadata
  // was read again: the kernel must drop the pages it cached from the old contents.
  bool changed = false;
  {
    std::lock_guard<std::mutex> lk(open_mu_);
    changed = opened_ && last_.lock() != a;
    opened_ = true;
    last_ = a;
  }
  auto f = std::make_unique<ArrayOpenFile>(*this, a);
  if (changed) f->keep_cache = false;
  // As any open file keeps its bytes after an unlink: the files read from are held open from
  // the open on, a mapping not read yet included (a part of a run key first read after its
  // sequence file was deleted could not be opened by name).
  if (a) {
    try {
      f->held = hold_sources(ctx_.engine.fds(), *a);
    } catch (const std::exception& e) {  // a source that cannot be opened: its reads say why
      log::debug(spec_.what + ": source files not held: " + e.what());
    }
    f->source_files = f->held.files;
    f->sources_unheld = f->held.refused;
  }
  return f;
}

}  // namespace

NodePtr make_array_file(const TreeContext& ctx, ArrayFormat format, ArraySpec spec,
                        const NodeMeta& meta) {
  return std::make_shared<ArrayFileNode>(ctx, format, std::move(spec), meta);
}

}  // namespace h5d::vfs
