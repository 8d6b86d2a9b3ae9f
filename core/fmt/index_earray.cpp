// Extensible array chunk index (File Format Specification v3, VII.C "Extensible Array Indexing
// Information": header 'EAHD', index block 'EAIB', secondary (super) blocks 'EASB', data blocks
// 'EADB'). Element i is the chunk whose linear index is i over the "swizzled" grid: the single
// unlimited dimension moved to the front, the other dimensions over their maximum extent.
// The first elements live in the index block; the rest in data blocks grouped into super blocks
// (super block u holds 2^(u/2) data blocks of 2^((u+1)/2) * min elements). The data blocks of
// the first super blocks are pointed to from the index block directly; the rest through 'EASB'
// blocks. Large data blocks are paged; the super block holds their page-initialized bitmap.
#include "core/fmt/index_internal.h"

namespace h5d::fmt::detail {

namespace {

unsigned log2_exact(const Where& w, uint64_t v, const char* what) {
  if (v == 0 || (v & (v - 1))) fail_at(w, std::string(what) + " is not a power of two");
  return static_cast<unsigned>(__builtin_ctzll(v));
}

struct SuperBlockInfo {
  uint64_t ndblks;
  uint64_t dblk_nelmts;
  uint64_t start_idx;  // first element, counted after the index block elements
  uint64_t start_dblk;
};

class ExtensibleArrayReader {
 public:
  explicit ExtensibleArrayReader(IndexContext& ctx) : ctx_(ctx), O_(ctx.geo.sizeof_offsets) {}

  void run() {
    read_header();
    if (iblock_addr_ == kUndefAddr || limit_ == 0) return;
    read_index_block();
  }

 private:
  void read_header() {
    const size_t L = ctx_.geo.sizeof_lengths;
    hw_ = ctx_.where("extensible array header", ctx_.layout.index_addr);
    std::vector<uint8_t> buf = ctx_.read(hw_, 12 + 6 * L + O_ + 4);
    verify_checksum(hw_, buf.data(), buf.size());
    Cursor h(hw_, ctx_.geo, buf);
    h.expect_signature("EAHD");
    if (h.u8() != 0) fail_at(hw_, "unsupported version");
    client_ = h.u8();
    esize_ = h.u8();
    max_bits_ = h.u8();
    iblk_elmts_ = h.u8();
    const unsigned dblk_min = h.u8();
    const unsigned sblk_min_ptrs = h.u8();
    const unsigned page_bits = h.u8();
    for (int i = 0; i < 4; ++i) h.length();  // super/data block counts and sizes
    const uint64_t max_idx_set = h.length();
    h.length();  // elements realized
    iblock_addr_ = h.addr();
    codec_ = std::make_unique<ArrayElementCodec>(ctx_, hw_, client_, esize_);

    if (max_bits_ == 0 || max_bits_ > 64) fail_at(hw_, "bad maximum element bits");
    if (page_bits >= 32) fail_at(hw_, "bad page bits");
    const unsigned dblk_min_log = log2_exact(hw_, dblk_min, "data block minimum elements");
    log2_exact(hw_, sblk_min_ptrs, "super block minimum data pointers");
    if (dblk_min_log > max_bits_) fail_at(hw_, "data block minimum elements above the maximum");
    if (sblk_min_ptrs < 2) fail_at(hw_, "super block minimum data pointers below 2");
    page_nelmts_ = uint64_t(1) << page_bits;
    arr_off_size_ = (max_bits_ + 7) / 8;

    const unsigned nsblks = 1 + (max_bits_ - dblk_min_log);
    uint64_t start_idx = 0, start_dblk = 0;
    for (unsigned u = 0; u < nsblks && u < 128; ++u) {
      SuperBlockInfo s{};
      s.ndblks = uint64_t(1) << std::min(u / 2, 63u);
      const unsigned shift = (u + 1) / 2 + dblk_min_log;
      s.dblk_nelmts = shift >= 64 ? ~uint64_t(0) : uint64_t(1) << shift;
      s.start_idx = start_idx;
      s.start_dblk = start_dblk;
      sblk_.push_back(s);
      uint64_t n;
      if (mul_overflows(s.ndblks, s.dblk_nelmts, &n) || __builtin_add_overflow(start_idx, n, &start_idx))
        start_idx = ~uint64_t(0);
      start_dblk += s.ndblks;
    }
    iblk_nsblks_ = 2 * log2_exact(hw_, sblk_min_ptrs, "super block minimum data pointers");
    iblk_ndblk_addrs_ = 2 * (uint64_t(sblk_min_ptrs) - 1);
    if (iblk_nsblks_ > sblk_.size()) fail_at(hw_, "inconsistent super block parameters");
    iblk_nsblk_addrs_ = sblk_.size() - iblk_nsblks_;

    // Only elements of chunks inside the current extent matter: i < grid[unlim] * prod(other).
    set_swizzled_grid();
    limit_ = std::min(max_idx_set, grid_limit_);
  }

  void set_swizzled_grid() {
    const size_t rank = ctx_.rank();
    unlim_ = rank;
    for (size_t k = 0; k < rank; ++k)
      if (ctx_.max_grid[k] == 0) {
        if (unlim_ != rank) fail_at(hw_, "extensible array index with two unlimited dimensions");
        unlim_ = k;
      }
    if (unlim_ == rank) fail_at(hw_, "extensible array index without an unlimited dimension");
    uint64_t inner = 1;
    for (size_t k = 0; k < rank; ++k)
      if (k != unlim_ && mul_overflows(inner, ctx_.max_grid[k], &inner)) fail_at(hw_, "chunk grid too large");
    inner_ = inner;
    if (mul_overflows(inner, ctx_.map.grid()[unlim_], &grid_limit_)) grid_limit_ = ~uint64_t(0);
    scaled_.resize(rank);
  }

  // Element `idx` of the array -> chunk coordinates, then into the map.
  void element(const Where& w, uint64_t idx, const uint8_t* p) {
    if (idx >= limit_) return;
    uint64_t addr, size;
    uint32_t mask;
    codec_->decode(p, &addr, &size, &mask);
    if (addr == kUndefAddr) return;
    uint64_t rest = idx % inner_;
    for (size_t k = ctx_.rank(); k-- > 0;) {
      if (k == unlim_) continue;
      scaled_[k] = rest % ctx_.max_grid[k];
      rest /= ctx_.max_grid[k];
    }
    scaled_[unlim_] = idx / inner_;
    ctx_.add(w, scaled_.data(), addr, size, mask);
  }

  void read_index_block() {
    Where w = ctx_.where("extensible array index block", iblock_addr_);
    const uint64_t total = 6 + O_ + uint64_t(iblk_elmts_) * esize_ + (iblk_ndblk_addrs_ + iblk_nsblk_addrs_) * O_ + 4;
    std::vector<uint8_t> buf = ctx_.read(w, total);
    verify_checksum(w, buf.data(), buf.size());
    Cursor c(w, ctx_.geo, buf);
    c.expect_signature("EAIB");
    check_prefix(c, w);
    for (uint64_t i = 0; i < iblk_elmts_; ++i) {
      element(w, i, c.here());
      c.skip(esize_);
    }
    std::vector<uint64_t> dblks(iblk_ndblk_addrs_), sblks(iblk_nsblk_addrs_);
    for (auto& a : dblks) a = c.addr();
    for (auto& a : sblks) a = c.addr();

    // The blocks the index block points to are read next, one after another: ask the source
    // for all of them at once first (a cold array is one round trip per block otherwise), then
    // for the data blocks of all the super blocks at once.
    IndexHint hint;
    for (size_t u = 0; u < sblk_.size(); ++u) {
      const SuperBlockInfo& s = sblk_[u];
      const uint64_t first = iblk_elmts_ + s.start_idx;
      if (s.start_idx == ~uint64_t(0) || first >= limit_) break;
      if (u < iblk_nsblks_) {
        for (uint64_t j = 0; j < s.ndblks && s.start_dblk + j < dblks.size(); ++j)
          if (first + j * s.dblk_nelmts < limit_) hint.add(dblks[s.start_dblk + j], data_block_bytes(s.dblk_nelmts));
      } else if (u - iblk_nsblks_ < sblks.size()) {
        hint.add(sblks[u - iblk_nsblks_], super_block_bytes(s));
      }
    }
    hint.give(ctx_);

    std::vector<PendingBlock> pending;  // the super blocks' data blocks
    for (size_t u = 0; u < sblk_.size(); ++u) {
      const SuperBlockInfo& s = sblk_[u];
      const uint64_t first = iblk_elmts_ + s.start_idx;
      if (s.start_idx == ~uint64_t(0) || first >= limit_) break;
      if (u < iblk_nsblks_) {
        for (uint64_t j = 0; j < s.ndblks; ++j) {
          const uint64_t d = s.start_dblk + j;
          if (d >= dblks.size()) fail_at(w, "data block index out of range");
          read_data_block(dblks[d], first + j * s.dblk_nelmts, s.dblk_nelmts, nullptr, 0);
        }
      } else {
        read_super_block(sblks[u - iblk_nsblks_], s, first, pending);
      }
    }
    IndexHint more;
    for (const PendingBlock& b : pending) more.add(b.addr, data_block_bytes(b.nelmts));
    more.give(ctx_);
    for (const PendingBlock& b : pending)
      read_data_block(b.addr, b.first, b.nelmts, b.super ? b.super->data() + b.bitmap_at : nullptr, b.bit0);
  }

  // A data block a super block points to, read after all the super blocks.
  struct PendingBlock {
    uint64_t addr, first, nelmts;
    std::shared_ptr<const std::vector<uint8_t>> super;  // its super block (for the page bitmap); null: none
    size_t bitmap_at;
    uint64_t bit0;
  };

  void check_prefix(Cursor& c, const Where& w) {
    if (c.u8() != 0) fail_at(w, "unsupported version");
    if (c.u8() != client_) fail_at(w, "client id differs from the header's");
    if (c.addr() != ctx_.layout.index_addr) fail_at(w, "header address does not point back to the header");
  }

  void read_super_block(uint64_t addr, const SuperBlockInfo& s, uint64_t first, std::vector<PendingBlock>& out) {
    if (addr == kUndefAddr) return;
    Where w = ctx_.where("extensible array super block", addr);
    const uint64_t npages = s.dblk_nelmts > page_nelmts_ ? s.dblk_nelmts / page_nelmts_ : 0;
    // The page-initialized bitmap is sized as ceil(npages / 8) bytes per data block, but its bits
    // are numbered continuously: data block j, page p is bit j * npages + p (H5EAsblock.c).
    const uint64_t bytes = super_block_bytes(s);
    if (bytes == 0) fail_at(w, "too many data blocks");
    const uint64_t bitmap_bytes = s.ndblks * ((npages + 7) / 8);
    auto buf = std::make_shared<const std::vector<uint8_t>>(ctx_.read(w, bytes));
    verify_checksum(w, buf->data(), buf->size());
    Cursor c(w, ctx_.geo, *buf);
    c.expect_signature("EASB");
    check_prefix(c, w);
    c.skip(arr_off_size_);  // block offset (informative)
    const size_t bitmap_at = c.pos();
    c.skip(bitmap_bytes);
    for (uint64_t j = 0; j < s.ndblks; ++j) {
      const uint64_t start = first + j * s.dblk_nelmts;
      const uint64_t daddr = c.addr();
      if (start >= limit_) break;
      if (daddr == kUndefAddr) continue;
      out.push_back({daddr, start, s.dblk_nelmts, npages ? buf : nullptr, bitmap_at, j * npages});
    }
  }

  // A data block of `nelmts` elements starting at array element `first`. Paged data blocks
  // (nelmts > page size) come with the super block's page bitmap, their pages from bit `bit0`.
  void read_data_block(uint64_t addr, uint64_t first, uint64_t nelmts, const uint8_t* bitmap, uint64_t bit0) {
    if (addr == kUndefAddr) return;
    Where w = ctx_.where("extensible array data block", addr);
    const bool paged = nelmts > page_nelmts_;
    if (paged && !bitmap) fail_at(w, "paged data block without a page bitmap");
    const uint64_t bytes = data_block_bytes(nelmts);
    if (bytes == 0) fail_at(w, std::to_string(nelmts) + " elements cannot fit in the file");
    const uint64_t npages = paged ? nelmts / page_nelmts_ : 0;
    const uint64_t prefix = 6 + O_ + arr_off_size_ + 4;
    std::vector<uint8_t> buf = ctx_.read(w, bytes);
    Cursor c(w, ctx_.geo, buf);
    c.expect_signature("EADB");
    check_prefix(c, w);
    c.skip(arr_off_size_);  // block offset (informative)
    if (!paged) {
      verify_checksum(w, buf.data(), buf.size());
      const uint8_t* p = buf.data() + prefix - 4;
      for (uint64_t i = 0; i < nelmts && first + i < limit_; ++i) element(w, first + i, p + i * esize_);
      return;
    }
    verify_checksum(w, buf.data(), prefix);
    const uint64_t page_bytes = page_nelmts_ * esize_ + 4;
    for (uint64_t pg = 0; pg < npages; ++pg) {
      const uint64_t pfirst = first + pg * page_nelmts_;
      if (pfirst >= limit_) break;
      if (!bitmap_get(bitmap, bit0 + pg)) continue;
      const uint64_t off = prefix + pg * page_bytes;
      Where pw = ctx_.where("extensible array data block page", addr + off);
      verify_checksum(pw, buf.data() + off, page_bytes);
      for (uint64_t i = 0; i < page_nelmts_ && pfirst + i < limit_; ++i)
        element(pw, pfirst + i, buf.data() + off + i * esize_);
    }
  }

  // Bytes of a data block of `nelmts` elements (its pages' checksums included) and of a super
  // block (its page bitmap and data block addresses): what read_data_block and read_super_block
  // read, and what the hints announce; 0 where they could not fit in the file.
  uint64_t data_block_bytes(uint64_t nelmts) const {
    uint64_t elems = 0;
    if (mul_overflows(nelmts, esize_, &elems) || elems > ctx_.src.size()) return 0;
    const uint64_t npages = nelmts > page_nelmts_ ? nelmts / page_nelmts_ : 0;
    return 6 + O_ + arr_off_size_ + 4 + elems + npages * 4;
  }
  uint64_t super_block_bytes(const SuperBlockInfo& s) const {
    const uint64_t npages = s.dblk_nelmts > page_nelmts_ ? s.dblk_nelmts / page_nelmts_ : 0;
    uint64_t bitmap = 0;
    if (s.ndblks > ctx_.src.size() / O_ || mul_overflows(s.ndblks, (npages + 7) / 8, &bitmap) ||
        bitmap > ctx_.src.size())
      return 0;
    return 6 + O_ + arr_off_size_ + bitmap + s.ndblks * O_ + 4;
  }
  IndexContext& ctx_;
  const size_t O_;
  Where hw_;
  unsigned client_ = 0;
  size_t esize_ = 0;
  unsigned max_bits_ = 0;
  unsigned iblk_elmts_ = 0;
  uint64_t page_nelmts_ = 0;
  size_t arr_off_size_ = 0;
  uint64_t iblock_addr_ = kUndefAddr;
  std::vector<SuperBlockInfo> sblk_;
  size_t iblk_nsblks_ = 0;
  uint64_t iblk_ndblk_addrs_ = 0;
  uint64_t iblk_nsblk_addrs_ = 0;
  std::unique_ptr<ArrayElementCodec> codec_;
  size_t unlim_ = 0;
  uint64_t inner_ = 1;
  uint64_t grid_limit_ = 0;
  uint64_t limit_ = 0;
  std::vector<uint64_t> scaled_;
};

}  // namespace

void read_extensible_array(IndexContext& ctx) { ExtensibleArrayReader(ctx).run(); }

}  // namespace h5d::fmt::detail
