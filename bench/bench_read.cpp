// Whole-dataset reads of a compressed detector-like dataset (uint16 frames of 512x128 with
// noise, one frame per chunk, shuffle+deflate level 1): H5Dread against h5direct's core with
// 1..N threads, data warm in the page cache. Prints a markdown table.
// Usage: bench_read [frames=2000] [dir=/tmp] [rounds=3]
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/engine.h"
#include "core/array/reader.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  const hsize_t frames = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000;
  const std::string dir = argc > 2 ? argv[2] : "/tmp";
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::string path = dir + "/h5direct_bench_read.h5";
  const hsize_t dims[3] = {frames, 512, 128}, chunk[3] = {1, 512, 128};
  {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(f, "data", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::mt19937 rng(1);
    std::normal_distribution<float> noise(0, 30);
    std::vector<uint16_t> frame(512 * 128);
    hid_t msp = H5Screate_simple(3, chunk, nullptr);
    for (hsize_t i = 0; i < frames; ++i) {
      for (size_t p = 0; p < frame.size(); ++p) frame[p] = static_cast<uint16_t>(1000 + (p % 97) + noise(rng));
      hsize_t start[3] = {i, 0, 0};
      hid_t fsp = H5Dget_space(ds);
      H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, nullptr, chunk, nullptr);
      H5Dwrite(ds, H5T_NATIVE_UINT16, msp, fsp, H5P_DEFAULT, frame.data());
      H5Sclose(fsp);
    }
    H5Sclose(msp);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
  }
  const double gb = double(frames) * 512 * 128 * 2 / 1e9;
  std::vector<uint16_t> out(frames * 512 * 128);
  auto h5read = [&] {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "data", H5P_DEFAULT);
    auto t = Clock::now();
    H5Dread(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
    double s = seconds_since(t);
    H5Dclose(ds);
    H5Fclose(f);
    return s;
  };
  h5read();  // warm the page cache
  const unsigned maxt = std::max(2u, std::thread::hardware_concurrency());
  std::printf("dataset: %llu frames of 512x128 uint16, shuffle+deflate(1), %.2f GB decoded, %d rounds (median)\n\n",
              static_cast<unsigned long long>(frames), gb, rounds);
  std::printf("| reader | pool threads (the calling thread decodes too) | seconds | GB/s | vs H5Dread |\n|---|---|---|---|---|\n");
  // Interleave rounds of every configuration so noise hits them alike.
  std::vector<std::vector<double>> times(maxt + 1);
  for (int r = 0; r < rounds; ++r) {
    times[0].push_back(h5read());
    for (unsigned t = 1; t <= maxt; ++t) {
      h5d::EngineOptions o;
      o.threads = t;
      o.cache_bytes = 64 << 20;  // smaller than the data: no cache hits between rounds
      h5d::Engine e(o);
      h5d::H5Files files(e, {});
      auto a = files.open(path)->dataset_array("/data");
      std::vector<uint8_t> head(1);
      h5d::read_bytes(e, *a, 0, 1, head.data());  // load the chunk map outside the timing
      auto t0 = Clock::now();
      h5d::read_bytes(e, *a, 0, a->nbytes(), reinterpret_cast<uint8_t*>(out.data()));
      times[t].push_back(seconds_since(t0));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base = median(times[0]);
  std::printf("| H5Dread (libhdf5 %s) | 1 | %.3f | %.2f | 1.00x |\n", H5_VERS_INFO, base, gb / base);
  for (unsigned t = 1; t <= maxt; ++t) {
    double s = median(times[t]);
    std::printf("| h5direct core | %u | %.3f | %.2f | %.2fx |\n", t, s, gb / s, base / s);
  }
  std::remove(path.c_str());
  return 0;
}
