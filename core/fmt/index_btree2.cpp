// Version 2 B-tree chunk index (File Format Specification v3, III.A.2 "Version 2 B-trees":
// header 'BTHD', internal nodes 'BTIN', leaf nodes 'BTLF'; record types 10 "non-filtered
// dataset chunks" = address + rank u64 scaled offsets, and 11 "filtered dataset chunks" =
// address, chunk size (variable width), filter mask u32, scaled offsets).
// Internal node child pointers are: address, number of records in the child (width from the
// leaf capacity), and for depth > 1 the total records below (width from that depth's capacity);
// the widths are derived from the node size exactly as H5B2__hdr_init does.
#include <algorithm>
#include <unordered_set>

#include "core/fmt/index_internal.h"

namespace h5d::fmt::detail {

namespace {

constexpr uint64_t kPrefix = 4 + 1 + 1 + 4;  // signature, version, type, checksum
constexpr unsigned kMaxDepth = 64;

unsigned enc_size(uint64_t v) {  // H5VM_limit_enc_size: bytes to encode v
  unsigned log2 = v ? 63u - static_cast<unsigned>(__builtin_clzll(v)) : 0;
  return log2 / 8 + 1;
}

struct NodeRef {
  uint64_t addr;  // absolute
  uint64_t nrec;
  unsigned depth;
};

class BTree2Reader {
 public:
  explicit BTree2Reader(IndexContext& ctx) : ctx_(ctx), O_(ctx.geo.sizeof_offsets) {}

  // Level by level: the nodes of a level are announced to the source at once (a cold tree on
  // slow storage costs a round trip per level, not one per node), then read in key order.
  void run() {
    NodeRef root = read_header();
    if (root.addr == kUndefAddr || root.nrec == 0) return;
    std::vector<NodeRef> level{root}, next;
    std::unordered_set<uint64_t> visited;
    while (!level.empty()) {
      announce(level);
      next.clear();
      for (const NodeRef& n : level) {
        if (!visited.insert(n.addr).second)
          fail_at(ctx_.where("v2 B-tree node", n.addr), "node visited twice (loop in the B-tree)");
        if (n.depth == 0)
          read_leaf(n);
        else
          read_internal(n, next);
      }
      level.swap(next);
    }
    if (seen_ != total_)
      fail_at(hw_, "tree holds " + std::to_string(seen_) + " records, header says " + std::to_string(total_));
  }

 private:
  NodeRef read_header() {
    const size_t L = ctx_.geo.sizeof_lengths;
    hw_ = ctx_.where("v2 B-tree header", ctx_.layout.index_addr);
    std::vector<uint8_t> buf = ctx_.read(hw_, 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + O_ + 2 + L + 4);
    verify_checksum(hw_, buf.data(), buf.size());
    Cursor h(hw_, ctx_.geo, buf);
    h.expect_signature("BTHD");
    if (h.u8() != 0) fail_at(hw_, "unsupported version");
    type_ = h.u8();
    node_size_ = h.u32();
    rrec_ = h.u16();
    depth_ = h.u16();
    h.u8();  // split percent
    h.u8();  // merge percent
    NodeRef root{h.addr(), h.u16(), depth_};
    total_ = h.length();

    const size_t rank = ctx_.rank();
    if (type_ == 10) {
      if (rrec_ != O_ + 8 * rank) fail_at(hw_, "record size " + std::to_string(rrec_) + " for type 10");
    } else if (type_ == 11) {
      if (rrec_ < O_ + 4 + 8 * rank + 1 || rrec_ > O_ + 4 + 8 * rank + 8)
        fail_at(hw_, "record size " + std::to_string(rrec_) + " for type 11");
      size_len_ = rrec_ - O_ - 4 - 8 * rank;
    } else {
      fail_at(hw_, "record type " + std::to_string(type_) + ", expected 10 or 11 (chunks)");
    }
    if (depth_ > kMaxDepth) fail_at(hw_, "depth " + std::to_string(depth_) + " too large");
    if (node_size_ <= kPrefix + rrec_) fail_at(hw_, "node size " + std::to_string(node_size_) + " too small");
    if (total_ > ctx_.record_limit) fail_at(hw_, "more records than chunks in the dataspace");
    init_node_info();
    if (root.nrec > max_nrec_[depth_]) fail_at(hw_, "root record count above node capacity");
    return root;
  }

  // Per-depth node capacity and the widths of the child pointer fields (H5B2__hdr_init).
  void init_node_info() {
    max_nrec_.assign(depth_ + 1, 0);
    cum_size_.assign(depth_ + 1, 0);
    ptr_size_.assign(depth_ + 1, 0);
    max_nrec_[0] = (node_size_ - kPrefix) / rrec_;
    max_nrec_size_ = enc_size(max_nrec_[0]);
    unsigned __int128 cum = max_nrec_[0];
    for (unsigned d = 1; d <= depth_; ++d) {
      ptr_size_[d] = O_ + max_nrec_size_ + (d > 1 ? cum_size_[d - 1] : 0);
      if (node_size_ < kPrefix + ptr_size_[d] + rrec_ + ptr_size_[d])
        fail_at(hw_, "node size too small for depth " + std::to_string(d));
      max_nrec_[d] = (node_size_ - (kPrefix + ptr_size_[d])) / (rrec_ + ptr_size_[d]);
      cum = (cum + 0) * (max_nrec_[d] + 1) + max_nrec_[d];
      const uint64_t c = cum > ~uint64_t(0) ? ~uint64_t(0) : static_cast<uint64_t>(cum);
      cum_size_[d] = enc_size(c);
    }
  }

  std::vector<uint8_t> read_node(const Where& w, const char* sig, uint64_t bytes) {
    if (bytes > node_size_) fail_at(w, "record count above node capacity");
    std::vector<uint8_t> buf = ctx_.read(w, bytes);
    verify_checksum(w, buf.data(), buf.size());
    Cursor c(w, ctx_.geo, buf);
    c.expect_signature(sig);
    if (c.u8() != 0) fail_at(w, "unsupported version");
    if (c.u8() != type_) fail_at(w, "record type differs from the header's");
    return buf;
  }

  void records(const Where& w, const uint8_t* p, uint64_t n) {
    const size_t rank = ctx_.rank();
    std::vector<uint64_t> scaled(rank);
    for (uint64_t i = 0; i < n; ++i, p += rrec_) {
      uint64_t a = le_uint(p, O_);
      if (O_ < 8 && a == (uint64_t(1) << (8 * O_)) - 1) a = kUndefAddr;
      size_t off = O_;
      uint64_t size = ctx_.chunk_bytes;
      uint32_t mask = 0;
      if (type_ == 11) {
        size = le_uint(p + off, size_len_);
        mask = static_cast<uint32_t>(le_uint(p + off + size_len_, 4));
        off += size_len_ + 4;
      }
      for (size_t k = 0; k < rank; ++k) scaled[k] = le_uint(p + off + 8 * k, 8);
      if (a == kUndefAddr) fail_at(w, "record with an undefined chunk address");
      ctx_.add(w, scaled.data(), a, size, mask);
    }
    seen_ += n;
  }

  void read_leaf(const NodeRef& n) {
    Where w = ctx_.where("v2 B-tree leaf node", n.addr);
    std::vector<uint8_t> buf = read_node(w, "BTLF", kPrefix + n.nrec * rrec_);
    records(w, buf.data() + 6, n.nrec);
  }

  void read_internal(const NodeRef& n, std::vector<NodeRef>& next) {
    Where w = ctx_.where("v2 B-tree internal node", n.addr);
    const uint64_t psize = ptr_size_[n.depth];
    std::vector<uint8_t> buf = read_node(w, "BTIN", kPrefix + n.nrec * rrec_ + (n.nrec + 1) * psize);
    records(w, buf.data() + 6, n.nrec);
    Cursor c(w, ctx_.geo, buf);
    c.seek(6 + n.nrec * rrec_);
    for (uint64_t i = 0; i <= n.nrec; ++i) {
      NodeRef child{};
      child.addr = c.addr();
      child.nrec = c.u(max_nrec_size_);
      if (n.depth > 1) c.u(cum_size_[n.depth - 1]);  // total records below
      child.depth = n.depth - 1;
      if (child.addr == kUndefAddr) fail_at(w, "undefined child address");
      if (child.nrec > max_nrec_[child.depth]) fail_at(w, "child record count above node capacity");
      next.push_back(child);
    }
  }

  // The nodes of a level, their sizes from the record counts their parents gave.
  void announce(const std::vector<NodeRef>& nodes) {
    IndexHint hint;
    for (const NodeRef& n : nodes)
      hint.add(n.addr, kPrefix + n.nrec * rrec_ + (n.depth ? (n.nrec + 1) * ptr_size_[n.depth] : 0));
    hint.give(ctx_);
  }

  IndexContext& ctx_;
  const size_t O_;
  Where hw_;
  unsigned type_ = 0;
  uint64_t node_size_ = 0;
  uint64_t rrec_ = 0;
  unsigned depth_ = 0;
  uint64_t total_ = 0;
  uint64_t seen_ = 0;
  size_t size_len_ = 0;
  unsigned max_nrec_size_ = 0;
  std::vector<uint64_t> max_nrec_, cum_size_, ptr_size_;
};

}  // namespace

void read_btree_v2(IndexContext& ctx) { BTree2Reader(ctx).run(); }

}  // namespace h5d::fmt::detail
