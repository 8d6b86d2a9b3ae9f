// Object headers and the Data Layout message (File Format Specification v3: IV.A.1.a "Version 1
// Data Object Header Prefix", IV.A.1.b "Version 2 Data Object Header Prefix", IV.A.2.i "Data
// Layout Message" (type 0x0008) and IV.A.2.q "Object Header Continuation Message" (0x0010)).
// read_layout walks the header's chunks (the first one plus continuation blocks, v1 plain or v2
// 'OCHK') until it finds the layout message and decodes versions 1-4 of it.
#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "core/fmt/chunk_index.h"
#include "core/fmt/checksum.h"
#include "core/fmt/cursor.h"

namespace h5d::fmt {

const char* index_type_name(ChunkIndexType t) {
  switch (t) {
    case ChunkIndexType::None: return "none";
    case ChunkIndexType::BTreeV1: return "v1 B-tree";
    case ChunkIndexType::SingleChunk: return "single chunk";
    case ChunkIndexType::Implicit: return "implicit";
    case ChunkIndexType::FixedArray: return "fixed array";
    case ChunkIndexType::ExtensibleArray: return "extensible array";
    case ChunkIndexType::BTreeV2: return "v2 B-tree";
  }
  return "unknown";
}

namespace {

constexpr uint16_t kMsgLayout = 0x0008;
constexpr uint16_t kMsgAttribute = 0x000C;
constexpr uint16_t kMsgContinuation = 0x0010;
constexpr uint16_t kMsgAttributeInfo = 0x0015;
constexpr size_t kMaxHeaderBlocks = 4096;        // chunks of one object header
constexpr uint64_t kMaxHeaderBlockSize = 1u << 26;  // 64 MiB: far above anything HDF5 writes
constexpr unsigned kMaxRank = 32;                // H5S_MAX_RANK

// --- Data layout message -----------------------------------------------------------------

void set_chunk_dims(const Where& w, LayoutInfo& li, const std::vector<uint64_t>& dims_with_elem) {
  if (dims_with_elem.size() < 2 || dims_with_elem.size() > kMaxRank + 1)
    fail_at(w, "chunk dimensionality " + std::to_string(dims_with_elem.size()) + " out of range");
  li.chunk_dims.assign(dims_with_elem.begin(), dims_with_elem.end() - 1);
  for (auto d : li.chunk_dims)
    if (d == 0) fail_at(w, "chunk dimension of size 0");
  const uint64_t es = dims_with_elem.back();
  if (es == 0 || es > 0xffffffffu) fail_at(w, "bad element size " + std::to_string(es));
  li.chunk_elem_size = static_cast<uint32_t>(es);
}

// Versions 1 and 2: dimensionality, class, 5 reserved bytes, address, u32 dims (for chunked
// storage the last one is the element size), compact data.
void decode_layout_v1v2(Cursor& c, const FileGeometry& geo, LayoutInfo& li) {
  const unsigned ndims = c.u8();
  const unsigned cls = c.u8();
  c.skip(5);
  if (cls > 2) fail_at(c.where(), "bad layout class " + std::to_string(cls));
  li.layout_class = static_cast<LayoutClass>(cls);
  uint64_t addr = kUndefAddr;
  if (li.layout_class != LayoutClass::Compact) addr = c.addr();
  if (ndims == 0 || ndims > kMaxRank + 1) fail_at(c.where(), "bad dimensionality " + std::to_string(ndims));
  std::vector<uint64_t> dims(ndims);
  for (auto& d : dims) d = c.u32();
  if (li.layout_class == LayoutClass::Chunked) {
    li.index_type = ChunkIndexType::BTreeV1;
    li.index_addr = addr;
    set_chunk_dims(c.where(), li, dims);
  } else if (li.layout_class == LayoutClass::Contiguous) {
    li.contiguous_addr = addr;
    // The size is not stored; the product of the (possibly truncated) dims is the best guess.
    uint64_t n = 1;
    for (auto d : dims)
      if (mul_overflows(n, d, &n)) fail_at(c.where(), "contiguous size overflows");
    li.contiguous_size = n;
  }
}

void decode_chunk_index_v4(Cursor& c, LayoutInfo& li) {
  const unsigned type = c.u8();
  switch (type) {
    case 1:  // single chunk
      li.index_type = ChunkIndexType::SingleChunk;
      if (li.single_chunk_filtered) {
        li.single_chunk_size = c.length();
        li.single_chunk_filter_mask = c.u32();
      }
      break;
    case 2: li.index_type = ChunkIndexType::Implicit; break;
    case 3:  // fixed array: page bits
      li.index_type = ChunkIndexType::FixedArray;
      li.index_params = {c.u8()};
      break;
    case 4:  // extensible array: max bits, index elements, min pointers, min elements, page bits
      li.index_type = ChunkIndexType::ExtensibleArray;
      for (int i = 0; i < 5; ++i) li.index_params.push_back(c.u8());
      break;
    case 5:  // v2 B-tree: node size, split %, merge %
      li.index_type = ChunkIndexType::BTreeV2;
      li.index_params.push_back(c.u32());
      li.index_params.push_back(c.u8());
      li.index_params.push_back(c.u8());
      break;
    default: fail_at(c.where(), "unknown chunk index type " + std::to_string(type));
  }
}

void decode_layout_v3v4(Cursor& c, const FileGeometry& geo, LayoutInfo& li) {
  const unsigned cls = c.u8();
  if (cls > 3 || (cls == 3 && li.version < 4)) fail_at(c.where(), "bad layout class " + std::to_string(cls));
  li.layout_class = static_cast<LayoutClass>(cls);
  switch (li.layout_class) {
    case LayoutClass::Compact: {
      const uint16_t n = c.u16();
      c.skip(n);  // data lives in the message; read it through the library
      break;
    }
    case LayoutClass::Contiguous:
      li.contiguous_addr = c.addr();
      li.contiguous_size = c.length();
      break;
    case LayoutClass::Virtual:
      c.addr();  // global heap collection of the mappings
      c.u32();
      break;
    case LayoutClass::Chunked: {
      if (li.version == 3) {
        const unsigned ndims = c.u8();
        li.index_type = ChunkIndexType::BTreeV1;
        li.index_addr = c.addr();
        std::vector<uint64_t> dims(ndims);
        for (auto& d : dims) d = c.u32();
        set_chunk_dims(c.where(), li, dims);
        break;
      }
      const unsigned flags = c.u8();
      if (flags & ~3u) fail_at(c.where(), "unknown layout flags " + std::to_string(flags));
      li.dont_filter_partial_edge_chunks = flags & 1;
      li.single_chunk_filtered = flags & 2;
      const unsigned ndims = c.u8();
      const unsigned enc = c.u8();
      if (enc < 1 || enc > 8) fail_at(c.where(), "bad dimension size encoded length " + std::to_string(enc));
      std::vector<uint64_t> dims(ndims);
      for (auto& d : dims) d = c.u(enc);
      set_chunk_dims(c.where(), li, dims);
      decode_chunk_index_v4(c, li);
      li.index_addr = c.addr();
      break;
    }
  }
}

LayoutInfo decode_layout(const Where& w, const FileGeometry& geo, const uint8_t* data, size_t n) {
  Cursor c(w, geo, data, n);
  LayoutInfo li;
  li.version = c.u8();
  if (li.version == 1 || li.version == 2)
    decode_layout_v1v2(c, geo, li);
  else if (li.version == 3 || li.version == 4)
    decode_layout_v3v4(c, geo, li);
  else
    fail_at(w, "unsupported data layout message version " + std::to_string(li.version));
  return li;
}

// --- Object header walk ------------------------------------------------------------------

struct Block {
  uint64_t addr;  // absolute
  uint64_t len;
};

// Walks the messages of an object header (its first chunk, then continuation blocks), handing
// each one but continuations to `visit`, until `visit` returns true (found) or none is left.
class HeaderWalker {
 public:
  // Returns true when done (the walk stops).
  using Visit = std::function<bool(uint16_t type, uint8_t flags, const Where& w, const uint8_t* data, size_t n)>;
  HeaderWalker(const ByteSource& src, const FileGeometry& geo, Visit visit)
      : src_(src), geo_(geo), visit_(std::move(visit)), budget_(2 * src.size() + 4096) {}

  // True when `visit` said it was done.
  bool run(uint64_t ohdr_abs) {
    Where w{&src_, "object header", ohdr_abs};
    uint8_t sig[4] = {0, 0, 0, 0};
    if (ohdr_abs == kUndefAddr || ohdr_abs >= src_.size()) fail_at(w, "address beyond the end of the file");
    src_.read_at(ohdr_abs, sig, std::min<uint64_t>(4, src_.size() - ohdr_abs));
    if (std::memcmp(sig, "OHDR", 4) == 0)
      first_v2(w);
    else
      first_v1(w);
    while (!found_ && !pending_.empty()) {
      Block b = pending_.back();
      pending_.pop_back();
      if (++nblocks_ > kMaxHeaderBlocks) fail_at(w, "too many continuation blocks");
      if (!visited_.insert(b.addr).second) fail_at(w, "continuation block loop at " + std::to_string(b.addr));
      if (b.len > kMaxHeaderBlockSize) fail_at(w, "continuation block too large");
      if (b.len > budget_) fail_at(w, "continuation blocks add up to more than the file could hold");
      budget_ -= b.len;
      Where cw{&src_, v2_ ? "object header continuation block (OCHK)" : "object header continuation block", b.addr};
      std::vector<uint8_t> buf = read_block(cw, b.len);
      if (v2_) {
        if (buf.size() < 8 || std::memcmp(buf.data(), "OCHK", 4) != 0) fail_at(cw, "bad signature, expected OCHK");
        verify_checksum(cw, buf.data(), buf.size());
        scan(cw, buf.data(), buf.size() - 4, 4);
      } else {
        scan(cw, buf.data(), buf.size(), 0);
      }
    }
    return found_;
  }

 private:
  void first_v1(const Where& w) {
    std::vector<uint8_t> pre = read_block(w, 16);
    Cursor c(w, geo_, pre);
    const unsigned version = c.u8();
    if (version != 1) fail_at(w, "neither an OHDR signature nor object header version 1 (byte " + std::to_string(version) + ")");
    c.skip(1);
    c.u16();  // number of messages
    c.u32();  // reference count
    const uint32_t size = c.u32();
    visited_.insert(w.addr);
    if (size > kMaxHeaderBlockSize) fail_at(w, "header size too large");
    Where bw{&src_, "object header", w.addr + 16};
    std::vector<uint8_t> buf = read_block(bw, size);
    scan(bw, buf.data(), buf.size(), 0);
  }

  void first_v2(const Where& w) {
    // Longest prefix: signature, version, flags, 4 times, 2 attribute counts, 8-byte size.
    const uint64_t avail = src_.size() - w.addr;
    std::vector<uint8_t> pre = read_block(w, std::min<uint64_t>(avail, 4 + 1 + 1 + 16 + 4 + 8));
    Cursor c(w, geo_, pre);
    c.expect_signature("OHDR");
    const unsigned version = c.u8();
    if (version != 2) fail_at(w, "unsupported object header version " + std::to_string(version));
    const unsigned flags = c.u8();
    if (flags & 0xc0) fail_at(w, "unknown object header flags " + std::to_string(flags));
    creation_order_ = flags & 0x04;
    if (flags & 0x20) c.skip(16);
    if (flags & 0x10) c.skip(4);
    const uint64_t chunk0 = c.u(size_t(1) << (flags & 3));
    const size_t prefix = c.pos();
    if (chunk0 > kMaxHeaderBlockSize) fail_at(w, "chunk #0 too large");
    v2_ = true;
    visited_.insert(w.addr);
    std::vector<uint8_t> buf = read_block(w, prefix + chunk0 + 4);
    verify_checksum(w, buf.data(), buf.size());
    scan(w, buf.data(), buf.size() - 4, prefix);
  }

  // Messages in buf[pos, end).
  void scan(const Where& w, const uint8_t* buf, size_t end, size_t pos) {
    const size_t hdr = v2_ ? (4 + (creation_order_ ? 2 : 0)) : 8;
    Cursor c(w, geo_, buf, end, pos);
    while (c.remaining() >= hdr && !found_) {
      uint16_t type;
      uint16_t size;
      uint8_t flags;
      if (v2_) {
        type = c.u8();
        size = c.u16();
        flags = c.u8();
        if (creation_order_) c.u16();
      } else {
        type = c.u16();
        size = c.u16();
        flags = c.u8();
        c.skip(3);  // reserved
      }
      c.need(size);
      const uint8_t* data = c.here();
      Where mw{&src_, type == kMsgLayout ? "data layout message" : "object header message",
               w.addr + static_cast<uint64_t>(data - buf)};
      if (type == kMsgContinuation) {
        Cursor m(mw, geo_, data, size);
        const uint64_t addr = m.addr();
        const uint64_t len = m.length();
        pending_.push_back({addr, len});
      } else if (visit_(type, flags, mw, data, size)) {
        found_ = true;
      }
      c.skip(size);
    }
  }

  const ByteSource& src_;
  const FileGeometry& geo_;
  Visit visit_;
  bool v2_ = false;
  bool creation_order_ = false;
  bool found_ = false;
  std::vector<Block> pending_;
  std::set<uint64_t> visited_;
  size_t nblocks_ = 0;
  uint64_t budget_;  // bytes of continuation blocks still allowed (overlapping blocks)
};

}  // namespace

LayoutInfo read_layout(const ByteSource& src, const FileGeometry& geo, uint64_t ohdr_addr) {
  check_geometry(src, geo);
  Where w{&src, "object header", ohdr_addr};
  const uint64_t abs = to_absolute(w, geo, ohdr_addr);
  LayoutInfo layout;
  HeaderWalker walk(src, geo, [&](uint16_t type, uint8_t, const Where& mw, const uint8_t* data, size_t n) {
    if (type != kMsgLayout) return false;
    layout = decode_layout(mw, geo, data, n);
    return true;
  });
  if (!walk.run(abs)) fail_at(w, "no data layout message");
  return layout;
}

AttributeNames read_attribute_names(const ByteSource& src, const FileGeometry& geo, uint64_t ohdr_addr) {
  check_geometry(src, geo);
  Where w{&src, "object header", ohdr_addr};
  const uint64_t abs = to_absolute(w, geo, ohdr_addr);
  AttributeNames out;
  HeaderWalker walk(src, geo, [&](uint16_t type, uint8_t flags, const Where& mw, const uint8_t* data, size_t n) {
    Cursor c(mw, geo, data, n);
    if (type == kMsgAttributeInfo) {  // version, flags, [max creation index], fractal heap address
      c.u8();
      const unsigned f = c.u8();
      if (f & 1) c.u16();
      if (c.addr() != kUndefAddr) out.complete = false;  // dense storage: names in a fractal heap
    } else if (type == kMsgAttribute) {
      if (flags & 0x02) {  // shared: the message is a reference to it elsewhere
        out.complete = false;
        return false;
      }
      // version, reserved or flags, name size (with its NUL), datatype size, dataspace size,
      // [encoding, version 3], the name (padded to 8 bytes in version 1).
      const unsigned version = c.u8();
      if (version < 1 || version > 3) fail_at(mw, "unknown attribute message version " + std::to_string(version));
      c.u8();
      const uint16_t name_size = c.u16();
      c.u16();
      c.u16();
      if (version == 3) c.u8();
      if (name_size == 0) fail_at(mw, "attribute name of size 0");
      c.need(name_size);
      const char* p = reinterpret_cast<const char*>(c.here());
      const size_t len = strnlen(p, name_size);
      if (len + 1 != name_size) fail_at(mw, "attribute name not terminated where its size says");
      out.names.emplace_back(p, len);
    }
    return false;
  });
  walk.run(abs);
  std::sort(out.names.begin(), out.names.end());  // libhdf5's name order (strcmp)
  return out;
}

}  // namespace h5d::fmt
