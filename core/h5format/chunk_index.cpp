// read_chunk_map: dispatch on the chunk index type named by the data layout message, plus the
// two indexes that need no on-disk structure of their own (File Format Specification v3,
// IV.A.2.i, layout version 4): "Single Chunk" (the chunk address is the index address) and
// "Implicit" (chunks stored back to back from the index address, one slot per chunk of the
// grid over the maximum dimensions). The other indexes live in index_*.cpp.
#include <algorithm>

#include "core/h5format/index_internal.h"

namespace h5d::fmt {

namespace detail {

void IndexContext::add(const Where& w, const uint64_t* scaled, uint64_t rel_addr, uint64_t size,
                       uint32_t mask) {
  if (rel_addr == kUndefAddr) return;
  if (++records > record_limit)
    fail_at(w, "more chunk records (" + std::to_string(records) + ") than chunks in the dataspace (" +
                   std::to_string(record_limit) + ")");
  const uint64_t fsize = std::max(src.size(), geo.stored_end);
  if (rel_addr >= fsize || geo.base > fsize - rel_addr || size > fsize - rel_addr - geo.base)
    fail_at(w, "chunk at address " + std::to_string(rel_addr) + " (+ base " + std::to_string(geo.base) +
                   ") of " + std::to_string(size) + " bytes extends beyond the end of the file (" +
                   std::to_string(fsize) + " bytes)");
  const Shape& grid = map.grid();
  for (size_t k = 0; k < grid.size(); ++k)
    if (scaled[k] >= grid[k]) return;  // beyond the current extent
  if (map.find(map.linear(scaled)))
    fail_at(w, "chunk " + std::to_string(map.linear(scaled)) + " listed twice");
  map.set(scaled, ChunkLoc{rel_addr + geo.base, size, mask});
}

bool IndexContext::unlinear(uint64_t idx, const Shape& grid, uint64_t* scaled) {
  for (size_t k = grid.size(); k-- > 0;) {
    if (grid[k] == 0) return false;
    scaled[k] = idx % grid[k];
    idx /= grid[k];
  }
  return idx == 0;
}

ArrayElementCodec::ArrayElementCodec(const IndexContext& ctx, const Where& w, unsigned client_id,
                                     size_t elem_bytes_)
    : elem_bytes(elem_bytes_), offsets(ctx.geo.sizeof_offsets), filtered(client_id == 1),
      chunk_bytes(ctx.chunk_bytes) {
  undef = offsets >= 8 ? kUndefAddr : (uint64_t(1) << (8 * offsets)) - 1;
  if (client_id > 1) fail_at(w, "unknown client id " + std::to_string(client_id));
  if (!filtered) {
    if (elem_bytes != offsets) fail_at(w, "element size " + std::to_string(elem_bytes) + " for unfiltered chunks");
  } else {
    if (elem_bytes < offsets + 5 || elem_bytes > offsets + 12)
      fail_at(w, "element size " + std::to_string(elem_bytes) + " for filtered chunks");
    size_len = elem_bytes - offsets - 4;
  }
}

namespace {

void read_single_chunk(IndexContext& ctx) {
  const LayoutInfo& l = ctx.layout;
  Where w = ctx.where("single chunk index", l.index_addr);
  std::vector<uint64_t> zero(ctx.rank(), 0);
  const uint64_t rel = l.index_addr - ctx.geo.base;
  if (l.single_chunk_filtered)
    ctx.add(w, zero.data(), rel, l.single_chunk_size, l.single_chunk_filter_mask);
  else
    ctx.add(w, zero.data(), rel, ctx.chunk_bytes, 0);
}

void read_implicit(IndexContext& ctx) {
  const LayoutInfo& l = ctx.layout;
  Where w = ctx.where("implicit chunk index", l.index_addr);
  uint64_t nslots = 1;
  for (auto g : ctx.max_grid) {
    if (g == 0) fail_at(w, "implicit index with an unlimited dimension");
    if (mul_overflows(nslots, g, &nslots)) fail_at(w, "too many chunks");
  }
  uint64_t total = 0;
  const uint64_t fsize = std::max(ctx.src.size(), ctx.geo.stored_end);
  if (mul_overflows(nslots, ctx.chunk_bytes, &total) || total > fsize || l.index_addr > fsize - total)
    fail_at(w, std::to_string(nslots) + " chunks of " + std::to_string(ctx.chunk_bytes) +
                   " bytes extend beyond the end of the file");
  const uint64_t rel = l.index_addr - ctx.geo.base;
  std::vector<uint64_t> scaled(ctx.rank());
  for (uint64_t s = 0; s < nslots; ++s) {
    IndexContext::unlinear(s, ctx.max_grid, scaled.data());
    ctx.add(w, scaled.data(), rel + s * ctx.chunk_bytes, ctx.chunk_bytes, 0);
  }
}

}  // namespace
}  // namespace detail

ChunkMap read_chunk_map(const ByteSource& src, const FileGeometry& geo, const LayoutInfo& layout,
                        const Shape& dims, const Shape& maxdims, size_t elem_size, bool filtered) {
  check_geometry(src, geo);
  const std::string prefix = src.name() + ": chunk index: ";
  if (layout.layout_class != LayoutClass::Chunked) fail_data(prefix + "dataset is not chunked");
  const size_t rank = layout.chunk_dims.size();
  if (rank == 0 || dims.size() != rank || maxdims.size() != rank)
    fail_data(prefix + "rank mismatch between dataspace (" + std::to_string(dims.size()) +
              ") and chunk dims (" + std::to_string(rank) + ")");
  if (elem_size == 0) fail_data(prefix + "element size 0");

  ChunkMap map(dims, layout.chunk_dims);
  detail::IndexContext ctx{src, geo, layout, dims, maxdims, elem_size, filtered, map, 0, {}, 0, 0};
  uint64_t cb = elem_size;
  for (auto c : layout.chunk_dims)
    if (mul_overflows(cb, c, &cb)) fail_data(prefix + "chunk size overflows");
  ctx.chunk_bytes = cb;
  ctx.max_grid.resize(rank);
  uint64_t limit = 1;
  bool limit_overflow = false;
  for (size_t k = 0; k < rank; ++k) {
    const uint64_t c = layout.chunk_dims[k];
    const bool unlimited = maxdims[k] == kUndefAddr;
    ctx.max_grid[k] = unlimited ? 0 : maxdims[k] / c + (maxdims[k] % c != 0);
    limit_overflow |= mul_overflows(limit, std::max(ctx.max_grid[k], map.grid()[k]), &limit);
  }
  ctx.record_limit = limit_overflow ? kUndefAddr : limit;
  ctx.read_budget = 4 * src.size() + (uint64_t(1) << 20);

  if (layout.index_addr == kUndefAddr) return map;  // nothing allocated yet
  switch (layout.index_type) {
    case ChunkIndexType::BTreeV1: detail::read_btree_v1(ctx); break;
    case ChunkIndexType::SingleChunk: detail::read_single_chunk(ctx); break;
    case ChunkIndexType::Implicit: detail::read_implicit(ctx); break;
    case ChunkIndexType::FixedArray: detail::read_fixed_array(ctx); break;
    case ChunkIndexType::ExtensibleArray: detail::read_extensible_array(ctx); break;
    case ChunkIndexType::BTreeV2: detail::read_btree_v2(ctx); break;
    case ChunkIndexType::None: fail_data(prefix + "no chunk index type");
  }
  return map;
}

}  // namespace h5d::fmt
