// Version 1 B-tree chunk index (File Format Specification v3, III.A.1 "Version 1 B-trees",
// node type 1 = raw data chunks). Node: 'TREE', node type, level, entries used, left and right
// sibling addresses, then key 0, child 0, key 1, ..., child n-1, key n. A chunk key is the
// chunk's stored size (u32), filter mask (u32) and rank+1 u64 offsets in elements (the last one
// is the element-size dimension, always 0). At level 0 the children are chunk addresses. One
// read per node; an explicit stack, a visited set and the level check bound the walk.
#include <algorithm>
#include <unordered_set>

#include "core/h5format/index_internal.h"

namespace h5d::fmt::detail {

namespace {

struct Node {
  uint64_t addr;  // absolute
  int level;      // expected level, -1 for the root
};

}  // namespace

void read_btree_v1(IndexContext& ctx) {
  const size_t rank = ctx.rank();
  const size_t O = ctx.geo.sizeof_offsets;
  const size_t key_size = 8 + 8 * (rank + 1);
  const size_t header = 8 + 2 * O;
  std::vector<Node> stack{{ctx.layout.index_addr, -1}};
  std::unordered_set<uint64_t> visited;
  std::vector<uint64_t> scaled(rank);
  while (!stack.empty()) {
    const Node node = stack.back();
    stack.pop_back();
    Where w = ctx.where("v1 B-tree node", node.addr);
    if (!visited.insert(node.addr).second) fail_at(w, "node visited twice (loop in the B-tree)");
    std::vector<uint8_t> head = ctx.read(w, header);
    Cursor c(w, ctx.geo, head);
    c.expect_signature("TREE");
    const unsigned type = c.u8();
    const int level = c.u8();
    const unsigned entries = c.u16();
    if (type != 1) fail_at(w, "node type " + std::to_string(type) + ", expected 1 (raw data chunks)");
    if (node.level >= 0 && level != node.level)
      fail_at(w, "level " + std::to_string(level) + ", expected " + std::to_string(node.level));
    const uint64_t body = uint64_t(entries + 1) * key_size + uint64_t(entries) * O;
    std::vector<uint8_t> buf = ctx.read(w, header + body);
    Cursor b(w, ctx.geo, buf);
    b.seek(header);
    // Children are pushed in reverse so that they are visited in key order.
    const size_t first_child = stack.size();
    for (unsigned i = 0; i < entries; ++i) {
      const uint32_t size = b.u32();
      const uint32_t mask = b.u32();
      bool aligned = true;
      for (size_t k = 0; k < rank; ++k) {
        const uint64_t off = b.u64();
        scaled[k] = off / ctx.layout.chunk_dims[k];
        aligned &= off % ctx.layout.chunk_dims[k] == 0;
      }
      b.u64();  // element-size dimension
      const uint64_t child = b.rel_addr();
      if (child == kUndefAddr) fail_at(w, "undefined child address in entry " + std::to_string(i));
      if (level == 0) {
        if (!aligned) fail_at(w, "chunk offset not a multiple of the chunk dimensions");
        ctx.add(w, scaled.data(), child, size, mask);
      } else {
        stack.push_back({to_absolute(w, ctx.geo, child), level - 1});
      }
    }
    std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(first_child), stack.end());
  }
}

}  // namespace h5d::fmt::detail
