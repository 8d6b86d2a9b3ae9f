// Multi-threaded stress of core, meant for ThreadSanitizer (tools/test-sanitizers.sh runs it in a
// -DH5D_TSAN=ON build): many threads read random overlapping byte ranges of many datasets
// (chunked and compressed, chunked unfiltered, contiguous, VDS over other files) through one
// Engine whose decoded-chunk cache, descriptor cache and HDF5 handle bound are tiny, so that
// eviction, in-flight decoding, reopening and prefetch all race. Every byte is compared with the
// H5Dread oracle. Duration: $H5D_STRESS_SECONDS (default 3).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <unistd.h>

#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/engine/fd_cache.h"
#include "core/h5lib/h5file.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using namespace h5d::test;

namespace {

struct Target {
  std::string file, dset;
  std::vector<uint8_t> oracle;
};

// A 2-D VDS `v` in `path`: rows [0, n) from src_a:/d, rows [n, 2n) from src_b:/d.
void make_vds_rows(const std::string& path, const std::string& src_a, const std::string& src_b, hsize_t n,
                   hsize_t m) {
  hid_t fid = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(fid >= 0);
  hsize_t vdims[2] = {2 * n, m}, sdims[2] = {n, m};
  hid_t vspace = H5Screate_simple(2, vdims, nullptr);
  hid_t sspace = H5Screate_simple(2, sdims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const std::string srcs[2] = {src_a, src_b};
  for (hsize_t i = 0; i < 2; ++i) {
    hsize_t start[2] = {i * n, 0}, count[2] = {1, 1}, block[2] = {n, m};
    hid_t vs = H5Scopy(vspace);
    REQUIRE(H5Sselect_hyperslab(vs, H5S_SELECT_SET, start, nullptr, count, block) >= 0);
    REQUIRE(H5Pset_virtual(dcpl, vs, srcs[i].c_str(), "/d", sspace) >= 0);
    H5Sclose(vs);
  }
  hid_t ds = H5Dcreate2(fid, "v", H5T_STD_U16LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(sspace);
  H5Sclose(vspace);
  H5Fclose(fid);
}

std::vector<Target> make_targets() {
  std::vector<Target> out;
  for (uint32_t i = 0; i < 6; ++i) {
    const std::string file = scratch_path("stress_" + std::to_string(i) + ".h5");
    ::unlink(file.c_str());
    FileSpec f{file, i % 2 == 1};
    DsetSpec gz;
    gz.name = "gz";
    gz.dims = {64, 40, 32};
    gz.chunks = {3, 16, 32};  // partial edge chunks on two axes
    gz.shuffle = true;
    gz.deflate = true;
    gz.fletcher32 = i % 3 == 0;
    write_dataset(f, gz, 100 + i);
    DsetSpec plain;
    plain.name = "plain";
    plain.type = H5T_STD_I32BE;
    plain.dims = {50, 70};
    plain.chunks = {7, 9};
    write_dataset(f, plain, 200 + i);
    DsetSpec contig;
    contig.name = "contig";
    contig.type = H5T_IEEE_F64LE;
    contig.layout = "contiguous";
    contig.dims = {20000};
    write_dataset(f, contig, 300 + i);
    for (const char* d : {"/gz", "/plain", "/contig"}) out.push_back({file, d, h5_read_all(file, d)});
  }
  // VDS over the "/d" datasets of two source files (compressed, so reads decode through it).
  const std::string a = scratch_path("stress_src_a.h5"), b = scratch_path("stress_src_b.h5");
  for (const auto& s : {a, b}) {
    ::unlink(s.c_str());
    DsetSpec d;
    d.name = "d";
    d.dims = {40, 50};
    d.chunks = {8, 50};
    d.deflate = true;
    write_dataset(FileSpec{s}, d, s == a ? 11 : 12);
  }
  const std::string v = scratch_path("stress_vds.h5");
  make_vds_rows(v, a, b, 40, 50);
  out.push_back({v, "/v", h5_read_all(v, "/v")});
  return out;
}

}  // namespace

TEST_CASE("many threads reading overlapping random ranges with tiny caches match H5Dread", "[stress]") {
  const auto targets = make_targets();
  CoreOptions o;
  o.threads = 4;
  o.cache_bytes = 64 << 10;  // a few chunks: constant eviction
  o.max_open_files = 3;      // descriptors and HDF5 handles evicted and reopened under readers
  TestCore e(o);
  const char* env = std::getenv("H5D_STRESS_SECONDS");
  const double seconds = env ? std::atof(env) : 3.0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<uint64_t> reads{0}, bytes{0}, mismatches{0}, errors{0};
  std::mutex msg_mu;
  std::string first_problem;

  auto worker = [&](unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint8_t> buf;
    while (std::chrono::steady_clock::now() < deadline) {
      const Target& t = targets[rng() % targets.size()];
      try {
        // The metadata path (open_file, dataset_array) races too: arrays are looked up per read.
        ArrayPtr a = e.open_file(t.file)->dataset_array(t.dset);
        const uint64_t n = t.oracle.size();
        const uint64_t off = rng() % n;
        const uint64_t len = 1 + rng() % std::min<uint64_t>(n - off, (rng() % 4 == 0) ? n : 9000);
        buf.assign(len, 0xEE);
        e.read_bytes(*a, off, len, buf.data());
        if (rng() % 8 == 0) e.prefetch_bytes(*a, off + len, 20000);
        reads.fetch_add(1, std::memory_order_relaxed);
        bytes.fetch_add(len, std::memory_order_relaxed);
        if (std::memcmp(buf.data(), t.oracle.data() + off, len) != 0) {
          mismatches.fetch_add(1);
          std::lock_guard<std::mutex> lk(msg_mu);
          if (first_problem.empty())
            first_problem = t.file + ":" + t.dset + " bytes [" + std::to_string(off) + ", " +
                            std::to_string(off + len) + ") differ from H5Dread";
        }
      } catch (const std::exception& ex) {
        errors.fetch_add(1);
        std::lock_guard<std::mutex> lk(msg_mu);
        if (first_problem.empty()) first_problem = ex.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < 8; ++i) threads.emplace_back(worker, 1000 + i);
  for (auto& th : threads) th.join();
  INFO(first_problem);
  CHECK(mismatches == 0);
  CHECK(errors == 0);
  CHECK(reads > 50);
  CHECK(e.cache().used() <= e.cache().budget());
  CHECK(e.fds().open_count() <= o.max_open_files);
  WARN("stress: " << reads << " reads, " << bytes << " bytes in " << seconds << " s");
}
