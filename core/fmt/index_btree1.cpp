// Version 1 B-tree chunk index (File Format Specification v3, III.A.1 "Version 1 B-trees",
// node type 1 = raw data chunks). Node: 'TREE', node type, level, entries used, left and right
// sibling addresses, then key 0, child 0, key 1, ..., child n-1, key n. A chunk key is the
// chunk's stored size (u32), filter mask (u32) and rank+1 u64 offsets in elements (the last one
// is the element-size dimension, always 0). At level 0 the children are chunk addresses. One
// read per node; an explicit stack, a visited set and the level check bound the walk.
#include <unordered_set>

#include <algorithm>

#include "core/fmt/index_internal.h"

namespace h5d::fmt::detail {

namespace {

using Key = std::vector<uint64_t>;  // scaled chunk coordinates, then the element-size dimension

struct Node {
  uint64_t addr;  // absolute
  int level;      // expected level, -1 for the root
  // The keys this node's chunks must lie in, [lo, hi) (empty: unbounded): libhdf5 descends to
  // child i only for chunks between the parent's keys i and i+1, so a chunk outside them is one
  // it never finds (and serves as fill). Keys compare lexicographically (H5D__btree_cmp3).
  Key lo, hi;
};

std::string key_str(const Key& k) {
  std::string s = "(";
  for (size_t i = 0; i + 1 < k.size(); ++i) s += (i ? "," : "") + std::to_string(k[i]);
  return s + ")";
}

}  // namespace

constexpr uint64_t kNodeHint = 8192;

namespace {

// One node as read: its level and entries, keys 0..n (scaled), then per child its address,
// stored size, filter mask and whether its offsets are multiples of the chunk dimensions; per
// key whether its element-size offset is 0. Reused from node to node.
struct Entries {
  int level = 0;
  unsigned count = 0;
  uint64_t bytes = 0;  // the node's header and body
  std::vector<Key> keys;
  std::vector<uint64_t> children;
  std::vector<uint32_t> sizes, masks;
  std::vector<bool> aligned, elem_zero;
};

// Reads the node at w (expected at `expected_level`, -1 for the root) into e: its header
// checked, then all of it in one read, its keys and children decoded.
void read_node(IndexContext& ctx, const Where& w, int expected_level, Entries& e) {
  const size_t rank = ctx.rank();
  const size_t O = ctx.geo.sizeof_offsets;
  const size_t key_size = 8 + 8 * (rank + 1);
  const size_t header = 8 + 2 * O;
  std::vector<uint8_t> head = ctx.read(w, header);
  Cursor c(w, ctx.geo, head);
  c.expect_signature("TREE");
  const unsigned type = c.u8();
  const int level = c.u8();
  const unsigned entries = c.u16();
  if (type != 1) fail_at(w, "node type " + std::to_string(type) + ", expected 1 (raw data chunks)");
  if (expected_level >= 0 && level != expected_level)
    fail_at(w, "level " + std::to_string(level) + ", expected " + std::to_string(expected_level));
  const uint64_t body = uint64_t(entries + 1) * key_size + uint64_t(entries) * O;
  std::vector<uint8_t> buf = ctx.read(w, header + body);
  Cursor b(w, ctx.geo, buf);
  b.seek(header);
  e.level = level;
  e.count = entries;
  e.bytes = header + body;
  e.keys.assign(entries + 1, Key(rank + 1));
  e.children.assign(entries, 0);
  e.sizes.assign(entries, 0);
  e.masks.assign(entries, 0);
  e.aligned.assign(entries, true);
  e.elem_zero.assign(entries + 1, true);
  for (unsigned i = 0; i <= entries; ++i) {
    const uint32_t size = b.u32();
    const uint32_t mask = b.u32();
    bool al = true;
    for (size_t k = 0; k <= rank; ++k) {
      const uint64_t off = b.u64();
      const uint64_t dim = k < rank ? ctx.layout.chunk_dims[k] : ctx.layout.chunk_elem_size;
      e.keys[i][k] = off / dim;
      al &= k == rank || off % dim == 0;
      if (k == rank) e.elem_zero[i] = off == 0;
    }
    if (i == entries) break;  // the last key bounds the last child; no child follows it
    e.sizes[i] = size;
    e.masks[i] = mask;
    e.aligned[i] = al;
    e.children[i] = b.rel_addr();
  }
}

// Fails at w on a damaged entry: keys out of order or outside the parent's bounds, an
// undefined child, an element-size offset other than 0.
void check_entries(const Where& w, const Node& node, const Entries& e) {
  for (unsigned i = 0; i < e.count; ++i) {
    const std::string entry = "entry " + std::to_string(i) + " (key " + key_str(e.keys[i]) + ")";
    if (!(e.keys[i] < e.keys[i + 1]))
      fail_at(w, entry + " not below the next key " + key_str(e.keys[i + 1]) +
                     ": keys out of order (a damaged chunk index key)");
    if ((!node.lo.empty() && e.keys[i] < node.lo) || (!node.hi.empty() && !(e.keys[i] < node.hi)))
      fail_at(w, entry + " outside the keys its parent gives it, [" + key_str(node.lo) + ", " +
                     key_str(node.hi) + "): a damaged chunk index key");
    if (e.children[i] == kUndefAddr) fail_at(w, "undefined child address in " + entry);
    // A chunk's key (and a subtree's first key, a copy of one) has 0 in the element-size
    // dimension. libhdf5 compares that dimension too, so it never finds a chunk whose key
    // says otherwise (it serves fill there): the key is damaged, the chunk not to be trusted.
    if (!e.elem_zero[i])
      fail_at(w, entry + ": element-size offset not 0 (a damaged chunk index key)");
  }
}

// Asks the source for all the children of an internal node at once (a hint, see below).
void prefetch_children(IndexContext& ctx, const Where& w, const Entries& e) {
  // An internal node's children are read next, one after another: ask the source for all
  // of them at once first (a cold index on slow storage is one round trip per node otherwise;
  // the header is enough to bring a node's page in, the rest follows it in the file).
  // A node is stored at its full capacity (2K entries), which no node records: the hint asks
  // for at least kNodeHint bytes, a full node of HDF5's default K (32) or twice it at ranks up
  // to 4; a larger node costs its reader one more round trip, never a wrong byte.
  std::vector<std::pair<uint64_t, uint64_t>> next;
  for (unsigned i = 0; i < e.count; ++i)
    next.emplace_back(to_absolute(w, ctx.geo, e.children[i]), std::max<uint64_t>(e.bytes, kNodeHint));
  ctx.src.prefetch(next);
}

// Puts an internal node's children on the stack, each with the keys it must lie in.
void push_children(const IndexContext& ctx, const Where& w, const Node& node, const Entries& e,
                   std::vector<Node>& stack) {
  // Children are pushed in reverse so that they are visited in key order.
  for (unsigned i = e.count; i-- > 0;) {
    Key hi = e.keys[i + 1];
    if (!node.hi.empty() && node.hi < hi) hi = node.hi;
    stack.push_back({to_absolute(w, ctx.geo, e.children[i]), e.level - 1, e.keys[i], std::move(hi)});
  }
}

// Records the chunks of a leaf node; fails on one whose offset is not chunk-aligned.
void add_chunks(IndexContext& ctx, const Where& w, const Entries& e) {
  for (unsigned i = 0; i < e.count; ++i) {
    if (!e.aligned[i]) fail_at(w, "chunk offset " + key_str(e.keys[i]) + " not a multiple of the chunk dimensions");
    ctx.add(w, e.keys[i].data(), e.children[i], e.sizes[i], e.masks[i]);
  }
}

}  // namespace

void read_btree_v1(IndexContext& ctx) {
  std::vector<Node> stack{{ctx.layout.index_addr, -1, {}, {}}};
  std::unordered_set<uint64_t> visited;
  Entries e;
  while (!stack.empty()) {
    const Node node = std::move(stack.back());
    stack.pop_back();
    Where w = ctx.where("v1 B-tree node", node.addr);
    if (!visited.insert(node.addr).second) fail_at(w, "node visited twice (loop in the B-tree)");
    read_node(ctx, w, node.level, e);
    check_entries(w, node, e);
    if (e.level > 0 && e.count > 1) prefetch_children(ctx, w, e);
    if (e.level != 0) {
      push_children(ctx, w, node, e, stack);
    } else {
      add_chunks(ctx, w, e);
    }
  }
}

}  // namespace h5d::fmt::detail
