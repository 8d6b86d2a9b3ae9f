// Fixture writing and libhdf5 oracle for the core/h5format tests (see h5format_fixtures.h).
#include "tests/support/h5format_fixtures.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/error.h"

namespace h5d::testing {

namespace {

void check(herr_t rc, const char* what) {
  if (rc < 0) throw std::runtime_error(std::string("HDF5 call failed: ") + what);
}
hid_t checked(hid_t id, const char* what) {
  if (id < 0) throw std::runtime_error(std::string("HDF5 call failed: ") + what);
  return id;
}

// Calls fn(chunk coords in elements, counts) for every chunk of the grid, in C order.
template <class Fn>
void for_each_chunk(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk, Fn&& fn) {
  const size_t rank = dims.size();
  std::vector<hsize_t> grid(rank), idx(rank, 0);
  uint64_t total = 1;
  for (size_t k = 0; k < rank; ++k) {
    grid[k] = (dims[k] + chunk[k] - 1) / chunk[k];
    total *= grid[k];
  }
  for (uint64_t n = 0; n < total; ++n) {
    std::vector<hsize_t> start(rank), count(rank);
    for (size_t k = 0; k < rank; ++k) {
      start[k] = idx[k] * chunk[k];
      count[k] = std::min(chunk[k], dims[k] - start[k]);
    }
    fn(n, start, count);
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < grid[k]) break;
      idx[k] = 0;
    }
  }
}

bool selected(WritePattern p, uint64_t n, uint64_t total) {
  switch (p) {
    case WritePattern::All: return true;
    case WritePattern::EveryThird: return n % 3 == 0;
    case WritePattern::FirstHalf: return n < total / 2;
    case WritePattern::None: return false;
    case WritePattern::Tail: return false;
  }
  return false;
}

int32_t value_at(uint64_t n, uint64_t i) { return static_cast<int32_t>((n * 131 + (i * i) % 97 + i / 5) % 1000); }

// One H5Dwrite of the whole dataset (All) or of its last quarter along dimension 0 (Tail).
void write_whole(hid_t d, const FixtureSpec& s) {
  const int rank = static_cast<int>(s.dims.size());
  std::vector<hsize_t> start(s.dims.size(), 0), count = s.dims;
  if (s.pattern == WritePattern::Tail) {
    start[0] = s.dims[0] - s.dims[0] / 4;
    count[0] = s.dims[0] / 4;
  }
  uint64_t n = 1;
  for (auto c : count) n *= c;
  if (n == 0) return;
  std::vector<int32_t> data(n);
  for (uint64_t i = 0; i < n; ++i) data[i] = value_at(i / 7, i);
  hid_t fs = checked(H5Dget_space(d), "get space");
  check(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), "select");
  hid_t ms = checked(H5Screate_simple(rank, count.data(), nullptr), "mem space");
  check(H5Dwrite(d, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, data.data()), "H5Dwrite");
  H5Sclose(ms);
  H5Sclose(fs);
}

}  // namespace

namespace {
// Removes this process's fixture directory at exit (unless H5D_KEEP_TMP is set).
struct TmpDirCleanup {
  std::string dir;
  ~TmpDirCleanup() {
    if (!dir.empty() && !std::getenv("H5D_KEEP_TMP")) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
};
TmpDirCleanup g_cleanup;
}  // namespace

std::string h5format_tmp_dir() {
  const char* env = std::getenv("H5D_TEST_TMP");
  std::string dir = env && *env ? env : "/tmp";
  dir += "/h5format-" + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  g_cleanup.dir = dir;
  return dir;
}

std::string h5format_tmp_path(const std::string& name) { return h5format_tmp_dir() + "/" + name; }

PreadSource::PreadSource(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path);
  struct stat st {};
  ::fstat(fd_, &st);
  size_ = static_cast<uint64_t>(st.st_size);
}

PreadSource::~PreadSource() {
  if (fd_ >= 0) ::close(fd_);
}

void PreadSource::read_at(uint64_t off, void* buf, size_t n) const {
  if (off > size_ || n > size_ - off)
    fail_data(path_ + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(off) +
              " is beyond the end of the file");
  auto* p = static_cast<uint8_t*>(buf);
  while (n) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(off));
    if (r <= 0) fail_data(path_ + ": pread failed at offset " + std::to_string(off));
    p += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void create_fixture(const std::string& path, const FixtureSpec& s) {
  const int rank = static_cast<int>(s.dims.size());
  hid_t fcpl = checked(H5Pcreate(H5P_FILE_CREATE), "fcpl");
  if (s.userblock) check(H5Pset_userblock(fcpl, s.userblock), "userblock");
  if (s.sizeof_offsets != 8) check(H5Pset_sizes(fcpl, s.sizeof_offsets, s.sizeof_offsets), "sizes");
  hid_t fapl = checked(H5Pcreate(H5P_FILE_ACCESS), "fapl");
  if (s.latest) check(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "libver");
  hid_t f = checked(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl), "H5Fcreate");
  const std::vector<hsize_t>& maxdims = s.maxdims.empty() ? s.dims : s.maxdims;
  hid_t space = checked(H5Screate_simple(rank, s.dims.data(), maxdims.data()), "space");
  hid_t dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), "dcpl");
  check(H5Pset_chunk(dcpl, rank, s.chunk.data()), "chunk");
  if (s.shuffle) check(H5Pset_shuffle(dcpl), "shuffle");
  if (s.deflate) check(H5Pset_deflate(dcpl, 4), "deflate");
  if (s.alloc_early) check(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "alloc time");
  if (s.track_order) check(H5Pset_attr_creation_order(dcpl, H5P_CRT_ORDER_TRACKED), "crt order");
  // Keep attributes in the object header (no dense storage) so that it grows continuation blocks.
  if (s.latest && s.n_attrs) check(H5Pset_attr_phase_change(dcpl, 1000, 900), "attr phase change");
  if (s.dont_filter_partial)
    check(H5Pset_chunk_opts(dcpl, H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS), "chunk opts");
  hid_t d = checked(H5Dcreate2(f, "data", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "H5Dcreate");

  uint64_t total = 1;
  for (size_t k = 0; k < s.dims.size(); ++k) total *= (s.dims[k] + s.chunk[k] - 1) / s.chunk[k];
  uint64_t chunk_elems = 1;
  for (auto c : s.chunk) chunk_elems *= c;
  std::vector<int32_t> buf(chunk_elems);
  if (s.pattern == WritePattern::All || s.pattern == WritePattern::Tail) write_whole(d, s);
  for_each_chunk(s.dims, s.chunk, [&](uint64_t n, const std::vector<hsize_t>& start,
                                      const std::vector<hsize_t>& count) {
    if (!selected(s.pattern, n, total)) return;
    for (uint64_t i = 0; i < chunk_elems; ++i) buf[i] = value_at(n, i);
    if (s.direct_masks) {
      const uLong raw = static_cast<uLong>(chunk_elems * 4);
      if (n % 2) {
        check(H5Dwrite_chunk(d, H5P_DEFAULT, 1, start.data(), raw, buf.data()), "H5Dwrite_chunk raw");
      } else {
        std::vector<Bytef> z(compressBound(raw));
        uLongf zlen = z.size();
        compress2(z.data(), &zlen, reinterpret_cast<const Bytef*>(buf.data()), raw, 4);
        check(H5Dwrite_chunk(d, H5P_DEFAULT, 0, start.data(), zlen, z.data()), "H5Dwrite_chunk");
      }
      return;
    }
    hid_t fs = checked(H5Dget_space(d), "get space");
    check(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), "select");
    hid_t ms = checked(H5Screate_simple(rank, count.data(), nullptr), "mem space");
    check(H5Dwrite(d, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, buf.data()), "H5Dwrite");
    H5Sclose(ms);
    H5Sclose(fs);
  });

  // Attributes added after creation make the object header grow into continuation blocks.
  std::vector<char> text(200, 'a');
  for (int i = 0; i < s.n_attrs; ++i) {
    hsize_t n = text.size();
    hid_t as = H5Screate_simple(1, &n, nullptr);
    std::string name = "attribute_number_" + std::to_string(i);
    hid_t a = checked(H5Acreate2(d, name.c_str(), H5T_NATIVE_CHAR, as, H5P_DEFAULT, H5P_DEFAULT), "attr");
    check(H5Awrite(a, H5T_NATIVE_CHAR, text.data()), "attr write");
    H5Aclose(a);
    H5Sclose(as);
  }
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  H5Pclose(fapl);
  H5Pclose(fcpl);
}

Oracle query_oracle(const std::string& path, hsize_t full_limit, hsize_t sample) {
  Oracle o;
  hid_t f = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen");
  hid_t fcpl = H5Fget_create_plist(f);
  hsize_t ub = 0;
  size_t so = 0, sl = 0;
  check(H5Pget_userblock(fcpl, &ub), "get userblock");
  check(H5Pget_sizes(fcpl, &so, &sl), "get sizes");
  H5Pclose(fcpl);
  o.geo.base = ub;
  o.geo.sizeof_offsets = static_cast<uint8_t>(so);
  o.geo.sizeof_lengths = static_cast<uint8_t>(sl);
  hid_t d = checked(H5Dopen2(f, "data", H5P_DEFAULT), "H5Dopen");
  H5O_info_t info;
  check(H5Oget_info2(d, &info, H5O_INFO_BASIC), "H5Oget_info2");
  o.ohdr_addr = info.addr;
  hid_t space = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(space);
  const size_t urank = static_cast<size_t>(std::max(rank, 0));
  std::vector<hsize_t> dims(urank), maxdims(urank), chunk(urank);
  H5Sget_simple_extent_dims(space, dims.data(), maxdims.data());
  H5Sclose(space);
  hid_t type = H5Dget_type(d);
  o.elem_size = H5Tget_size(type);
  H5Tclose(type);
  hid_t dcpl = H5Dget_create_plist(d);
  H5Pget_chunk(dcpl, rank, chunk.data());
  o.filtered = H5Pget_nfilters(dcpl) > 0;
  H5Pget_chunk_opts(dcpl, &o.chunk_opts);
  H5Pclose(dcpl);
  for (size_t k = 0; k < urank; ++k) {
    o.dims.push_back(dims[k]);
    o.maxdims.push_back(maxdims[k] == H5S_UNLIMITED ? ~uint64_t(0) : maxdims[k]);
    o.chunk.push_back(chunk[k]);
  }
  hid_t fspace = H5Dget_space(d);  // 1.10.8 rejects H5S_ALL here
  check(H5Dget_num_chunks(d, fspace, &o.nchunks), "H5Dget_num_chunks");
  // H5Dget_chunk_info iterates the index and, for extensible arrays whose unlimited dimension
  // is not the first, reports wrong coordinates in 1.10.8 (its iterator counts in unswizzled C
  // order). H5Dget_chunk_info_by_coord goes through the index lookup, which is right: use it.
  o.complete = o.nchunks <= full_limit;
  uint64_t grid_total = 1;
  for (size_t k = 0; k < urank; ++k) grid_total *= (dims[k] + chunk[k] - 1) / chunk[k];
  const uint64_t step = o.complete ? 1 : std::max<uint64_t>(1, grid_total / std::max<hsize_t>(sample, 1));
  for_each_chunk(dims, chunk, [&](uint64_t n, const std::vector<hsize_t>& start, const std::vector<hsize_t>&) {
    if (!o.complete) {
      hsize_t bytes = 0;
      if (H5Dget_chunk_storage_size(d, start.data(), &bytes) < 0) bytes = 0;
      o.storage_sizes.push_back(bytes);
      if (n % step) return;
    }
    OracleChunk c;
    c.offset = start;
    check(H5Dget_chunk_info_by_coord(d, start.data(), &c.filter_mask, &c.addr, &c.size),
          "H5Dget_chunk_info_by_coord");
    if (c.addr != HADDR_UNDEF) o.chunks.push_back(c);
  });
  H5Sclose(fspace);
  H5Dclose(d);
  H5Fclose(f);
  return o;
}

}  // namespace h5d::testing
