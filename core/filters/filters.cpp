// The filter pipeline: which filters we undo ourselves, and undoing them for one chunk.
#include "core/filters/filters.h"

#include <array>
#include <cstring>
#include <memory>
#include <utility>

#include "core/error.h"
#include "core/filters/codecs.h"

namespace h5d::filters {

std::string filter_name(int id) {
  switch (id) {
    case kDeflate: return "deflate";
    case kShuffle: return "shuffle";
    case kFletcher32: return "fletcher32";
    case kSzip: return "szip";
    case kNbit: return "nbit";
    case kScaleOffset: return "scaleoffset";
    case 307: return "bzip2";
    case kLzf: return "lzf";
    case kBlosc: return "blosc";
    case kLz4: return "lz4";
    case kBitshuffle: return "bitshuffle";
    case 32013: return "zfp";
    case kZstd: return "zstd";
    case 32017: return "sz";
    case 32026: return "blosc2";
    default: return "filter-" + std::to_string(id);
  }
}

namespace {

bool supported_id(int id) {
  switch (id) {
    case kDeflate:
    case kShuffle:
    case kFletcher32:
    case kLzf:
    case kBlosc:
    case kLz4:
    case kBitshuffle:
    case kZstd: return true;
    default: return false;
  }
}

size_t shuffle_size(const FilterInfo& f, size_t elem_size) {
  return !f.cd_values.empty() && f.cd_values[0] ? f.cd_values[0] : elem_size;
}

bool bitshuffle_compressed(const FilterInfo& f) {
  return f.cd_values.size() > 4 &&
         (f.cd_values[4] == codec::kBshufLz4 || f.cd_values[4] == codec::kBshufZstd);
}

// Filters whose output size equals their input size (so sizes further down stay known).
bool size_preserving(const FilterInfo& f) {
  return f.id == kShuffle || (f.id == kBitshuffle && !bitshuffle_compressed(f));
}

// Stage that needs its own output buffer (fletcher32 and 1-byte shuffles work in place).
bool is_stage(const FilterInfo& f, size_t elem_size) {
  if (f.id == kFletcher32) return false;
  if (f.id == kShuffle && shuffle_size(f, elem_size) <= 1) return false;
  return true;
}

// Per-thread intermediate buffer, never zero-filled, kept across calls.
struct Scratch {
  std::unique_ptr<uint8_t[]> buf;
  size_t cap = 0;
};
thread_local Scratch tl_scratch;

constexpr size_t kMaxFilters = 32;  // H5Z_MAX_NFILTERS

}  // namespace

bool pipeline_supported(const std::vector<FilterInfo>& pipeline, std::string* why) {
  if (pipeline.size() > kMaxFilters) {
    if (why) *why = "pipeline of " + std::to_string(pipeline.size()) + " filters is too long";
    return false;
  }
  for (const auto& f : pipeline) {
    if (!supported_id(f.id)) {
      if (why)
        *why = filter_name(f.id) + " (id " + std::to_string(f.id) + ") has no direct decoder";
      return false;
    }
  }
  if (why) why->clear();
  return true;
}

namespace {

// Undoes the pipeline from [in, in + in_len) into `out`. Returns false when no stage ran (no
// filter, or only checksums): `out` is then untouched and the chunk is the input's first
// out_size bytes, which the caller hands over as it can.
bool undo_pipeline(const std::vector<FilterInfo>& pipeline, uint32_t filter_mask, size_t elem_size,
                   const uint8_t* in, size_t in_len, size_t out_size, std::vector<uint8_t>& out) {
  const size_t nf = pipeline.size();
  if (nf > kMaxFilters) fail_data("filter pipeline of " + std::to_string(nf) + " filters");

  // expected[i]: the size of the data filter i received when the chunk was written (= what
  // undoing it must produce), known as long as every active filter before it keeps the size
  // predictable.
  std::array<size_t, kMaxFilters> expected{};
  size_t stages = 0;
  size_t sz = out_size;
  for (size_t i = 0; i < nf; ++i) {
    const FilterInfo& f = pipeline[i];
    const bool active = !(filter_mask & (1u << i));
    expected[i] = sz;
    if (!active) continue;
    if (!supported_id(f.id))
      fail(ENOTSUP, filter_name(f.id) + " (id " + std::to_string(f.id) + ") has no direct decoder");
    if (is_stage(f, elem_size)) ++stages;
    if (sz == codec::kUnknown || size_preserving(f)) continue;
    sz = f.id == kFletcher32 ? sz + 4 : codec::kUnknown;
  }
  // Upper bound for outputs whose size cannot be known in advance (compressor stacked on a
  // compressor): compressed data never grows by more than a small fraction.
  const size_t cap = out_size + out_size / 2 + (size_t(1) << 20) + 64 * nf;

  // Buffers: the first stage reads `in`; stages alternate between `out` and the thread's scratch
  // so that the last one writes `out` (no final copy).
  enum Where { kIn, kOut, kScratch };
  Where where = kIn;
  const uint8_t* cur = in;
  size_t len = in_len;
  size_t done = 0;
  for (size_t i = nf; i-- > 0;) {
    if (filter_mask & (1u << i)) continue;
    const FilterInfo& f = pipeline[i];
    if (f.id == kFletcher32) {
      len = codec::fletcher32_check(cur, len);
      if (expected[i] != codec::kUnknown && len != expected[i])
        fail_data("fletcher32: chunk holds " + std::to_string(len) + " bytes, expected " +
                  std::to_string(expected[i]));
      continue;
    }
    if (!is_stage(f, elem_size)) continue;  // 1-byte shuffle: identity
    const Where to = ((stages - done - 1) % 2 == 0) ? kOut : kScratch;
    codec::Sink sink = to == kOut ? codec::Sink(&out) : codec::Sink(&tl_scratch.buf, &tl_scratch.cap);
    const size_t exp = expected[i];
    size_t produced = 0;
    switch (f.id) {
      case kDeflate: produced = codec::inflate_zlib(cur, len, sink, exp, cap); break;
      case kShuffle: {
        if (exp != codec::kUnknown && len != exp)
          fail_data("shuffle: chunk of " + std::to_string(len) + " bytes, expected " +
                    std::to_string(exp));
        uint8_t* o = sink.get(len);
        codec::unshuffle(cur, o, len, shuffle_size(f, elem_size));
        sink.produced(len);
        produced = len;
        break;
      }
      case kLzf: produced = codec::lzf_decode(cur, len, sink, exp, cap); break;
      case kBlosc: produced = codec::blosc_decode(cur, len, sink, exp, cap); break;
      case kLz4: produced = codec::lz4_decode(cur, len, sink, exp, cap); break;
      case kZstd: produced = codec::zstd_decode(cur, len, sink, exp, cap); break;
      case kBitshuffle:
        produced = codec::bitshuffle_decode(cur, len, sink, exp, cap, f.cd_values, elem_size);
        break;
      default: fail(ENOTSUP, filter_name(f.id) + " has no direct decoder");
    }
    if (exp != codec::kUnknown && produced != exp)
      fail_data(filter_name(f.id) + ": decoded " + std::to_string(produced) + " bytes, expected " +
                std::to_string(exp));
    cur = sink.data();
    len = produced;
    where = to;
    ++done;
  }

  if (len != out_size)
    fail_data("decoded chunk is " + std::to_string(len) + " bytes, expected " +
              std::to_string(out_size));
  if (tl_scratch.cap > (size_t(256) << 20)) {
    tl_scratch.buf.reset();
    tl_scratch.cap = 0;
  }
  if (where == kIn) return false;
  out.resize(len);  // where == kOut: the last stage always writes `out`
  return true;
}

}  // namespace

void decode_chunk(const std::vector<FilterInfo>& pipeline, uint32_t filter_mask, size_t elem_size,
                  std::vector<uint8_t>& in, size_t out_size, std::vector<uint8_t>& out) {
  if (&in == &out) fail(EINVAL, "decode_chunk: in and out must be different buffers");
  if (!undo_pipeline(pipeline, filter_mask, elem_size, in.data(), in.size(), out_size, out)) {
    // Nothing to decode but (possibly) a checksum: hand the caller's buffer over.
    std::swap(in, out);
    out.resize(out_size);
  }
}

void decode_chunk(const std::vector<FilterInfo>& pipeline, uint32_t filter_mask, size_t elem_size,
                  const uint8_t* in, size_t in_len, size_t out_size, std::vector<uint8_t>& out) {
  if (!undo_pipeline(pipeline, filter_mask, elem_size, in, in_len, out_size, out)) {
    out.resize(out_size);
    std::memcpy(out.data(), in, out_size);
  }
}

}  // namespace h5d::filters
