// Reading an array's bytes: a region or a byte range of its C-order bytes planned into tasks
// (Array::plan) and run together on the engine's pool, so that every chunk, file and part a read
// touches is read and decoded at once; and the decode-ahead of a read stream (vfs/read_policy.h
// asks for it), which warms the decoded-chunk cache in the background.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "core/array/array.h"

namespace h5d {

class Engine;

// The data bytes [lo, hi) of an array that one read stream has read or had pushed (vfs's
// SequentialPrefetcher keeps it up to date), shared with the decode-ahead the stream asked for.
// A reader that outruns the pool decodes what it reads on its own thread; the decode-ahead
// queued for those bytes would then decode them a second time once the decoded chunks have left
// the cache's consumed list, for nobody (measured: 4,000 frames read through mmap decoded up to
// 5,996 chunks). A piece of decode-ahead whose bytes the stream has covered is dropped instead.
// Relaxed reads of two atomics: a stale answer only decodes a piece once more or leaves it to
// the reader, never changes bytes.
struct ReadCover {
  std::atomic<uint64_t> lo{~0ull}, hi{0};
  void set(uint64_t l, uint64_t h) {
    lo.store(l, std::memory_order_relaxed);
    hi.store(h, std::memory_order_relaxed);
  }
  bool covers(uint64_t l, uint64_t h) const {
    return lo.load(std::memory_order_relaxed) <= l && h <= hi.load(std::memory_order_relaxed);
  }
};

// Runs a plan's tasks on the engine's pool (see ReadPlan::keys) and waits for them.
void run(Engine& engine, ReadPlan& plan);
// Reads region `r` of `a` into a strided destination.
void read_region(Engine& engine, const Array& a, const Region& r, const DestView& dst);
// Reads bytes [off, off+len) of the C-order bytes of `a` into `out`: every chunk, file and part
// touched is read and decoded concurrently. Errors carry file, dataset and chunk.
void read_bytes(Engine& engine, const Array& a, uint64_t off, uint64_t len, uint8_t* out);
// True when bytes [off, off+len) of `a` can be read without decoding (Array::decoded).
bool bytes_decoded(const Array& a, uint64_t off, uint64_t len);
// What a decode-ahead may ask for now: half the chunk cache's room (its free bytes and those of
// chunks read to their end, which it evicts first), less the decode-ahead asked for and not yet
// done; half, as the cache's shards fill unevenly. Takes no lock.
uint64_t decode_ahead_room(Engine& engine);
// Starts decoding the chunks under bytes [off, off+len) in the background (never blocks; does
// nothing when the pool is saturated). With `cover`, the range is planned in pieces of at least
// one decode unit and kPrefetchPiece bytes, and a piece whose bytes `cover` holds when its turn
// comes is dropped (stats: prefetch_dropped).
void prefetch_bytes(Engine& engine, const Array& a, uint64_t off, uint64_t len,
                    std::shared_ptr<const ReadCover> cover = nullptr);
// The size of a piece: small enough that a dropped piece is little decode-ahead lost, large
// enough that planning a piece (microseconds) stays far below decoding it (>= 1 ms at the ~1 GB/s
// one core inflates deflate).
constexpr uint64_t kPrefetchPiece = 1ull << 20;

}  // namespace h5d
