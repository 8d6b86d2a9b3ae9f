// Reads one dataset whole through h5direct's core (no FUSE) with a given number of threads and
// prints "seconds GB/s". With 1 thread this is one core's decode rate on that data, the unit of
// the CPU limit in bench_mount.py. Usage: bench_core_file FILE DATASET THREADS [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/engine/engine.h"
#include "core/array/reader.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5files.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE DATASET THREADS [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  std::vector<double> times;
  double gb = 0;
  for (int r = 0; r < rounds; ++r) {
    h5d::EngineOptions o;
    o.threads = static_cast<unsigned>(std::atoi(argv[3]));
    o.cache_bytes = 32 << 20;
    h5d::Engine e(o);
    h5d::H5Files files(e, {});
    auto a = files.open(argv[1])->dataset_array(argv[2]);
    std::vector<uint8_t> out(a->nbytes());
    h5d::read_bytes(e, *a, 0, 1, out.data());  // chunk map outside the timing
    auto t0 = std::chrono::steady_clock::now();
    h5d::read_bytes(e, *a, 0, out.size(), out.data());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    gb = double(out.size()) / 1e9;
  }
  std::sort(times.begin(), times.end());
  double s = times[times.size() / 2];
  std::printf("%.4f %.3f\n", s, gb / s);
  return 0;
}
