// read_chunk_map: dispatch on the chunk index type named by the data layout message, plus the
// two indexes that need no on-disk structure of their own (File Format Specification v3,
// IV.A.2.i, layout version 4): "Single Chunk" (the chunk address is the index address) and
// "Implicit" (chunks stored back to back from the index address, one slot per chunk of the
// grid over the maximum dimensions). The other indexes live in index_*.cpp.
#include <algorithm>

#include "core/fmt/index_internal.h"

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
  // A record outside the maximum extent cannot belong to this dataset: the index is damaged,
  // and the chunk that should be there would otherwise be served as fill.
  for (size_t k = 0; k < max_grid.size(); ++k)
    if (max_grid[k] != 0 && scaled[k] >= max_grid[k])
      fail_at(w, "chunk record " + coords(scaled) + " lies outside the maximum extent (" +
                     std::to_string(max_grid[k]) + " chunks along dimension " + std::to_string(k) + ")");
  const Shape& grid = map.grid();
  for (size_t k = 0; k < grid.size(); ++k)
    if (scaled[k] >= grid[k]) {  // beyond the current extent
      // Counted where the record names its chunk (B-trees); the array indexes hold a slot for
      // every chunk of the maximum extent, allocated early or not.
      if (layout.index_type == ChunkIndexType::BTreeV1 || layout.index_type == ChunkIndexType::BTreeV2)
        ++map.beyond_extent;
      return;
    }
  if (map.find(map.linear(scaled))) fail_at(w, "chunk " + coords(scaled) + " listed twice");
  map.set(scaled, ChunkLoc{rel_addr + geo.base, size, mask});
}

std::string IndexContext::coords(const uint64_t* scaled) const {
  std::string s = "(";
  for (size_t k = 0; k < rank(); ++k) s += (k ? "," : "") + std::to_string(scaled[k]);
  return s + ")";
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

// Evidence the file itself gives against a chunk's (address, size): no two chunks share a byte
// and no chunk covers a byte of the index's own nodes (libhdf5 allocates each apart, so a
// consistent file never does either). Every chunk that overlaps another chunk or an index
// structure is marked damaged, both chunks of a pair (which record is wrong cannot be told).
// Chunks are walked in address order: their linear order when that is it (the usual case, no
// extra memory), else a sorted list of linear indexes (8 bytes a chunk); the index structures
// are merged into disjoint ranges and looked up by binary search.
void check_extents(IndexContext& ctx) {
  ChunkMap& map = ctx.map;
  if (map.allocated() == 0) return;
  std::vector<uint64_t> scaled(ctx.rank());
  auto name = [&](uint64_t lin, const ChunkLoc& loc) {
    IndexContext::unlinear(lin, map.grid(), scaled.data());
    return "chunk " + ctx.coords(scaled.data()) + " at " + std::to_string(loc.addr) + " (" +
           std::to_string(loc.size) + " bytes)";
  };
  struct Range {
    uint64_t addr, end;
    const char* what;
  };
  std::vector<Range> nodes;
  for (const auto& e : ctx.structures) nodes.push_back({e.addr, e.addr + e.size, e.what});
  std::sort(nodes.begin(), nodes.end(), [](const Range& x, const Range& y) { return x.addr < y.addr; });
  std::vector<Range> merged;
  for (const Range& r : nodes) {
    if (!merged.empty() && r.addr < merged.back().end)
      merged.back().end = std::max(merged.back().end, r.end);
    else
      merged.push_back(r);
  }
  // The furthest-reaching chunk so far: a chunk starting before its end overlaps it.
  uint64_t reach_lin = 0, reach_end = 0;
  bool any = false;
  auto visit = [&](uint64_t lin, const ChunkLoc& loc) {
    if (loc.size == 0) return;
    const uint64_t end = loc.addr + loc.size;
    if (any && loc.addr < reach_end) {
      const ChunkLoc* other = map.find(reach_lin);
      const std::string why = name(reach_lin, *other) + " and " + name(lin, loc) +
                              " overlap in the file: the index record of one of them is damaged";
      map.mark_damaged(reach_lin, why);
      map.mark_damaged(lin, why);
    }
    if (!any || end > reach_end) {
      reach_lin = lin;
      reach_end = end;
      any = true;
    }
    auto it = std::upper_bound(merged.begin(), merged.end(), end - 1,
                               [](uint64_t v, const Range& r) { return v < r.addr; });
    if (it != merged.begin() && std::prev(it)->end > loc.addr)
      map.mark_damaged(lin, name(lin, loc) + " overlaps the " + std::prev(it)->what + " at " +
                                std::to_string(std::prev(it)->addr) + ": its index record is damaged");
  };
  bool sorted = true;
  uint64_t prev = 0;
  map.for_each([&](uint64_t, const ChunkLoc& loc) {
    sorted = sorted && loc.addr >= prev;
    prev = loc.addr;
  });
  if (sorted) {
    map.for_each(visit);
    return;
  }
  std::vector<uint64_t> order;
  order.reserve(map.allocated());
  map.for_each([&](uint64_t lin, const ChunkLoc&) { order.push_back(lin); });
  std::sort(order.begin(), order.end(),
            [&](uint64_t x, uint64_t y) { return map.find(x)->addr < map.find(y)->addr; });
  for (uint64_t lin : order) visit(lin, *map.find(lin));
}

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

  ChunkMap map(dims, layout.chunk_dims, src.size());
  detail::IndexContext ctx{src, geo, layout, dims, maxdims, elem_size, filtered, map, 0, {}, 0, 0, 0, {}};
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
  detail::check_extents(ctx);
  return map;
}

}  // namespace h5d::fmt
