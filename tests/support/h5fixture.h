// Test fixtures written with the HDF5 C API, and the oracle: H5Dread of a whole dataset in its
// own file type (no conversion), i.e. exactly the bytes h5py's dset[()] holds.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/array/reader.h"
#include "core/engine/engine.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"
#include "core/h5lib/metadata.h"
#include "core/h5lib/h5helper.h"

namespace h5d::test {

// What a test's engine and files are made with: the engine's options, and the HDF5 helpers
// (empty path: libhdf5 in the test process).
struct CoreOptions : EngineOptions {
  HelperOptions helper;
};

// An engine and its HDF5 files, as a program makes them, with the engine's old one-object API
// for tests: opening files, reading arrays (array/reader.h), the metadata.
struct TestCore : Engine {
  explicit TestCore(const EngineOptions& o = {}) : Engine(o), files(*this, {}) {}
  explicit TestCore(const CoreOptions& o) : Engine(o), files(*this, o.helper) {}
  ~TestCore() { pool().shutdown(); }  // the pool's last tasks may use the files' arrays
  TestCore(const TestCore&) = delete;
  TestCore& operator=(const TestCore&) = delete;

  std::shared_ptr<H5File> open_file(const std::string& path) { return files.open(path); }
  void forget_file(const std::string& path) { files.forget(path); }
  Metadata& metadata() { return files.metadata(); }
  HelperPool* helpers() { return files.metadata().pool(); }
  void run(ReadPlan& plan) { h5d::run(*this, plan); }
  void read_bytes(const Array& a, uint64_t off, uint64_t len, uint8_t* out) { h5d::read_bytes(*this, a, off, len, out); }
  void read_region(const Array& a, const Region& r, const DestView& dst) { h5d::read_region(*this, a, r, dst); }
  void prefetch_bytes(const Array& a, uint64_t off, uint64_t len, std::shared_ptr<const ReadCover> cover = nullptr) {
    h5d::prefetch_bytes(*this, a, off, len, std::move(cover));
  }
  bool bytes_decoded(const Array& a, uint64_t off, uint64_t len) { return h5d::bytes_decoded(a, off, len); }
  uint64_t decode_ahead_room() { return h5d::decode_ahead_room(*this); }

  H5Files files;
};

#ifdef H5D_HELPER_PATH
// The built h5direct-helper with `count` processes and a request timeout (the backoff of a bad
// file 30 s, the sandbox every layer this kernel has, as a mount's default).
inline HelperOptions helper_options(unsigned count, unsigned timeout_ms) {
  HelperOptions o;
  o.path = H5D_HELPER_PATH;
  o.count = count;
  o.timeout_ms = timeout_ms;
  o.backoff_ms = 30000;
  return o;
}
#endif

// A scratch directory for this test process (under $H5D_TEST_TMP or /tmp), created on first use.
std::string scratch_dir();
std::string scratch_path(const std::string& name);

struct DsetSpec {
  std::string name = "d";
  hid_t type = H5T_STD_U16LE;          // file type (also used as memory type when writing)
  std::vector<hsize_t> dims;
  std::vector<hsize_t> maxdims;        // empty = dims; H5S_UNLIMITED allowed
  std::string layout = "chunked";      // chunked | contiguous | compact
  std::vector<hsize_t> chunks;
  bool shuffle = false, deflate = false, fletcher32 = false;
  int deflate_level = 1;
  std::vector<std::pair<int, std::vector<unsigned>>> extra_filters;  // (id, cd_values), optional
  bool dont_filter_partial = false;
  bool alloc_early = false;
  bool fill_never = false;
  std::vector<uint8_t> fill_value;     // one element, empty = default
  // Which elements to write: default all. Called with the data buffer to fill.
  bool write_data = true;
  std::vector<hsize_t> write_start, write_count;  // a hyperslab to write instead of everything
};

struct FileSpec {
  std::string path;
  bool latest = false;       // libver latest (new chunk indexes, object header v2)
  hsize_t userblock = 0;
  size_t sizeof_offsets = 8, sizeof_lengths = 8;
};

// Deterministic pseudo-random bytes (detector-like for 2-byte types: smooth noise).
std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed);

// Creates (or opens, appending) the file and writes one dataset filled with pattern bytes.
void write_dataset(const FileSpec& f, const DsetSpec& d, uint32_t seed = 1);

// The oracle: all bytes of the dataset as H5Dread returns them in the file type (fixed strings
// null-padded, as h5py reads them).
std::vector<uint8_t> h5_read_all(const std::string& path, const std::string& dset);

}  // namespace h5d::test
