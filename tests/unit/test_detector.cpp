// Detector views: StackArray (core/array/stack_array.h) against arrays built element by element in the
// test, and the detector model (core/euxfel/detector.h) against runs written by
// tests/python/detector_mock.py, whose expected arrays re-implement EXtra-data's components.py
// rules in numpy from the generator's inputs.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/euxfel/detector.h"
#include "core/euxfel/run.h"
#include "core/array/stack_array.h"
#include "tests/support/h5fixture.h"

using namespace h5d;
using h5d::test::CoreOptions;
using h5d::test::TestCore;

namespace {

DType u2() {
  DType t;
  t.typestr = "<u2";
  t.itemsize = 2;
  return t;
}

// A module array: `rows` x entry of distinct uint16 values (module-dependent).
ArrayPtr module_array(uint64_t rows, const Shape& entry, int seed) {
  Shape s{rows};
  s.insert(s.end(), entry.begin(), entry.end());
  std::vector<uint8_t> b(product(s) * 2);
  for (size_t i = 0; i < product(s); ++i) {
    uint16_t v = uint16_t(static_cast<size_t>(seed) * 7919 + i * 3 + 1);
    std::memcpy(b.data() + 2 * i, &v, 2);
  }
  return std::make_shared<MemoryArray>(s, u2(), std::move(b), "module " + std::to_string(seed));
}

uint16_t at(const Array& a, uint64_t row, uint64_t inner) {
  const auto& m = static_cast<const MemoryArray&>(a);
  uint64_t per_row = product(Shape(a.shape().begin() + 1, a.shape().end()));
  uint16_t v;
  std::memcpy(&v, m.bytes().data() + 2 * (row * per_row + inner), 2);
  return v;
}

// The expected bytes of a StackArray, element by element.
std::vector<uint8_t> reference(const std::vector<StackArray::Module>& mods, const Shape& entry,
                               const StackArray::Layout& L, uint16_t fill) {
  const uint64_t C = L.frames_first ? L.cells : 1;
  const uint64_t inner = product(entry) / C;  // elements per output frame of one module
  const uint64_t M = mods.size(), F = L.entries * C;
  std::vector<uint8_t> out(M * F * inner * 2);
  for (uint64_t m = 0; m < M; ++m)
    for (uint64_t f = 0; f < F; ++f) {
      const uint64_t n = f / C, c = f % C;
      const StackArray::Piece* p = nullptr;
      for (const auto& q : mods[m].pieces)
        if (q.out_row <= n && n < q.out_row + q.rows) p = &q;
      for (uint64_t e = 0; e < inner; ++e) {
        uint16_t v = fill;
        if (mods[m].array && p) v = at(*mods[m].array, p->src_row + (n - p->out_row), c * inner + e);
        uint64_t idx = L.frames_first ? (f * M + m) * inner + e : (m * F + f) * inner + e;
        std::memcpy(out.data() + 2 * idx, &v, 2);
      }
    }
  return out;
}

void check_stack(TestCore& engine, std::vector<StackArray::Module> mods, const Shape& entry,
                 StackArray::Layout L) {
  const uint16_t fill = 0xabcd;
  std::vector<uint8_t> fillb{0xcd, 0xab};
  std::vector<uint8_t> ref = reference(mods, entry, L, fill);
  StackArray a(mods, entry, u2(), fillb, L, "test stack");
  REQUIRE(a.nbytes() == ref.size());
  std::vector<uint8_t> all(ref.size());
  engine.read_bytes(a, 0, all.size(), all.data());
  REQUIRE(all == ref);
  std::mt19937_64 rng(ref.size());
  for (int i = 0; i < 200; ++i) {
    uint64_t x = rng() % ref.size(), y = x + rng() % (ref.size() - x + 1);
    std::vector<uint8_t> part(y - x);
    engine.read_bytes(a, x, part.size(), part.data());
    REQUIRE(std::equal(part.begin(), part.end(), ref.data() + x));
  }
}

}  // namespace

TEST_CASE("StackArray modules first and frames first against element-wise arrays", "[detector]") {
  CoreOptions eo;
  eo.threads = 2;
  TestCore engine(eo);
  const Shape entry{2, 3, 4};
  // Module 0: two pieces with a gap; module 1: missing (frames first only); module 2: starts late.
  auto a0 = module_array(10, entry, 0), a2 = module_array(6, entry, 2);
  std::vector<StackArray::Piece> p0{{0, 0, 3}, {3, 5, 4}, {8, 10, 2}};
  std::vector<StackArray::Piece> p2{{1, 4, 5}};
  SECTION("modules first") {
    StackArray::Layout L;
    L.entries = 12;
    check_stack(engine, {{a0, p0}, {a2, p2}}, entry, L);
  }
  SECTION("frames first with an empty module slot") {
    StackArray::Layout L;
    L.entries = 12;
    L.frames_first = true;
    check_stack(engine, {{a0, p0}, {nullptr, {}}, {a2, p2}}, entry, L);
  }
  SECTION("frames first, cells folded into frames") {
    StackArray::Layout L;
    L.entries = 12;
    L.frames_first = true;
    L.cells = 2;
    check_stack(engine, {{a0, p0}, {nullptr, {}}, {a2, p2}}, entry, L);
  }
  SECTION("squeezed length-1 axis") {
    const Shape e1{1, 5};
    auto b0 = module_array(10, e1, 3), b1 = module_array(6, e1, 4);
    StackArray::Layout L;
    L.entries = 12;
    L.squeeze = true;
    check_stack(engine, {{b0, p0}, {b1, p2}}, e1, L);
    L.frames_first = true;
    check_stack(engine, {{b0, p0}, {b1, p2}}, e1, L);
  }
  SECTION("inconsistent pieces are refused") {
    StackArray::Layout L;
    L.entries = 5;
    CHECK_THROWS(StackArray({{a0, p0}}, entry, u2(), {0, 0}, L, "bad"));
  }
}

TEST_CASE("default fill values follow EXtra-data's _out_array", "[detector]") {
  DType f4;
  f4.typestr = "<f4";
  f4.itemsize = 4;
  auto v = default_fill(f4);
  float x;
  std::memcpy(&x, v.data(), 4);
  CHECK(std::isnan(x));
  DType f8b;
  f8b.typestr = ">f8";
  f8b.itemsize = 8;
  auto w = default_fill(f8b);
  CHECK(w[0] == 0x7f);
  CHECK(default_fill(u2()) == std::vector<uint8_t>{0, 0});
  CHECK(all_ones_fill(u2()) == std::vector<uint8_t>{0xff, 0xff});
}

TEST_CASE("detector recognition by source names", "[detector]") {
  auto dets = euxfel::find_detectors({
      "SPB_DET_AGIPD1M-1/DET/0CH0:xtdf", "SPB_DET_AGIPD1M-1/DET/11CH0:xtdf",
      "SPB_DET_AGIPD1M-1/CORR/3CH0:output", "HED_DET_AGIPD500K2G/DET/7CH0:xtdf",
      "FXE_DET_LPD1M-1/DET/15CH0:xtdf", "SCS_DET_DSSC1M-1/DET/2CH0:xtdf",
      "SPB_IRDA_JF4M/DET/JNGFR03:daqOutput", "HED_IA1_JF500K1/DET/JNGFR01:daqOutput",
      "FXE_XAD_JF1M/DET/RECEIVER-2:daqOutput", "SA1_XTD2_XGM/DOOCS/MAIN:output"});
  std::map<std::string, euxfel::DetectorSources> by;
  for (auto& d : dets) by[d.name] = d;
  REQUIRE(by.size() == 7);
  // CORR names are preferred over DET names of the same detector
  CHECK(by["SPB_DET_AGIPD1M-1"].corrected_names);
  CHECK(by["SPB_DET_AGIPD1M-1"].modules.size() == 1);
  CHECK(by["SPB_DET_AGIPD1M-1"].modules[0].first == 3);
  CHECK(by["HED_DET_AGIPD500K2G"].cls == "AGIPD500K");
  CHECK(by["HED_DET_AGIPD500K2G"].n_modules == 8);
  CHECK(by["FXE_DET_LPD1M-1"].cls == "LPD1M");
  CHECK(by["SCS_DET_DSSC1M-1"].cls == "DSSC1M");
  CHECK(by["SPB_IRDA_JF4M"].cls == "JUNGFRAU");
  CHECK(by["SPB_IRDA_JF4M"].n_modules == 3);
  CHECK(by["SPB_IRDA_JF4M"].modnos_start_at == 1);
  CHECK(by["HED_IA1_JF500K1"].cls == "JUNGFRAU");
  CHECK(by["FXE_XAD_JF1M"].modules[0].first == 2);
}

// ---- against detector_mock.py runs ------------------------------------------------------------

namespace {

// The source tree (CMake's, absolute): __FILE__ is relative where a compiler cache rewrites
// paths (ccache's base_dir), and the generator was then looked for from the working directory.
std::string repo_root() { return H5D_SOURCE_DIR; }

std::string tmp_root() {
  const char* t = std::getenv("H5D_TEST_TMP");
  std::string base = t ? t : "/tmp";
  ::mkdir(base.c_str(), 0755);
  return base;
}

std::string generate_detector_run(const std::string& scenario) {
  static int n = 0;
  std::string out = tmp_root() + "/detector-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  std::string cmd = "rm -rf '" + out + "' && /usr/bin/python3 '" + repo_root() +
                    "/tests/python/detector_mock.py' '" + out + "' --scenario " + scenario +
                    " >/dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return out;
}

// The data bytes and shape of a .npy file (C order).
std::pair<Shape, std::string> npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  REQUIRE(s.compare(0, 6, "\x93NUMPY") == 0);
  size_t hlen = uint8_t(s[8]) | (uint8_t(s[9]) << 8), off = 10;
  if (s[6] != 1) {
    hlen = hlen | (uint8_t(s[10]) << 16) | (size_t(uint8_t(s[11])) << 24);
    off = 12;
  }
  std::string h = s.substr(off, hlen);
  Shape shape;
  size_t p = h.find("'shape': (") + 10;
  while (h[p] != ')') {
    if (std::isdigit(static_cast<unsigned char>(h[p]))) {
      size_t q;
      shape.push_back(std::stoull(h.substr(p), &q));
      p += q;
    } else {
      ++p;
    }
  }
  return {shape, s.substr(off + hlen)};
}

std::string read_all(TestCore& e, const Array& a) {
  std::string b(a.nbytes(), '\0');
  e.read_bytes(a, 0, b.size(), reinterpret_cast<uint8_t*>(b.data()));
  return b;
}

}  // namespace

TEST_CASE("detector arrays equal EXtra-data's, from the mock generator", "[detector]") {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") != 0) {
    WARN("h5py not available: skipped");
    return;
  }
  for (std::string scenario : {"raw", "corr"}) {
    DYNAMIC_SECTION(scenario) {
      std::string out = generate_detector_run(scenario);
      REQUIRE(!out.empty());
      std::ifstream mf(out + "/expected/detectors.json");
      nlohmann::json m = nlohmann::json::parse(mf);
      TestCore engine(CoreOptions{});
      auto run = euxfel::Run::open(engine.files, m["run_dir"].get<std::string>());
      std::vector<std::string> inst;
      for (const auto& n : run->source_names())
        if (!run->source(n).is_control() && run->source(n).alias_of().empty()) inst.push_back(n);
      auto dets = euxfel::find_detectors(inst);
      REQUIRE(dets.size() == m["detectors"].size());
      size_t checked = 0;
      for (const auto& ds : dets) {
        INFO(ds.name);
        const auto& dm = m["detectors"][ds.name];
        auto det = euxfel::Detector::open(run, ds);
        REQUIRE(det->usable());
        auto tids = npy(out + "/expected/" + dm["train_ids"].get<std::string>());
        REQUIRE(tids.second.size() == det->train_ids().size() * 8);
        CHECK(std::memcmp(tids.second.data(), det->train_ids().data(), tids.second.size()) == 0);
        for (const auto& [key, km] : dm["keys"].items()) {
          INFO(key);
          auto e = npy(out + "/expected/" + km["data"].get<std::string>());
          ArrayPtr a = det->array(key, euxfel::StackOrder::ModulesFirst);
          CHECK(a->shape() == e.first);
          CHECK(read_all(engine, *a) == e.second);
          auto filled = npy(out + "/expected/" + km["filled"].get<std::string>());
          auto f = det->filled(key, euxfel::StackOrder::ModulesFirst);
          CHECK(std::string(f.begin(), f.end()) == filled.second);
          if (km.contains("ff")) {
            auto ef = npy(out + "/expected/" + km["ff"].get<std::string>());
            ArrayPtr b = det->array(key, euxfel::StackOrder::FramesFirst);
            CHECK(b->shape() == ef.first);
            CHECK(read_all(engine, *b) == ef.second);
          }
          ++checked;
        }
        if (dm.contains("pulseId")) {
          auto ep = npy(out + "/expected/" + dm["pulseId"].get<std::string>());
          auto p = det->inner_ids("pulseId");
          CHECK(std::string(reinterpret_cast<const char*>(p.data()), p.size() * 8) == ep.second);
        }
      }
      CHECK(checked > 20);
      std::system(("rm -rf '" + out + "'").c_str());
    }
  }
}
