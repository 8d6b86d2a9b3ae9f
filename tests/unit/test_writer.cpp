// The write path (core/write/): files, groups and datasets created through h5d::Writer, bytes
// written as C-order byte ranges (out of order, overlapping, partial chunks), then checked with
// libhdf5 as the oracle. The oracle opens a byte copy of the file, never the file itself, so that
// it cannot share the writer's open libhdf5 file or its caches: it sees what a reader, or a
// restart after a killed daemon, finds on disk at that moment.
#include <catch2/catch.hpp>

#include <hdf5.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "core/engine/engine.h"
#include "core/error.h"
#include "helper/h5lib.h"
#include "core/array/region.h"
#include "core/write/writer.h"
#include "tests/support/errno_of.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

using Bytes = std::vector<uint8_t>;

const char* kPluginDir = "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins";

CoreOptions engine_opts(unsigned threads) {
  CoreOptions o;
  o.threads = threads;
  o.cache_bytes = 8 << 20;
  return o;
}

// A path under the scratch directory that does not exist yet.
std::string fresh_path(const std::string& name) {
  static int n = 0;
  const std::string p = scratch_path("writer_" + name + "_" + std::to_string(++n) + ".h5");
  ::unlink(p.c_str());
  return p;
}

size_t itemsize_of(const std::string& ts) { return std::stoul(ts.substr(2)); }

// The HDF5 file type h5py writes for a numpy typestr (the oracle for the writer's make_type).
h5::Handle expected_type(const std::string& ts) {
  if (ts == "<u2") return h5::Handle(H5Tcopy(H5T_STD_U16LE));
  if (ts == ">i4") return h5::Handle(H5Tcopy(H5T_STD_I32BE));
  if (ts == "<f8") return h5::Handle(H5Tcopy(H5T_IEEE_F64LE));
  if (ts == "|b1") {
    h5::Handle t(H5Tenum_create(H5T_NATIVE_INT8));
    int8_t v = 0;
    H5Tenum_insert(t.get(), "FALSE", &v);
    v = 1;
    H5Tenum_insert(t.get(), "TRUE", &v);
    return t;
  }
  if (ts == "|S16") {
    h5::Handle t(H5Tcopy(H5T_C_S1));
    H5Tset_size(t.get(), 16);
    H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
    return t;
  }
  FAIL("no expected type for " << ts);
  return h5::Handle();
}

// Valid values of the type as bytes: 0/1 bools, finite doubles, null-padded strings.
Bytes make_values(const std::string& ts, uint64_t nelem, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const size_t is = itemsize_of(ts);
  Bytes b(nelem * is);
  for (uint64_t i = 0; i < nelem; ++i) {
    uint8_t* e = b.data() + i * is;
    if (ts[1] == 'b') {
      e[0] = uint8_t(rng() & 1);
    } else if (ts[1] == 'f') {
      const double v = std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
      std::memcpy(e, &v, sizeof v);
    } else if (ts[1] == 'S') {
      const size_t len = rng() % (is + 1);
      for (size_t k = 0; k < is; ++k) e[k] = k < len ? uint8_t('a' + rng() % 26) : 0;
    } else {
      for (size_t k = 0; k < is; ++k) e[k] = uint8_t(rng());
    }
  }
  return b;
}

// "" when the bytes are equal, else where they differ (Catch would print every byte).
std::string diff(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " bytes instead of " + std::to_string(want.size());
  size_t first = got.size(), count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    first = std::min(first, i);
    ++count;
  }
  if (count == 0) return "";
  return std::to_string(count) + " of " + std::to_string(got.size()) +
         " bytes differ, the first at offset " + std::to_string(first) + " (" +
         std::to_string(got[first]) + " instead of " + std::to_string(want[first]) + ")";
}

struct Range {
  uint64_t off, len;
};

// [0, n) cut in pieces of 1..maxlen bytes, in random order.
std::vector<Range> cover(uint64_t n, uint64_t maxlen, std::mt19937_64& rng) {
  std::vector<Range> r;
  for (uint64_t off = 0; off < n;) {
    const uint64_t len = std::min<uint64_t>(1 + rng() % maxlen, n - off);
    r.push_back({off, len});
    off += len;
  }
  std::shuffle(r.begin(), r.end(), rng);
  return r;
}

// `count` ranges of 1..maxlen bytes at random offsets (overlapping, leaving gaps).
std::vector<Range> scattered(uint64_t n, int count, uint64_t maxlen, std::mt19937_64& rng) {
  std::vector<Range> r;
  for (int i = 0; i < count; ++i) {
    const uint64_t off = rng() % n;
    r.push_back({off, std::min<uint64_t>(1 + rng() % maxlen, n - off)});
  }
  return r;
}

// Writes each range with the bytes of `src` at the same offsets, and applies it to `expect`.
void apply(DatasetWriter& w, const std::vector<Range>& rs, const Bytes& src, Bytes& expect) {
  for (const Range& r : rs) {
    w.write(r.off, src.data() + r.off, r.len);
    std::memcpy(expect.data() + r.off, src.data() + r.off, r.len);
  }
}

// DatasetWriter::read of everything and of random ranges against `expect`.
void check_readback(DatasetWriter& w, const Bytes& expect, uint32_t seed) {
  Bytes all(expect.size(), 0xEE);
  w.read(0, all.size(), all.data());
  REQUIRE(diff(all, expect) == "");
  if (expect.empty()) return;
  std::mt19937_64 rng(seed);
  for (const Range& r : scattered(expect.size(), 40, 3000, rng)) {
    Bytes part(r.len, 0xEE);
    w.read(r.off, r.len, part.data());
    INFO("read at " << r.off << " length " << r.len);
    REQUIRE(std::memcmp(part.data(), expect.data() + r.off, r.len) == 0);
  }
}

void ensure_plugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto lk = h5::lock();
    H5PLappend(kPluginDir);
  });
}

// Copies the file's bytes to a new path. The caller holds the HDF5 lock: no chunk is written
// meanwhile.
std::string snapshot(const std::string& path) {
  static int n = 0;
  const std::string copy = scratch_path("snapshot_" + std::to_string(++n) + ".h5");
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ofstream out(copy, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.close();
  REQUIRE(out);
  return copy;
}

// The HDF5 byte shuffle undone (the n % size trailing bytes stay in place).
Bytes unshuffle(const Bytes& in, size_t size) {
  Bytes out = in;
  const size_t ne = in.size() / size;
  for (size_t j = 0; j < size; ++j)
    for (size_t i = 0; i < ne; ++i) out[i * size + j] = in[j * ne + i];
  return out;
}

// One stored chunk decoded without libhdf5's filters (shuffle, deflate, zstd); false when the
// pipeline has another filter.
bool decode_manually(const std::vector<std::pair<int, std::vector<unsigned>>>& filters,
                     size_t itemsize, size_t chunk_bytes, Bytes& buf) {
  for (auto f = filters.rbegin(); f != filters.rend(); ++f) {
    if (f->first == 2) {
      buf = unshuffle(buf, itemsize);
    } else if (f->first == 1) {
      Bytes out(chunk_bytes);
      uLongf len = out.size();
      REQUIRE(uncompress(out.data(), &len, buf.data(), buf.size()) == Z_OK);
      out.resize(len);
      buf.swap(out);
    } else if (f->first == 32015) {
      const unsigned long long len = ZSTD_getFrameContentSize(buf.data(), buf.size());
      REQUIRE(len == chunk_bytes);
      Bytes out(len);
      const size_t r = ZSTD_decompress(out.data(), out.size(), buf.data(), buf.size());
      REQUIRE(!ZSTD_isError(r));
      REQUIRE(r == len);
      buf.swap(out);
    } else {
      return false;
    }
  }
  REQUIRE(buf.size() == chunk_bytes);
  return true;
}

// What libhdf5 finds in the file: the data in the file type (no conversion) and the layout.
struct Stored {
  Bytes data;
  H5D_layout_t layout = H5D_LAYOUT_ERROR;
  std::vector<hsize_t> dims, chunks;
  std::vector<std::pair<int, std::vector<unsigned>>> filters;  // id, cd_values
  bool type_matches = false;  // the file type equals expected_type(typestr)
  bool via_h5dread = false;   // data from H5Dread (else only from the chunks decoded here)
  std::vector<int> filter_ids() const {
    std::vector<int> ids;
    for (const auto& f : filters) ids.push_back(f.first);
    return ids;
  }
};

// Chunked data assembled from H5Dread_chunk and decode_manually (fill 0 where no chunk).
bool read_chunks_manually(hid_t ds, const Stored& s, size_t itemsize, Bytes& out) {
  const size_t rank = s.dims.size();
  std::vector<hsize_t> grid(rank);
  uint64_t nchunks = 1, chunk_elems = 1;
  for (size_t k = 0; k < rank; ++k) {
    grid[k] = (s.dims[k] + s.chunks[k] - 1) / s.chunks[k];
    nchunks *= grid[k];
    chunk_elems *= s.chunks[k];
  }
  out.assign(s.data.size(), 0);
  for (uint64_t g = 0; g < nchunks; ++g) {
    std::vector<hsize_t> offs(rank);
    for (size_t k = rank, rest = g; k-- > 0; rest /= grid[k])
      offs[k] = (rest % grid[k]) * s.chunks[k];
    hsize_t size = 0;
    if (H5Dget_chunk_storage_size(ds, offs.data(), &size) < 0 || size == 0) {
      H5Eclear2(H5E_DEFAULT);
      continue;  // not allocated: fill
    }
    Bytes buf(size);
    uint32_t mask = 0xFF;
    REQUIRE(H5Dread_chunk(ds, H5P_DEFAULT, offs.data(), &mask, buf.data()) >= 0);
    REQUIRE(mask == 0);
    if (!decode_manually(s.filters, itemsize, chunk_elems * itemsize, buf)) return false;
    for (uint64_t e = 0; e < chunk_elems; ++e) {  // scatter the elements inside the dataset
      uint64_t dst = 0, rest = e;
      bool inside = true;
      std::vector<hsize_t> idx(rank);
      for (size_t k = rank; k-- > 0; rest /= s.chunks[k]) idx[k] = offs[k] + rest % s.chunks[k];
      for (size_t k = 0; k < rank; ++k) {
        inside = inside && idx[k] < s.dims[k];
        dst = dst * s.dims[k] + idx[k];
      }
      if (inside) std::memcpy(out.data() + dst * itemsize, buf.data() + e * itemsize, itemsize);
    }
  }
  return true;
}

Stored read_stored(const std::string& file, const std::string& dset, const std::string& typestr) {
  ensure_plugins();
  INFO("oracle read of " << file << ":" << dset);
  auto lk = h5::lock();
  const std::string copy = snapshot(file);
  h5::Handle fid(H5Fopen(copy.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  REQUIRE(fid);
  h5::Handle ds(H5Dopen2(fid.get(), dset.c_str(), H5P_DEFAULT));
  REQUIRE(ds);
  h5::Handle type(H5Dget_type(ds.get())), space(H5Dget_space(ds.get()));
  h5::Handle dcpl(H5Dget_create_plist(ds.get()));
  REQUIRE((type && space && dcpl));
  Stored s;
  s.type_matches = H5Tequal(type.get(), expected_type(typestr).get()) > 0;
  const int rank = H5Sget_simple_extent_ndims(space.get());
  REQUIRE(rank >= 0);
  s.dims.resize(size_t(rank));
  H5Sget_simple_extent_dims(space.get(), s.dims.data(), nullptr);
  const size_t itemsize = H5Tget_size(type.get());
  s.data.assign(size_t(H5Sget_simple_extent_npoints(space.get())) * itemsize, 0);
  s.layout = H5Pget_layout(dcpl.get());
  if (s.layout == H5D_CHUNKED) {
    s.chunks.resize(size_t(rank));
    REQUIRE(H5Pget_chunk(dcpl.get(), rank, s.chunks.data()) == rank);
  }
  bool all_avail = true;
  for (int i = 0, nf = H5Pget_nfilters(dcpl.get()); i < nf; ++i) {
    unsigned flags = 0, cd[16];
    size_t ncd = 16;
    char name[64];
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &ncd, cd, sizeof name, name, nullptr);
    s.filters.push_back({int(id), std::vector<unsigned>(cd, cd + std::min<size_t>(ncd, 16))});
    all_avail = all_avail && H5Zfilter_avail(id) > 0;
  }
  Bytes manual;
  const bool have_manual = s.layout == H5D_CHUNKED && !s.data.empty() &&
                           read_chunks_manually(ds.get(), s, itemsize, manual);
  if (all_avail && !s.data.empty()) {
    REQUIRE(H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data.data()) >= 0);
    s.via_h5dread = true;
    if (have_manual) REQUIRE(diff(manual, s.data) == "");  // two independent decodings agree
  } else if (have_manual) {
    s.data = manual;
  } else {
    REQUIRE(s.data.empty());  // else neither libhdf5 nor this test can decode the dataset
  }
  return s;
}

bool stored_group_exists(const std::string& file, const std::string& group) {
  auto lk = h5::lock();
  const std::string copy = snapshot(file);
  h5::Handle fid(H5Fopen(copy.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  REQUIRE(fid);
  h5::Handle g(H5Gopen2(fid.get(), group.c_str(), H5P_DEFAULT));
  H5Eclear2(H5E_DEFAULT);
  return bool(g);
}

struct ChunkedCase {
  const char* typestr;
  Shape shape, chunks;
  const char* compression;
  int level;
  std::vector<int> filters;  // the pipeline expected in the file
};

}  // namespace

TEST_CASE("writer: files and groups", "[writer]") {
  TestCore e(engine_opts(2));
  Writer w(e.files, {});
  const std::string f = fresh_path("groups");
  CHECK_FALSE(w.owns(f));
  w.create_file(f);
  CHECK(w.owns(f));
  CHECK(errno_of([&] { w.create_file(f); }) == EEXIST);  // ours, open
  // Valid on disk at once: an empty HDF5 file.
  CHECK(stored_group_exists(f, "/"));

  // A path that exists but was not created here: EEXIST, left alone, not ours.
  const std::string other = fresh_path("plain");
  { std::ofstream(other) << "not hdf5"; }
  CHECK(errno_of([&] { w.create_file(other); }) == EEXIST);
  CHECK_FALSE(w.owns(other));
  std::ifstream in(other);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "not hdf5");
  CHECK(errno_of([&] { w.create_group(other, "/g"); }) == EPERM);
  CHECK(errno_of([&] { w.create_file(scratch_path("no_such_dir/x.h5")); }) != 0);

  w.create_group(f, "/g");
  w.create_group(f, "/g/sub");
  CHECK(errno_of([&] { w.create_group(f, "/g"); }) == EEXIST);
  CHECK(errno_of([&] { w.create_group(f, "/g/sub"); }) == EEXIST);
  CHECK(errno_of([&] { w.create_group(f, "/missing/parent"); }) != 0);
  CHECK(stored_group_exists(f, "/g"));
  CHECK(stored_group_exists(f, "/g/sub"));
  CHECK_FALSE(stored_group_exists(f, "/missing"));

  // Datasets: names taken, bad dtypes, compression and chunk shapes refused.
  NewDataset spec;
  spec.shape = {4, 5};
  spec.typestr = "<u2";
  w.create_dataset(f, "/g/d", spec);
  CHECK(errno_of([&] { w.create_dataset(f, "/g/d", spec); }) == EEXIST);
  CHECK(errno_of([&] { w.create_dataset(f, "/g", spec); }) == EEXIST);
  CHECK(errno_of([&] { w.create_dataset(other, "/d", spec); }) == EPERM);
  for (const char* bad : {"<u3", "<x4", "<f2", "|b2", "u2", "?u2"}) {
    NewDataset s = spec;
    s.typestr = bad;
    INFO(bad);
    CHECK(errno_of([&] { w.create_dataset(f, "/bad", s); }) == EINVAL);
  }
  NewDataset s = spec;
  s.compression = "rar";
  CHECK(errno_of([&] { w.create_dataset(f, "/bad", s); }) == EINVAL);
  s = spec;
  s.chunks = {2};
  CHECK(errno_of([&] { w.create_dataset(f, "/bad", s); }) == EINVAL);
  s.chunks = {2, 0};
  CHECK(errno_of([&] { w.create_dataset(f, "/bad", s); }) == EINVAL);
  auto good = w.create_dataset(f, "/after_errors", spec);  // refusals left the file usable
  CHECK(good->nbytes() == 40);

  w.close_all();
  CHECK(errno_of([&] { w.create_group(f, "/h"); }) == EIO);
  CHECK(errno_of([&] { w.create_dataset(f, "/e", spec); }) == EIO);
  CHECK(errno_of([&] { w.create_file(f); }) == EEXIST);
  CHECK(stored_group_exists(f, "/g/sub"));
  CHECK(read_stored(f, "/after_errors", "<u2").dims == std::vector<hsize_t>{4, 5});
}

TEST_CASE("writer: contiguous datasets, byte ranges out of order", "[writer]") {
  TestCore e(engine_opts(2));
  Writer w(e.files, {});
  const std::string f = fresh_path("contig");
  w.create_file(f);
  w.create_group(f, "/g");
  struct Case {
    const char* path;
    const char* typestr;
    Shape shape;
  };
  const Case cases[] = {{"/g/u2", "<u2", {123, 77}}, {"/g/f8", "<f8", {5, 3, 7}},
                        {"/g/s16", "|S16", {40}},    {"/b1", "|b1", {300}},
                        {"/i4", ">i4", {3, 1000}},   {"/scalar", "<f8", {}}};
  std::vector<DatasetWriterPtr> writers;
  std::vector<Bytes> expects;
  uint32_t seed = 10;
  for (const Case& c : cases) {
    INFO(c.path << " " << c.typestr);
    NewDataset spec;
    spec.shape = c.shape;
    spec.typestr = c.typestr;
    auto d = w.create_dataset(f, c.path, spec);
    const uint64_t n = product(c.shape) * itemsize_of(c.typestr);
    REQUIRE(d->nbytes() == n);
    CHECK(d->describe().find("contiguous") != std::string::npos);
    std::mt19937_64 rng(++seed);
    const Bytes src1 = make_values(c.typestr, product(c.shape), ++seed);
    const Bytes src2 = make_values(c.typestr, product(c.shape), ++seed);
    Bytes expect(n, 0);
    apply(*d, cover(n, 1 + n / 7, rng), src1, expect);  // everything, pieces in random order
    REQUIRE(diff(expect, src1) == "");
    apply(*d, scattered(n, 9, 1 + n / 5, rng), src2, expect);  // then overwrites
    check_readback(*d, expect, seed);
    // In the file at once (pwrite at the dataset's offset, no flush): H5Dread agrees.
    const Stored st = read_stored(f, c.path, c.typestr);
    CHECK(st.layout == H5D_CONTIGUOUS);
    CHECK(st.type_matches);
    CHECK(st.dims == std::vector<hsize_t>(c.shape.begin(), c.shape.end()));
    CHECK(st.filters.empty());
    REQUIRE(diff(st.data, expect) == "");
    writers.push_back(d);
    expects.push_back(expect);
  }

  // Past the end: EFBIG and nothing written; an empty write at the end is fine.
  DatasetWriter& d = *writers[0];
  const uint64_t n = d.nbytes();
  const Bytes junk(64, 0xAB);
  CHECK(errno_of([&] { d.write(n, junk.data(), 1); }) == EFBIG);
  CHECK(errno_of([&] { d.write(n - 1, junk.data(), 2); }) == EFBIG);
  CHECK(errno_of([&] { d.write(n + 1, junk.data(), 0); }) == EFBIG);
  CHECK(errno_of([&] { d.write(UINT64_MAX, junk.data(), 2); }) == EFBIG);
  CHECK(errno_of([&] { d.write(2, junk.data(), UINT64_MAX - 1); }) == EFBIG);
  CHECK(errno_of([&] { d.write(n, junk.data(), 0); }) == 0);
  Bytes two(2);
  CHECK(errno_of([&] { d.read(n - 1, 2, two.data()); }) != 0);

  // An empty dataset: no bytes, any non-empty write is past its end.
  NewDataset empty;
  empty.shape = {0, 4};
  empty.typestr = "<u2";
  auto z = w.create_dataset(f, "/empty", empty);
  CHECK(z->nbytes() == 0);
  CHECK(errno_of([&] { z->write(0, junk.data(), 0); }) == 0);
  CHECK(errno_of([&] { z->write(0, junk.data(), 1); }) == EFBIG);
  CHECK(read_stored(f, "/empty", "<u2").dims == std::vector<hsize_t>{0, 4});

  w.flush_all();
  w.close_all();
  for (size_t i = 0; i < writers.size(); ++i) {
    INFO(cases[i].path);
    CHECK(errno_of([&] { writers[i]->write(0, junk.data(), 1); }) == EIO);
    CHECK(diff(read_stored(f, cases[i].path, cases[i].typestr).data, expects[i]) == "");
  }
}

TEST_CASE("writer: chunked and compressed datasets with partial chunks", "[writer]") {
  const ChunkedCase cases[] = {
      {"<u2", {37, 29}, {8, 7}, "gzip", 6, {2, 1}},
      {"<f8", {5, 33, 17}, {2, 16, 17}, "blosc", -1, {32001}},
      {"|b1", {1000}, {64}, "gzip", -1, {1}},  // no shuffle for 1-byte elements
      {"|S16", {23, 5}, {4, 3}, "lz4", -1, {2, 32004}},
      {"<u2", {19, 31}, {6, 8}, "zstd", 5, {2, 32015}},
      {">i4", {40, 12}, {16, 5}, "", -1, {}},     // chunked, no filter
      {"<u2", {10, 6}, {50, 4}, "none", -1, {}},  // chunks larger than the shape: clipped
  };
  for (unsigned threads : {2u, 0u}) {
    TestCore e(engine_opts(threads));
    uint32_t seed = 100 * threads;
    for (const ChunkedCase& c : cases) {
      INFO(c.typestr << " " << c.compression << " rank " << c.shape.size() << ", " << threads
                     << " pool threads");
      Writer w(e.files, {});
      const std::string f = fresh_path(std::string("chunked_") + c.compression);
      w.create_file(f);
      w.create_group(f, "/data");
      NewDataset spec;
      spec.shape = c.shape;
      spec.typestr = c.typestr;
      spec.chunks = c.chunks;
      spec.compression = c.compression;
      spec.level = c.level;
      auto d = w.create_dataset(f, "/data/x", spec);
      const uint64_t nelem = product(c.shape);
      const uint64_t n = nelem * itemsize_of(c.typestr);
      REQUIRE(d->nbytes() == n);
      CHECK(d->describe().find("chunked") != std::string::npos);
      const uint64_t span = std::max<uint64_t>(2 * n / c.shape[0], 200);  // write lengths
      std::mt19937_64 rng(++seed);

      // Nothing written yet: fill (0) everywhere, in the file as in read().
      Bytes expect(n, 0);
      Stored st = read_stored(f, "/data/x", c.typestr);
      CHECK(st.layout == H5D_CHUNKED);
      CHECK(st.type_matches);
      CHECK(st.dims == std::vector<hsize_t>(c.shape.begin(), c.shape.end()));
      std::vector<hsize_t> chunks(c.chunks.size());
      for (size_t k = 0; k < chunks.size(); ++k) chunks[k] = std::min(c.chunks[k], c.shape[k]);
      CHECK(st.chunks == chunks);
      CHECK(st.filter_ids() == c.filters);
      if (c.level >= 0 && !c.filters.empty())
        CHECK(st.filters.back().second.at(0) == unsigned(c.level));
      REQUIRE(diff(st.data, expect) == "");
      check_readback(*d, expect, seed);

      // 1. Scattered ranges: some chunks complete, most partial. flush(false) writes the partial
      //    ones padded with fill.
      const Bytes src1 = make_values(c.typestr, nelem, ++seed);
      apply(*d, scattered(n, 12, span, rng), src1, expect);
      check_readback(*d, expect, seed);
      d->flush(false);
      st = read_stored(f, "/data/x", c.typestr);
      REQUIRE(diff(st.data, expect) == "");
      CHECK((st.via_h5dread || (!c.filters.empty() && c.filters.back() == 32015)));

      // 2. Overwrites touching chunks already in the file (read back, modified, rewritten).
      const Bytes src2 = make_values(c.typestr, nelem, ++seed);
      apply(*d, scattered(n, 12, span, rng), src2, expect);
      check_readback(*d, expect, seed);
      d->flush(false);
      REQUIRE(diff(read_stored(f, "/data/x", c.typestr).data, expect) == "");

      // 3. Everything, in random order: complete chunks go to the file in the background.
      const Bytes src3 = make_values(c.typestr, nelem, ++seed);
      apply(*d, cover(n, span / 4, rng), src3, expect);
      REQUIRE(diff(expect, src3) == "");
      check_readback(*d, expect, seed);
      d->flush(false);
      REQUIRE(diff(read_stored(f, "/data/x", c.typestr).data, expect) == "");

      // Past the end: EFBIG, nothing written.
      const Bytes junk(64, 0xAB);
      CHECK(errno_of([&] { d->write(n, junk.data(), 1); }) == EFBIG);
      CHECK(errno_of([&] { d->write(n - 3, junk.data(), 4); }) == EFBIG);
      CHECK(errno_of([&] { d->write(UINT64_MAX - 1, junk.data(), 4); }) == EFBIG);
      CHECK(errno_of([&] { d->write(n, junk.data(), 0); }) == 0);

      // 4. A second dataset written partially and never flushed: close_all writes it.
      auto d2 = w.create_dataset(f, "/data/late", spec);
      Bytes expect2(n, 0);
      const Bytes src4 = make_values(c.typestr, nelem, ++seed);
      apply(*d2, scattered(n, 6, span / 2, rng), src4, expect2);
      w.close_all();
      CHECK(errno_of([&] { d->write(0, junk.data(), 1); }) == EIO);
      CHECK(errno_of([&] { d2->write(0, junk.data(), 1); }) == EIO);
      REQUIRE(diff(read_stored(f, "/data/x", c.typestr).data, expect) == "");
      REQUIRE(diff(read_stored(f, "/data/late", c.typestr).data, expect2) == "");
    }
  }
}

TEST_CASE("writer: automatic chunks and flush_all", "[writer]") {
  TestCore e(engine_opts(2));
  WriterOptions o;
  o.compression = "gzip";
  Writer w(e.files, o);
  CHECK(w.options().compression == "gzip");
  const std::string f = fresh_path("auto");
  w.create_file(f);
  NewDataset spec;
  spec.shape = {600, 1000};  // 1.2 MB
  spec.typestr = "<u2";
  spec.compression = "gzip";
  auto a = w.create_dataset(f, "/a", spec);
  spec.shape = {7, 9};
  auto b = w.create_dataset(f, "/b", spec);
  std::mt19937_64 rng(5);
  Bytes ea(a->nbytes(), 0), eb(b->nbytes(), 0);
  apply(*a, scattered(a->nbytes(), 20, 5000, rng), make_values("<u2", 600000, 1), ea);
  apply(*b, scattered(b->nbytes(), 3, 20, rng), make_values("<u2", 63, 2), eb);
  w.flush_all();  // partial chunks of both datasets, without flushing them one by one
  const Stored sa = read_stored(f, "/a", "<u2");
  const Stored sb = read_stored(f, "/b", "<u2");
  REQUIRE(diff(sa.data, ea) == "");
  REQUIRE(diff(sb.data, eb) == "");
  // About 1 MiB at most, the inner dimension whole; a small dataset is one chunk.
  REQUIRE(sa.chunks.size() == 2);
  CHECK(sa.chunks[1] == 1000);
  CHECK(sa.chunks[0] * sa.chunks[1] * 2 <= (1u << 20));
  CHECK(sa.chunks[0] * sa.chunks[1] * 2 > (1u << 19));
  CHECK(sb.chunks == std::vector<hsize_t>{7, 9});
  CHECK(sa.filter_ids() == std::vector<int>{2, 1});
}

TEST_CASE("writer: concurrent writes to one dataset", "[writer]") {
  TestCore e(engine_opts(2));
  Writer w(e.files, {});
  const std::string f = fresh_path("threads");
  w.create_file(f);
  struct Case {
    const char* path;
    Shape chunks;
    const char* compression;
  };
  const Case cases[] = {
      {"/contiguous", {}, ""}, {"/chunked", {5, 7}, ""}, {"/gzip", {5, 7}, "gzip"}};
  for (const Case& c : cases) {
    INFO(c.path);
    NewDataset spec;
    spec.shape = {64, 50};
    spec.typestr = "<f8";
    spec.chunks = c.chunks;
    spec.compression = c.compression;
    const std::string path = c.path;
    auto d = w.create_dataset(f, path, spec);
    const Bytes src = make_values("<f8", 64 * 50, 9);
    std::mt19937_64 rng(3);
    const std::vector<Range> pieces = cover(d->nbytes(), 300, rng);
    std::vector<std::thread> ts;
    std::vector<std::string> errors(4);
    for (size_t t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        try {
          for (size_t i = t; i < pieces.size(); i += 4)
            d->write(pieces[i].off, src.data() + pieces[i].off, pieces[i].len);
        } catch (const std::exception& ex) {
          errors[t] = ex.what();
        }
      });
    }
    for (auto& t : ts) t.join();
    for (const auto& err : errors) CHECK(err.empty());
    d->flush(false);
    check_readback(*d, src, 4);
    REQUIRE(diff(read_stored(f, path, "<f8").data, src) == "");
  }
}

// Writer::close_all's contract (core/write/writer.h) with writes still coming from other threads: a
// write either reaches the file or fails with EIO, once EIO always EIO, and none lands in a file
// opened after close_all (which would get a descriptor number close_all let go of). Under TSan
// (tools/test-sanitizers.sh) this is also the check that FileState is safe from any thread.
TEST_CASE("writer: writes racing with close_all reach the file or fail with EIO", "[writer]") {
  TestCore e(engine_opts(2));
  Writer w(e.files, {});
  const std::string f = fresh_path("close_race");
  w.create_file(f);
  NewDataset contig;
  contig.shape = {1 << 16};
  contig.typestr = "<f8";
  NewDataset chunked = contig;
  chunked.chunks = {100};  // 800-byte chunks: the 24-byte pieces below cross their bounds
  std::vector<DatasetWriterPtr> ds = {w.create_dataset(f, "/contig", contig),
                                      w.create_dataset(f, "/chunked", chunked)};
  const Bytes src = make_values("<f8", 1 << 16, 11);
  // Collected in the threads, asserted here (Catch2 assertions are not thread-safe).
  struct Result {
    uint64_t ok_until = 0;  // every write below this offset returned without error
    int first_error = 0;
    bool ok_after_error = false;
  };
  std::vector<Result> res(ds.size());
  std::atomic<size_t> writes{0};
  std::vector<std::thread> ts;
  for (size_t i = 0; i < ds.size(); ++i) {
    ts.emplace_back([&, i] {
      DatasetWriter& d = *ds[i];
      Result& r = res[i];
      // After the first EIO, 20 more writes: they must fail too (an exception each, which is
      // slow under TSan, so not the whole rest).
      int after_error = 0;
      for (uint64_t off = 0; off < d.nbytes() && after_error < 20; off += 24) {
        const size_t n = size_t(std::min<uint64_t>(24, d.nbytes() - off));
        int err = 0;
        try {
          d.write(off, src.data() + off, n);
        } catch (const h5d::Error& ex) {
          err = ex.code();
        } catch (...) {
          err = -1;
        }
        writes.fetch_add(1);
        if (err == 0 && r.first_error != 0) r.ok_after_error = true;
        if (err == 0 && r.first_error == 0) r.ok_until = off + n;
        if (r.first_error != 0) ++after_error;
        if (err != 0 && r.first_error == 0) r.first_error = err;
      }
    });
  }
  while (writes.load() < 50) std::this_thread::yield();
  w.close_all();
  const std::string decoy = fresh_path("close_race_decoy");
  const Bytes zeros(1 << 18, 0);
  {
    std::ofstream(decoy, std::ios::binary).write(reinterpret_cast<const char*>(zeros.data()), std::streamsize(zeros.size()));
  }
  const int decoy_fd = ::open(decoy.c_str(), O_RDWR);
  REQUIRE(decoy_fd >= 0);
  for (auto& t : ts) t.join();
  ::close(decoy_fd);
  std::ifstream in(decoy, std::ios::binary);
  const Bytes after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(after == zeros);
  const char* names[] = {"/contig", "/chunked"};
  for (size_t i = 0; i < ds.size(); ++i) {
    INFO(names[i] << ": " << res[i].ok_until << " bytes written before EIO");
    CHECK((res[i].first_error == 0 || res[i].first_error == EIO));
    CHECK_FALSE(res[i].ok_after_error);
    const Stored st = read_stored(f, names[i], "<f8");
    REQUIRE(st.data.size() == src.size());
    CHECK(std::equal(src.begin(), src.begin() + long(res[i].ok_until), st.data.begin()));
  }
  // After close_all: nothing new, and every write fails.
  CHECK(errno_of([&] { w.create_dataset(f, "/late", contig); }) == EIO);
  CHECK(errno_of([&] { w.create_group(f, "/g"); }) == EIO);
  CHECK(errno_of([&] { w.create_file(fresh_path("after_close")); }) == EIO);
  CHECK(errno_of([&] { ds[0]->write(0, src.data(), 8); }) == EIO);
  CHECK(errno_of([&] { ds[1]->write(0, src.data(), 8); }) == EIO);
  CHECK_FALSE(w.owns(f));
  CHECK_NOTHROW(w.close_all());  // twice: nothing more to do
}

TEST_CASE("writer: existing datasets written in place", "[writer]") {
  FileSpec fs;
  fs.path = fresh_path("existing");
  DsetSpec contig;
  contig.name = "contig";
  contig.layout = "contiguous";
  contig.dims = {50, 40};
  write_dataset(fs, contig, 1);
  DsetSpec chunked;
  chunked.name = "chunked";
  chunked.dims = {30, 30};
  chunked.chunks = {10, 10};
  write_dataset(fs, chunked, 2);
  DsetSpec compact = contig;
  compact.name = "compact";
  compact.layout = "compact";
  compact.dims = {4, 4};
  write_dataset(fs, compact, 3);
  DsetSpec unalloc = contig;
  unalloc.name = "unallocated";
  unalloc.write_data = false;
  write_dataset(fs, unalloc, 4);
  Bytes original, chunked_before;
  {
    auto lk = h5::lock();
    original = h5_read_all(fs.path, "/contig");
    chunked_before = h5_read_all(fs.path, "/chunked");
  }
  REQUIRE(original.size() == 50 * 40 * 2);

  TestCore e(engine_opts(2));
  {
    Writer ro(e.files, {});
    CHECK(errno_of([&] { ro.open_existing(fs.path, "/contig"); }) == EPERM);
  }
  WriterOptions o;
  o.write_existing = true;
  Writer w(e.files, o);
  CHECK_FALSE(w.owns(fs.path));  // in place only: no new datasets there
  for (const char* p : {"/chunked", "/compact", "/unallocated"}) {
    INFO(p);
    CHECK(errno_of([&] { w.open_existing(fs.path, p); }) == EPERM);
  }
  CHECK(errno_of([&] { w.open_existing(fs.path, "/missing"); }) != 0);
  auto d = w.open_existing(fs.path, "/contig");
  CHECK(w.open_existing(fs.path, "/contig") == d);  // one writer per dataset
  CHECK_FALSE(w.owns(fs.path));
  NewDataset spec;
  spec.shape = {2};
  spec.typestr = "<u2";
  CHECK(errno_of([&] { w.create_dataset(fs.path, "/new", spec); }) == EPERM);
  REQUIRE(d->nbytes() == original.size());
  check_readback(*d, original, 1);

  Bytes expect = original;
  std::mt19937_64 rng(8);
  apply(*d, scattered(expect.size(), 15, 500, rng), make_values("<u2", 2000, 77), expect);
  REQUIRE(expect != original);
  check_readback(*d, expect, 2);
  REQUIRE(diff(read_stored(fs.path, "/contig", "<u2").data, expect) == "");
  const Bytes junk(8, 0xCD);
  CHECK(errno_of([&] { d->write(expect.size() - 1, junk.data(), 2); }) == EFBIG);
  d->flush(true);
  REQUIRE(diff(read_stored(fs.path, "/contig", "<u2").data, expect) == "");
  // Untouched: the other dataset in the file.
  REQUIRE(diff(read_stored(fs.path, "/chunked", "<u2").data, chunked_before) == "");

  w.close_all();
  CHECK(errno_of([&] { d->write(0, junk.data(), 1); }) == EIO);
  REQUIRE(diff(read_stored(fs.path, "/contig", "<u2").data, expect) == "");
}

namespace {

CoreOptions engine_with_helpers(unsigned timeout_ms = 20000) {
  CoreOptions o = engine_opts(2);
  o.helper = h5d::test::helper_options(1, timeout_ms);
  return o;
}

// A chunked gzip dataset of `shape` (u2) whose chunks are `chunks`.
NewDataset gzip_spec(Shape shape, Shape chunks) {
  NewDataset spec;
  spec.shape = std::move(shape);
  spec.typestr = "<u2";
  spec.chunks = std::move(chunks);
  spec.compression = "gzip";
  return spec;
}

bool process_exists(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

}  // namespace

TEST_CASE("writer: with helpers, libhdf5 runs in one writer process per file", "[writer]") {
  TestCore e(engine_with_helpers());
  Writer w(e.files, {});
  const std::string f1 = fresh_path("proc_a"), f2 = fresh_path("proc_b");
  w.create_file(f1);
  w.create_file(f2);
  const pid_t p1 = w.writer_pid(f1), p2 = w.writer_pid(f2);
  CHECK(p1 > 0);
  CHECK(p2 > 0);
  CHECK(p1 != p2);
  CHECK(p1 != ::getpid());
  CHECK(process_exists(p1));
  w.create_group(f1, "/g");
  CHECK(errno_of([&] { w.create_group(f1, "/g"); }) == EEXIST);  // H5Lexists, in the process
  // Chunked: partial chunks flushed, then completed (read back from the file through the
  // process: H5Dget_chunk_storage_size, H5Dread_chunk), out of order.
  auto d = w.create_dataset(f1, "/g/x", gzip_spec({37, 50}, {8, 16}));
  CHECK(errno_of([&] { w.create_dataset(f1, "/g/x", gzip_spec({1}, {1})); }) == EEXIST);
  const uint64_t n = d->nbytes();
  const Bytes src = make_values("<u2", n / 2, 3);
  Bytes expect(n, 0);
  std::mt19937_64 rng(5);
  const auto pieces = cover(n, 333, rng);
  const auto half = pieces.begin() + static_cast<std::ptrdiff_t>(pieces.size() / 2);
  apply(*d, std::vector<Range>(pieces.begin(), half), src, expect);
  d->flush(true);
  apply(*d, std::vector<Range>(half, pieces.end()), src, expect);
  REQUIRE(diff(expect, src) == "");
  check_readback(*d, expect, 7);
  // Contiguous: pwrite in the daemon at the offset the process allocated.
  NewDataset cs;
  cs.shape = {100};
  cs.typestr = "<f8";
  auto c = w.create_dataset(f2, "/c", cs);
  const Bytes csrc = make_values("<f8", 100, 9);
  c->write(0, csrc.data(), csrc.size());
  w.close_all();
  CHECK(w.writer_pid(f1) == 0);
  CHECK_FALSE(process_exists(p1));  // the process ends with its file
  const Stored s1 = read_stored(f1, "/g/x", "<u2");
  CHECK(s1.layout == H5D_CHUNKED);
  CHECK(s1.chunks == std::vector<hsize_t>{8, 16});
  REQUIRE(diff(s1.data, expect) == "");
  REQUIRE(diff(read_stored(f2, "/c", "<f8").data, csrc) == "");
}

// WriteFile::exists answers "absent" only when the link is absent (it, or a group on its way);
// a libhdf5 failure is an error, not "absent" (issue 28: an H5Lexists failure was read as
// absent). In process and in the file's writer process alike.
TEST_CASE("writer: WriteFile::exists tells absent from a libhdf5 failure", "[writer]") {
  for (const bool helpers : {false, true}) {
    INFO((helpers ? "in the writer process" : "in process"));
    TestCore e(helpers ? engine_with_helpers() : engine_opts(2));
    const std::string f = fresh_path(helpers ? "exists_remote" : "exists_local");
    dev_t dev = 0;
    ino_t ino = 0;
    std::unique_ptr<WriteFile> file = write_file_factory(e.files.helper_options())(f, dev, ino);
    CHECK((file->pid() > 0) == helpers);
    file->create_group("/g");
    NewDataset spec;
    spec.shape = {3};
    spec.typestr = "<u2";
    file->create_dataset("/g/d", spec);
    file->close_dataset("/g/d");
    file->flush();
    // The oracle: libhdf5 on a byte copy of the file.
    REQUIRE(stored_group_exists(f, "/g"));
    REQUIRE_FALSE(stored_group_exists(f, "/h"));
    REQUIRE(read_stored(f, "/g/d", "<u2").dims == std::vector<hsize_t>{3});
    CHECK(file->exists("/"));
    CHECK(file->exists("/g"));
    CHECK(file->exists("/g/d"));
    CHECK_FALSE(file->exists("/h"));
    CHECK_FALSE(file->exists("/g/e"));
    // A group missing on the way: absent (libhdf5 1.10's H5Lexists fails there instead).
    CHECK_FALSE(file->exists("/h/x"));
    CHECK_FALSE(file->exists("/g/e/x/y"));
    // A path through a dataset: H5Lexists fails; that is EIO, not "absent".
    CHECK(errno_of([&] { file->exists("/g/d/x"); }) == EIO);
    // ... and the file goes on (the writer process answered with an error, it did not break).
    file->create_group("/g/after");
    CHECK(file->exists("/g/after"));
    file->close();
    CHECK(stored_group_exists(f, "/g/after"));
  }
}

TEST_CASE("writer: a killed writer process fails its file's writes with EIO, not another file's", "[writer]") {
  TestCore e(engine_with_helpers());
  Writer w(e.files, {});
  const std::string fa = fresh_path("killed"), fb = fresh_path("survivor");
  w.create_file(fa);
  w.create_file(fb);
  auto da = w.create_dataset(fa, "/x", gzip_spec({4, 64}, {1, 64}));
  auto db = w.create_dataset(fb, "/x", gzip_spec({4, 64}, {1, 64}));
  NewDataset cs;
  cs.shape = {64};
  cs.typestr = "<u2";
  auto ca = w.create_dataset(fa, "/contiguous", cs);
  const Bytes src = make_values("<u2", 4 * 64, 11);
  da->write(0, src.data(), 128);  // chunk 0, complete
  da->flush(true);
  const pid_t pa = w.writer_pid(fa);
  REQUIRE(pa > 0);
  REQUIRE(::kill(pa, SIGKILL) == 0);
  // Its chunks need the process: EIO, at the write (written at once) or at the latest on flush.
  const int at_write = errno_of([&] { da->write(128, src.data() + 128, src.size() - 128); });
  CHECK((at_write == 0 || at_write == EIO));
  CHECK(errno_of([&] { da->flush(true); }) == EIO);
  CHECK(errno_of([&] { w.create_group(fa, "/g"); }) == EIO);
  // Its contiguous data does not (pwrite at an offset allocated at creation).
  ca->write(0, src.data(), 128);
  ca->flush(true);
  // The other file, and new files, are unaffected.
  db->write(0, src.data(), src.size());
  db->flush(true);
  const std::string fc = fresh_path("after");
  w.create_file(fc);
  w.create_group(fc, "/g");
  CHECK(errno_of([&] { w.close_all(); }) == EIO);  // the killed file's close
  REQUIRE(diff(read_stored(fb, "/x", "<u2").data, src) == "");
  CHECK(stored_group_exists(fc, "/g"));
  // What the killed process left: its flushed metadata and the chunk written before.
  const Stored s = read_stored(fa, "/x", "<u2");
  REQUIRE(diff(Bytes(s.data.begin(), s.data.begin() + 128), Bytes(src.begin(), src.begin() + 128)) == "");
  REQUIRE(diff(read_stored(fa, "/contiguous", "<u2").data, Bytes(src.begin(), src.begin() + 128)) == "");
}

TEST_CASE("writer: a chunk larger than a metadata reply is read back through its writer process", "[writer]") {
  TestCore e(engine_with_helpers());
  // One chunk above proto::kMaxMetaReply (64 MiB), stored as is (no filter), and room for one
  // partial chunk only: writing into the other chunk spills the first to the file, and its
  // next bytes bring all of it back through the socket (H5Dread_chunk in the process).
  const uint64_t chunk = (64ull << 20) + 4096;  // bytes; elements of 2 bytes
  WriterOptions wo;
  wo.pending_budget = chunk;
  Writer w(e.files, wo);
  const std::string f = fresh_path("big_chunk");
  w.create_file(f);
  NewDataset spec;
  spec.shape = {chunk};  // 2 chunks of chunk / 2 elements
  spec.typestr = "<u2";
  spec.chunks = {chunk / 2};
  auto d = w.create_dataset(f, "/big", spec);
  const Bytes src = make_values("<u2", chunk, 21);
  const uint64_t h = chunk / 2;
  d->write(0, src.data(), h);                              // chunk 0, half
  d->write(chunk, src.data() + chunk, h);                  // chunk 1: chunk 0 spilled
  d->write(h, src.data() + h, chunk - h);                  // chunk 0 read back, completed
  Bytes expect = src;
  std::fill(expect.begin() + static_cast<std::ptrdiff_t>(chunk + h), expect.end(), 0);  // never written
  Bytes back(src.size());
  d->read(0, back.size(), back.data());  // chunk 1 read back from the file as well
  REQUIRE(diff(back, expect) == "");
  w.close_all();
  REQUIRE(diff(read_stored(f, "/big", "<u2").data, expect) == "");
}
