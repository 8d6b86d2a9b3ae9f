// Test helpers for the on-disk format parsers (core/h5format): write HDF5 fixtures with the C
// API, read them back as raw bytes, and ask libhdf5 (the oracle) where every chunk is.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/fmt/byte_source.h"
#include "core/fmt/chunk_index.h"

namespace h5d::testing {

// A temporary directory for fixtures: $H5D_TEST_TMP if set, else /tmp; created if missing.
std::string h5format_tmp_dir();
std::string h5format_tmp_path(const std::string& name);

// pread-based ByteSource over a file on disk.
class PreadSource final : public fmt::ByteSource {
 public:
  explicit PreadSource(const std::string& path);
  ~PreadSource() override;
  PreadSource(const PreadSource&) = delete;
  PreadSource& operator=(const PreadSource&) = delete;
  void read_at(uint64_t off, void* buf, size_t n) const override;
  uint64_t size() const override { return size_; }
  std::string name() const override { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::vector<uint8_t> read_file_bytes(const std::string& path);
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

// All and Tail are written with one H5Dwrite (fast for 10^5 chunks); the others chunk by chunk.
enum class WritePattern { All, EveryThird, FirstHalf, None, Tail /* last quarter along dim 0 */ };

struct FixtureSpec {
  bool latest = false;              // H5Pset_libver_bounds(LATEST, LATEST)
  std::vector<hsize_t> dims;
  std::vector<hsize_t> maxdims;     // empty = same as dims; H5S_UNLIMITED allowed
  std::vector<hsize_t> chunk;
  bool deflate = false;
  bool shuffle = false;             // adds shuffle before deflate
  bool alloc_early = false;
  bool dont_filter_partial = false;
  hsize_t userblock = 0;
  size_t sizeof_offsets = 8;        // 4 → H5Pset_sizes(fcpl, 4, 4)
  int n_attrs = 0;
  bool track_order = false;         // attribute creation order tracked (v2 header flag bit 2)                  // attributes added after creation (header continuation)
  WritePattern pattern = WritePattern::All;
  // Chunks written with H5Dwrite_chunk and these filter masks cycling (deflate datasets only:
  // lets the test see non-zero masks); empty = ordinary H5Dwrite.
  bool direct_masks = false;
};

// Creates `path` with one int32 dataset "/data".
void create_fixture(const std::string& path, const FixtureSpec& spec);

struct OracleChunk {
  std::vector<hsize_t> offset;  // in elements
  unsigned filter_mask = 0;
  haddr_t addr = 0;             // as the library returns it
  hsize_t size = 0;
};

// What libhdf5 says about "/data" in `path`.
struct Oracle {
  fmt::FileGeometry geo;
  uint64_t ohdr_addr = 0;  // H5Oget_info2 addr (relative)
  Shape dims, maxdims, chunk;  // maxdims: ~0 for unlimited
  size_t elem_size = 0;
  bool filtered = false;
  unsigned chunk_opts = 0;
  hsize_t nchunks = 0;
  std::vector<OracleChunk> chunks;  // all chunks when nchunks <= limit, else a sample
  bool complete = false;
  // For large datasets: H5Dget_chunk_storage_size of every chunk of the grid (0 = unallocated).
  std::vector<hsize_t> storage_sizes;
};
Oracle query_oracle(const std::string& path, hsize_t full_limit = 3000, hsize_t sample = 40);

}  // namespace h5d::testing
