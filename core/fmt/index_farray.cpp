// Fixed array chunk index (File Format Specification v3, VII.B "Fixed Array Indexing
// Information": header 'FAHD' and data block 'FADB'). Entry i is the chunk with linear index i
// over the grid of the maximum dimensions (all fixed for this index). Above 2^page_bits entries
// the data block is paged: a bitmap of initialized pages (MSB first) sits in the data block
// prefix, then the pages follow it, each with its own checksum. The whole data block is read
// with one read.
#include "core/fmt/index_internal.h"

namespace h5d::fmt::detail {

void read_fixed_array(IndexContext& ctx) {
  const size_t O = ctx.geo.sizeof_offsets;
  const size_t L = ctx.geo.sizeof_lengths;
  Where hw = ctx.where("fixed array header", ctx.layout.index_addr);
  std::vector<uint8_t> hbuf = ctx.read(hw, 4 + 4 + L + O + 4);
  verify_checksum(hw, hbuf.data(), hbuf.size());
  Cursor h(hw, ctx.geo, hbuf);
  h.expect_signature("FAHD");
  if (h.u8() != 0) fail_at(hw, "unsupported version");
  const unsigned client = h.u8();
  const size_t esize = h.u8();
  const unsigned page_bits = h.u8();
  const uint64_t nelmts = h.length();
  const uint64_t dblk_addr = h.addr();
  ArrayElementCodec codec(ctx, hw, client, esize);
  if (page_bits >= 32) fail_at(hw, "page bits " + std::to_string(page_bits) + " out of range");
  if (dblk_addr == kUndefAddr || nelmts == 0) return;

  // Entry count against the file size before any allocation.
  uint64_t elem_total = 0;
  if (mul_overflows(nelmts, esize, &elem_total) || elem_total > ctx.src.size())
    fail_at(hw, std::to_string(nelmts) + " entries cannot fit in the file");
  const uint64_t page_nelmts = uint64_t(1) << page_bits;
  const bool paged = nelmts > page_nelmts;
  const uint64_t npages = paged ? (nelmts + page_nelmts - 1) / page_nelmts : 0;
  const uint64_t bitmap_bytes = (npages + 7) / 8;
  const uint64_t prefix = 4 + 1 + 1 + O + bitmap_bytes + 4;
  const uint64_t total = prefix + elem_total + npages * 4;

  Where dw = ctx.where("fixed array data block", dblk_addr);
  std::vector<uint8_t> buf = ctx.read(dw, total);
  Cursor d(dw, ctx.geo, buf);
  d.expect_signature("FADB");
  if (d.u8() != 0) fail_at(dw, "unsupported version");
  if (d.u8() != client) fail_at(dw, "client id differs from the header's");
  if (d.addr() != ctx.layout.index_addr) fail_at(dw, "header address does not point back to the header");

  std::vector<uint64_t> scaled(ctx.rank());
  auto entries = [&](const Where& w, const uint8_t* p, uint64_t first, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t addr, size;
      uint32_t mask;
      codec.decode(p + i * esize, &addr, &size, &mask);
      if (addr == kUndefAddr) continue;
      if (!IndexContext::unlinear(first + i, ctx.max_grid, scaled.data()))
        fail_at(w, "entry " + std::to_string(first + i) + " lies outside the chunk grid");
      ctx.add(w, scaled.data(), addr, size, mask);
    }
  };

  if (!paged) {
    verify_checksum(dw, buf.data(), buf.size());
    entries(dw, buf.data() + prefix - 4, 0, nelmts);
    return;
  }
  verify_checksum(dw, buf.data(), prefix);
  const uint8_t* bitmap = buf.data() + prefix - 4 - bitmap_bytes;
  uint64_t off = prefix;
  for (uint64_t pg = 0; pg < npages; ++pg) {
    const uint64_t first = pg * page_nelmts;
    const uint64_t n = std::min(page_nelmts, nelmts - first);
    const uint64_t bytes = n * esize + 4;
    if (bitmap_get(bitmap, pg)) {
      Where pw = ctx.where("fixed array data block page", dblk_addr + off);
      verify_checksum(pw, buf.data() + off, bytes);
      entries(pw, buf.data() + off, first, n);
    }
    off += bytes;
  }
}

}  // namespace h5d::fmt::detail
