// The read path's decisions for one open array file (.npy / .raw), in one place and without
// FUSE: which read-ahead the kernel should use for it, which pages are worth pushing into the
// page cache around a read, when reads form a stream and which way it runs, and what to decode
// ahead of it. fusefs carries the decisions out (sysfs read-ahead, notify_store, the reads in
// flight); vfs/array_file.cpp supplies the file's geometry from its Array. docs/architecture.md
// ("How a read reaches the daemon") says why each decision follows from what is read.
//
// Everything here is derived from two facts about the array, never from constants tuned to one
// file: its decode units (Array::decode_span: the bytes one decode makes cheap) and the access
// pattern seen so far (SequentialPrefetcher). The kernel asks for pages in whole-page requests;
// a unit's pages other than the ones a request asked for are pushed, so a reader that faults
// page by page costs one request and one decode per unit, in whichever order it walks the pages
// (glibc's memmove copies large buffers backwards when the destination lies above the source:
// `out[...] = np.load(path, mmap_mode='r')` walks the mapping from its end, depending only on
// where the allocator put `out`).
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>

#include "core/array/array.h"
#include "core/array/reader.h"
#include "core/engine/engine.h"

namespace h5d::vfs {

// Bytes [off, off + len) of a file or of an array's data; len 0: nothing.
struct ByteRange {
  uint64_t off = 0, len = 0;
  uint64_t end() const { return off + len; }
  bool operator==(const ByteRange& o) const { return off == o.off && len == o.len; }
};

// Stream detection for one open file, driving the decode-ahead (prefetch_bytes, core/array/reader.h).
//
// Up to kStreams streams per open file (threads of one process reading parts of one mapping
// share it), each between `lo` (the lowest start) and `cursor` (the highest end) of its reads.
// A read within `seek_tolerance` of a stream's top end continues it forward, one within
// `seek_tolerance` below its bottom end backward (the kernel's read-ahead and the multi-threaded
// loop deliver requests slightly out of order); the second read of a stream fixes its direction,
// and a read that continues no stream replaces the least recently used one. While a stream goes
// on, a window of `window` bytes is kept decoded ahead of it in its direction: when the decoded
// frontier is less than half a window ahead, [frontier, reader + window) is asked for and, when
// the read had to wait for its bytes, the window doubles (up to `max`); with single-page windows
// (units read one at a time) the first window is at least what the stream has gone. The
// decode-ahead never reaches into what another stream of the file has read (`bound`), and a
// stream heading for where it ends asks for everything up to there at once (up to `max`;
// `end_ahead`: memmove walking down a slice to the page it touched first, halves copied by two
// threads): the bytes between are all read next, and growing the window to them would cost the
// reader a round trip per doubling.
// Backpressure is the engine's: prefetch_bytes drops work when its pool is saturated. Nothing is
// decoded ahead until the stream has gone `after` bytes: one random mmap fault becomes two or
// three contiguous requests (the kernel's read-around), which look sequential but are not a
// stream.
class SequentialPrefetcher {
 public:
  struct Config {
    uint64_t initial = (1ull << 20) + (128ull << 10);
    uint64_t max = 64ull << 20;
    uint64_t seek_tolerance = 1ull << 20;
    uint64_t after = 4ull << 20;
  };
  using Range = ByteRange;
  enum class Direction { None, Forward, Backward };
  static constexpr size_t kStreams = 4;
  // The stream a read belongs to, as on_read left it.
  struct Seen {
    size_t stream = 0;
    bool streaming = false;  // gone at least `after` bytes
    Direction dir = Direction::None;
    std::shared_ptr<const ReadCover> cover;  // what the stream has read or had pushed
    uint64_t capped = 0;  // bytes of decode-ahead left out for want of room (`room`)
  };

  explicit SequentialPrefetcher(Config cfg) : cfg_(cfg) {}

  // Reports a read of [off, off+len) in a file of `file_size` bytes; returns what to decode ahead.
  // `waited`: the read found its bytes not yet decoded (the decode-ahead was behind it). Only then
  // does the window double: a reader that finds its bytes ready is served by the window it has,
  // and a larger one would only decode more for nobody past the end of a slice.
  // `room` (when set): the most bytes the decode-ahead may ask for now (Engine::decode_ahead_room);
  // what it leaves out stays ahead of the frontier, asked for at a later read. Called only when a
  // range is to be asked for, under this object's lock, a leaf: it takes no lock (the chunk
  // cache's totals are atomics).
  Range on_read(uint64_t off, uint64_t len, uint64_t file_size, Seen* seen = nullptr, bool waited = true,
                const std::function<uint64_t()>& room = nullptr);

  // Bytes [lo, hi), next to a read of stream `stream`, were pushed into the page cache: its
  // reader will not ask for them, so the stream reaches over them.
  void note_pushed(size_t stream, uint64_t lo, uint64_t hi);
  // How far pushes ahead of stream `stream` reached (ReadPolicy): [lo, hi) as last set.
  std::pair<uint64_t, uint64_t> pushed(size_t stream) const;
  void set_pushed(size_t stream, uint64_t lo, uint64_t hi);

  // The file is read through single-page windows with pushes (ReadPolicy::choose_readahead_kb):
  // a stream's next read lies within one unit (`unit` bytes) or its own size after its end, and
  // a stream starts after two units.
  void single_page_windows(uint64_t unit);

  // The most recently used stream: its window, whether it has gone `after` bytes, its direction.
  uint64_t window() const;
  bool streaming() const;
  Direction direction() const;

 private:
  struct Stream {
    bool started = false;
    Direction dir = Direction::None;
    uint64_t lo = 0, cursor = 0;  // lowest start and highest end of its reads (and pushes)
    uint64_t frontier = 0;        // the far end of what was asked for, in its direction
    uint64_t window = 0;
    uint64_t used = 0;            // last use (a counter), for replacement
    uint64_t born = 0;            // the counter when the stream began
    uint64_t reads = 0;
    bool primed = false;          // has asked for decode-ahead once
    uint64_t pushed_lo = ~0ull, pushed_hi = 0;  // ReadPolicy's push-ahead reach
    // [lo, cursor), shared with the decode-ahead this stream asked for (prefetch_bytes
    // drops pieces the reader has read meanwhile); a new stream in the slot gets a new one.
    std::shared_ptr<ReadCover> cover;
  };
  bool goes_on(Stream& s, uint64_t off, uint64_t end, uint64_t tol) const;
  // How far stream i may decode ahead: up to the nearest part of the file another stream of it
  // has read, in i's direction (its lo going forward, its cursor going backward; none: the
  // file's end or 0). A reader walking towards bytes it read before stops there, or has them:
  // memmove copying a slice backwards touches the slice's first page, then walks down from its
  // end; two threads copying halves meet at the middle. Decoding past them is for nobody.
  uint64_t bound(size_t i) const { return nearest(i, false); }
  // Where stream i ends, as far as the file's other reads tell: the nearest part in its direction
  // that another stream is reading meanwhile (read since i began: the second thread's half), or,
  // going backward, a lone read made just before i began (memmove's first page of a slice). Reads
  // made before (random frames read earlier) bound the decode-ahead but are no end: a stream may
  // stop anywhere before them. None: ~0 forward, 0 backward.
  uint64_t end_ahead(size_t i) const { return nearest(i, true); }
  // The nearest part of the file in stream i's direction that another stream has read (only
  // those that are ends, `ends_only`).
  uint64_t nearest(size_t i, bool ends_only) const;
  // A stream: three reads or more, with a direction, over at least `after` bytes (random reads
  // of a small file land next to each other now and then; three in a row rarely).
  bool long_enough(const Stream& s) const {
    return s.started && s.dir != Direction::None && s.reads >= 3 && s.cursor - s.lo >= cfg_.after;
  }
  Config cfg_;
  mutable std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards everything below
  bool exact_ = false;     // single_page_windows
  uint64_t unit_ = 0;      // its unit
  Stream streams_[kStreams];
  uint64_t clock_ = 0;
  size_t last_ = 0;        // the most recently used stream
};

// What a read of one array file leads to, beyond its reply.
struct ReadFollowUp {
  ByteRange around[2];  // file pages of the units the read decoded, other than its own: push
                        // them before the reply (the woken reader must find them cached)
  ByteRange ahead;      // file pages of the decoded units next in the stream's direction
                        // (up to kPushAhead): push them before the reply as well
  ByteRange prefetch;   // data bytes to decode ahead of a stream
  uint64_t capped = 0;  // decode-ahead left out for want of room in the chunk cache
  std::shared_ptr<const ReadCover> cover;  // its stream's cover (prefetch_bytes)
};

class ReadPolicy {
 public:
  // The file: `header` bytes (the .npy header; 0 for .raw) then `data_size` bytes of the array,
  // whose decode units are `unit(data offset)` (Array::decode_span; unset or empty: none).
  struct Geometry {
    uint64_t header = 0, data_size = 0;
    std::function<ByteSpan(uint64_t)> unit;
    bool decodes = false;  // Array::decodes
  };
  // A unit larger than this is never pushed whole: only this much of it nearest the read
  // (notify_store copies what it pushes; beyond a few MiB the reader is better served asking).
  static constexpr uint64_t kMaxPush = 8ull << 20;
  static constexpr uint64_t kPage = 4096;

  ReadPolicy(Geometry g, SequentialPrefetcher::Config stream) : g_(std::move(g)), stream_(stream) {}

  // In a stream, decoded units are pushed this far ahead of the reader: as far as the kernel
  // reads ahead of a reader of an uncompressed file at h5direct's default read-ahead (1 MiB), so
  // that a reader faulting page by page finds what it would find in a plain file.
  static constexpr uint64_t kPushAhead = 1ull << 20;

  // The read-ahead the kernel should use for this file, given the mount's (`mount_kb`) and
  // whether pushes are on: files whose reads decode want single pages (a larger window around a
  // fault would decode the neighbouring units too) and get the rest of each unit by push. Called
  // when the file is opened, where the daemon can set read-ahead (root); the choice also sets
  // when a stream starts (two units with single-page windows, Config::after otherwise).
  unsigned choose_readahead_kb(bool push, unsigned mount_kb);

  // After the reader's read of file bytes [off, off + n) (n: what it got). `decoded` tells
  // whether data bytes are decoded already (bytes_decoded, core/array/reader.h). Updates the stream.
  ReadFollowUp after_read(uint64_t off, uint64_t n, const std::function<bool(ByteRange)>& decoded,
                          bool waited = true, const std::function<uint64_t()>& room = nullptr);

  // The whole file pages of data bytes [from, to) (the kernel takes no partial page but the
  // file's last), as a file range.
  ByteRange pages(uint64_t from, uint64_t to) const;

  const SequentialPrefetcher& stream() const { return stream_; }

 private:
  ByteSpan unit(uint64_t data_off) const;
  // The decoded units pushed ahead of a stream after a read of data [d0, d1) in units u0..u1.
  ByteRange ahead_of(const SequentialPrefetcher::Seen& seen, uint64_t d0, uint64_t d1, ByteSpan u0,
                     ByteSpan u1, const std::function<bool(ByteRange)>& decoded);
  Geometry g_;
  SequentialPrefetcher stream_;
};

}  // namespace h5d::vfs
