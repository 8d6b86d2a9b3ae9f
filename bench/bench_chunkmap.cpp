// Benchmark: mapping every chunk of a dataset with core/h5format (read_layout + read_chunk_map)
// versus libhdf5's H5Dget_chunk_info loop, for each chunk index type (v1 B-tree, fixed array,
// extensible array, v2 B-tree) at 1,000 / 4,000 / 10,000 / 100,000 chunks. The library loop is O(n^2)
// (every call walks the whole index), so it is only timed up to kLibraryCap chunks.
// Usage: bench_chunkmap [dir]   (default $TMPDIR or /tmp). Prints a markdown table.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fmt/chunk_index.h"

using namespace h5d;
using namespace h5d::fmt;

namespace {

constexpr uint64_t kLibraryCap = 4000;
constexpr int kRuns = 5;
constexpr hsize_t kChunkElems = 16;  // int32 elements per chunk (along the last dimension)

class PreadFile final : public ByteSource {
 public:
  explicit PreadFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY)) {
    if (fd_ < 0) fail(ENOENT, "cannot open " + path);
    struct stat st {};
    ::fstat(fd_, &st);
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~PreadFile() override { ::close(fd_); }
  void read_at(uint64_t off, void* buf, size_t n) const override {
    if (off > size_ || n > size_ - off) fail_data(path_ + ": read beyond the end of the file");
    if (::pread(fd_, buf, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) fail_data(path_ + ": short read");
  }
  uint64_t size() const override { return size_; }
  std::string name() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

enum class Kind { BTree1, Fixed, Extensible, BTree2 };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::BTree1: return "v1 B-tree (libver earliest)";
    case Kind::Fixed: return "fixed array (paged above 1,024)";
    case Kind::Extensible: return "extensible array (1 unlimited dim)";
    case Kind::BTree2: return "v2 B-tree (2 unlimited dims)";
  }
  return "";
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Writes /data with exactly n chunks of kChunkElems int32 each, deflate-compressed.
void write_file(const std::string& path, Kind kind, uint64_t n) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (kind != Kind::BTree1) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  std::vector<hsize_t> dims, maxdims, chunk;
  if (kind == Kind::BTree2) {  // 2-d grid of (n / 100) x 100 chunks
    dims = {n / 100, 100 * kChunkElems};
    maxdims = {H5S_UNLIMITED, H5S_UNLIMITED};
    chunk = {1, kChunkElems};
  } else {
    dims = {n * kChunkElems};
    maxdims = {kind == Kind::Fixed ? dims[0] : H5S_UNLIMITED};
    chunk = {kChunkElems};
  }
  const int rank = static_cast<int>(dims.size());
  hid_t space = H5Screate_simple(rank, dims.data(), maxdims.data());
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, rank, chunk.data());
  H5Pset_deflate(dcpl, 1);
  hid_t d = H5Dcreate2(f, "data", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  std::vector<int32_t> data(n * kChunkElems);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>((i * 7919) % 1013);
  H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  H5Pclose(fapl);
}

struct DatasetFacts {
  FileGeometry geo;
  uint64_t ohdr = 0;
  Shape dims, maxdims;
  size_t elem_size = 4;
};

DatasetFacts facts(const std::string& path) {
  DatasetFacts r;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t fcpl = H5Fget_create_plist(f);
  hsize_t ub = 0;
  size_t so = 8, sl = 8;
  H5Pget_userblock(fcpl, &ub);
  H5Pget_sizes(fcpl, &so, &sl);
  H5Pclose(fcpl);
  r.geo = FileGeometry{ub, static_cast<uint8_t>(so), static_cast<uint8_t>(sl)};
  hid_t d = H5Dopen2(f, "data", H5P_DEFAULT);
  H5O_info_t info;
  H5Oget_info2(d, &info, H5O_INFO_BASIC);
  r.ohdr = info.addr;
  hid_t s = H5Dget_space(d);
  hsize_t dims[8], maxdims[8];
  const int rank = H5Sget_simple_extent_dims(s, dims, maxdims);
  for (int k = 0; k < rank; ++k) {
    r.dims.push_back(dims[k]);
    r.maxdims.push_back(maxdims[k] == H5S_UNLIMITED ? ~uint64_t(0) : maxdims[k]);
  }
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return r;
}

// Median time of read_layout + read_chunk_map; checks the chunk count.
double time_ours(const std::string& path, uint64_t n, std::string* index_name) {
  const DatasetFacts df = facts(path);
  PreadFile src(path);
  std::vector<double> t;
  for (int run = 0; run < kRuns; ++run) {
    const double t0 = now_ms();
    LayoutInfo l = read_layout(src, df.geo, df.ohdr);
    ChunkMap m = read_chunk_map(src, df.geo, l, df.dims, df.maxdims, df.elem_size, true);
    t.push_back(now_ms() - t0);
    if (m.allocated() != n) {
      std::fprintf(stderr, "%s: mapped %llu chunks, expected %llu\n", path.c_str(),
                   static_cast<unsigned long long>(m.allocated()), static_cast<unsigned long long>(n));
      std::exit(1);
    }
    *index_name = index_type_name(l.index_type);
  }
  return median(t);
}

// One pass of H5Dget_num_chunks + H5Dget_chunk_info for every chunk (file already open).
double time_library(const std::string& path) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "data", H5P_DEFAULT);
  hid_t s = H5Dget_space(d);
  const double t0 = now_ms();
  hsize_t n = 0;
  H5Dget_num_chunks(d, s, &n);
  hsize_t off[8];
  unsigned mask;
  haddr_t addr;
  hsize_t size;
  for (hsize_t i = 0; i < n; ++i) H5Dget_chunk_info(d, s, i, off, &mask, &addr, &size);
  const double ms = now_ms() - t0;
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = argc > 1 ? argv[1] : (tmp ? tmp : "/tmp");
  std::printf("| index | chunks | h5format map (ms, median of %d) | ns / chunk | H5Dget_chunk_info loop (ms) |\n", kRuns);
  std::printf("|---|---:|---:|---:|---:|\n");
  for (Kind kind : {Kind::BTree1, Kind::Fixed, Kind::Extensible, Kind::BTree2}) {
    for (uint64_t n : {uint64_t(1000), uint64_t(4000), uint64_t(10000), uint64_t(100000)}) {
      const std::string path = dir + "/bench_chunkmap_" + std::to_string(static_cast<int>(kind)) + "_" +
                               std::to_string(n) + ".h5";
      write_file(path, kind, n);
      std::string index;
      double ours = 0;
      try {
        ours = time_ours(path, n, &index);
      } catch (const h5d::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
      }
      std::string lib = "skipped (O(n^2))";
      if (n <= kLibraryCap) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", time_library(path));
        lib = buf;
      }
      std::printf("| %s [%s] | %llu | %.2f | %.0f | %s |\n", kind_name(kind), index.c_str(),
                  static_cast<unsigned long long>(n), ours, ours * 1e6 / static_cast<double>(n), lib.c_str());
      std::fflush(stdout);
      ::unlink(path.c_str());
    }
  }
  return 0;
}
