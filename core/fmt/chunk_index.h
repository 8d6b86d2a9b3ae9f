// Reading a dataset's storage layout and chunk index straight from the file, in linear time:
// object header -> data layout message -> index (v1 B-tree, single chunk, implicit, fixed array
// incl. paged, extensible array, v2 B-tree). The HDF5 File Format Specification v3 describes
// each structure. Every parser is bounded: addresses outside the file, loops, impossible sizes
// and bad signatures throw h5d::Error(EIO) with the structure and address named.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/fmt/byte_source.h"
#include "core/vocab/shape.h"

namespace h5d::fmt {

constexpr uint64_t kUndefAddr = ~uint64_t(0);

// From the file creation property list / superblock.
struct FileGeometry {
  uint64_t base = 0;           // user block size: every stored address is relative to it
  uint8_t sizeof_offsets = 8;  // H5Pget_sizes
  uint8_t sizeof_lengths = 8;
  // The end of address space the superblock stores (absolute; read_stored_end), 0 when not
  // known. A chunk record up to it is kept even where it lies past the file's real end (a
  // truncated file): that chunk alone fails when it is read (array/file_runs.cpp, check_in_file).
  uint64_t stored_end = 0;
};

// The end of address space stored in the superblock (its end of file address, absolute, moved as
// libhdf5 moves it when the superblock is not at its base address), found where libhdf5 looks
// for a superblock (offset 0, 512, 1024, ...); 0 when there is none or its fields are implausible. A file shorter than this was cut (copied in part, a writer crashed).
uint64_t read_stored_end(const ByteSource& src);
// Whether the file open as `fd` (of `file_size` bytes) has the HDF5 signature where libhdf5
// looks for it (offset 0, 512, 1024, 2048, ...): 1, and its offset in `at`; 0 when it has not;
// -errno when a read failed.
int hdf5_signature(int fd, uint64_t file_size, uint64_t* at = nullptr);
// "truncated file: SIZE bytes, its superblock says STORED_END": what every error caused by a
// file cut short says, in the daemon and in the helpers (h5py: "truncated file: eof=SIZE,
// stored_eof=STORED_END").
std::string truncated_message(uint64_t size, uint64_t stored_end);

enum class LayoutClass { Compact = 0, Contiguous = 1, Chunked = 2, Virtual = 3 };
enum class ChunkIndexType {
  None = 0,
  BTreeV1,          // layout message v1-v3
  SingleChunk,      // v4 index type 1
  Implicit,         // 2
  FixedArray,       // 3
  ExtensibleArray,  // 4
  BTreeV2,          // 5
};
const char* index_type_name(ChunkIndexType t);

struct LayoutInfo {
  int version = 0;
  LayoutClass layout_class = LayoutClass::Contiguous;
  // Contiguous: absolute address (base added) and size; kUndefAddr when never allocated.
  uint64_t contiguous_addr = kUndefAddr;
  uint64_t contiguous_size = 0;
  // Chunked:
  ChunkIndexType index_type = ChunkIndexType::None;
  Shape chunk_dims;            // without the trailing element-size dimension
  uint32_t chunk_elem_size = 0;  // the trailing dimension stored in the layout message
  bool dont_filter_partial_edge_chunks = false;  // v4 flag bit 1
  uint64_t index_addr = kUndefAddr;  // absolute; kUndefAddr when nothing allocated
  // Single chunk index, filtered: size and mask of the one chunk (from the layout message).
  uint64_t single_chunk_size = 0;
  uint32_t single_chunk_filter_mask = 0;
  bool single_chunk_filtered = false;
  // Index-specific creation parameters kept from the layout message (fixed array page bits,
  // extensible array parameters, v2 B-tree node size...). Parsers may use them; others ignore.
  std::vector<uint64_t> index_params;
};

// Finds the data layout message in the object header at `ohdr_addr` (relative address, as
// H5Oget_info returns it) following continuation blocks, for object header v1 and v2.
LayoutInfo read_layout(const ByteSource& src, const FileGeometry& geo, uint64_t ohdr_addr);

// The names of the attributes stored in the object header at `ohdr_addr` (attribute messages,
// read without decoding their types), sorted as libhdf5's name index sorts them. `complete` is
// false when the object has attributes stored elsewhere (dense storage, shared messages):
// those are not among `names`. Throws (Error EIO) on a damaged header.
struct AttributeNames {
  std::vector<std::string> names;
  bool complete = true;
};
AttributeNames read_attribute_names(const ByteSource& src, const FileGeometry& geo, uint64_t ohdr_addr);

struct ChunkLoc {
  uint64_t addr = kUndefAddr;  // absolute file offset (base added); kUndefAddr = not allocated
  uint64_t size = 0;           // stored bytes
  uint32_t filter_mask = 0;    // bit i set: pipeline filter i skipped for this chunk
};

// Where every chunk of a chunked dataset is. Keys are scaled chunk coordinates (element offset
// divided by chunk dims) over the dataset's current extent.
class ChunkMap {
 public:
  ChunkMap() = default;
  // `max_records`: most chunks the file can hold (each takes at least a byte of it); a grid
  // larger than that is kept sparse, so a damaged shape in a small file never sizes a dense map.
  ChunkMap(Shape dims, Shape chunk_dims, uint64_t max_records = ~uint64_t(0));
  const Shape& grid() const { return grid_; }  // chunks per dimension (ceil)
  uint64_t grid_size() const;
  // Linear index of scaled coordinates in grid() (C order).
  uint64_t linear(const uint64_t* scaled) const;
  // The location of chunk `linear_index`, or nullptr when it is not allocated.
  const ChunkLoc* find(uint64_t linear_index) const;
  // Records a chunk; coordinates outside the grid are ignored (they lie beyond the current
  // extent). A second record for the same chunk throws Error(EIO) (a corrupt index).
  void set(const uint64_t* scaled, const ChunkLoc& loc);
  uint64_t allocated() const { return allocated_; }
  template <class Fn>  // fn(linear_index, const ChunkLoc&) for every allocated chunk, in order
  void for_each(Fn&& fn) const {
    if (sparse_mode_) {
      for (const auto& kv : sparse_) fn(kv.first, kv.second);
      return;
    }
    for (uint64_t i = 0; i < dense_.size(); ++i)
      if (dense_[i].addr != kUndefAddr) fn(i, dense_[i]);
  }
  // Grids above this many chunks are kept sparse (a map of the allocated chunks only).
  static constexpr uint64_t kDenseLimit = uint64_t(1) << 22;
  // Most allocated chunks a sparse map accepts (EFBIG beyond).
  static constexpr uint64_t kSparseLimit = uint64_t(1) << 26;
  bool sparse() const { return sparse_mode_; }

  // A chunk the index lists but whose record disagrees with other evidence in the file (it
  // overlaps another chunk or the index's own nodes): reading it is EIO with `why`; the other
  // chunks stay readable. read_chunk_map marks them.
  void mark_damaged(uint64_t linear_index, const std::string& why);
  const std::string* damage(uint64_t linear_index) const;
  uint64_t damaged() const { return damage_.size(); }
  // Chunk records inside the maximum extent but wholly beyond the current one: ignored, as
  // libhdf5 ignores them (a live SWMR file may hold them); counted so the reader can log it.
  uint64_t beyond_extent = 0;

 private:
  std::map<uint64_t, std::string> damage_;
  Shape grid_;
  std::vector<ChunkLoc> dense_;  // grid_size() entries (dense mode)
  std::map<uint64_t, ChunkLoc> sparse_;  // allocated chunks only (sparse mode)
  bool sparse_mode_ = false;
  uint64_t grid_size_ = 0;
  uint64_t allocated_ = 0;
};

// Reads the whole chunk index described by `layout`. `dims`/`maxdims` are the dataset's current
// and maximum extents (maxdims entries of ~0 = unlimited), `elem_size` its element size (the
// size of an unfiltered chunk is product(chunk_dims) * elem_size). `filtered` says whether the
// dataset has a filter pipeline.
ChunkMap read_chunk_map(const ByteSource& src, const FileGeometry& geo, const LayoutInfo& layout,
                        const Shape& dims, const Shape& maxdims, size_t elem_size, bool filtered);

}  // namespace h5d::fmt
