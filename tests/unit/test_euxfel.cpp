// The EuXFEL run model (core/euxfel/run.h) against runs written by tests/python/euxfel_mock.py,
// whose expected arrays (what EXtra-data's run[source, key].ndarray() and
// .train_id_coordinates() give) are computed from the generator's inputs, not read back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/h5fixture.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/euxfel/run.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "vfs/files_map.h"

using h5d::test::CoreOptions;
using h5d::test::TestCore;

using h5d::euxfel::Run;
using h5d::euxfel::RunOptions;

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

bool have_generator() {
  static int ok = -1;
  if (ok < 0) ok = std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") == 0;
  return ok == 1;
}

// Runs the generator into a fresh directory; returns that directory ("" on failure).
std::string generate(const std::string& args) {
  static int n = 0;
  std::string out = tmp_root() + "/euxfel-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  std::string cmd = "rm -rf '" + out + "' && /usr/bin/python3 '" + repo_root() +
                    "/tests/python/euxfel_mock.py' '" + out + "' --small-images " + args +
                    " >/dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return out;
}

struct Npy {
  std::string descr;
  std::vector<uint64_t> shape;
  std::string data;
};

Npy load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  REQUIRE(s.size() >= 10);
  REQUIRE(s.compare(0, 6, "\x93NUMPY") == 0);
  size_t hlen, off;
  if (s[6] == 1) {
    hlen = uint8_t(s[8]) | (uint8_t(s[9]) << 8);
    off = 10;
  } else {
    hlen = uint8_t(s[8]) | (uint8_t(s[9]) << 8) | (uint8_t(s[10]) << 16) | (size_t(uint8_t(s[11])) << 24);
    off = 12;
  }
  std::string h = s.substr(off, hlen);
  Npy out;
  size_t d = h.find("'descr': '");
  REQUIRE(d != std::string::npos);
  d += 10;
  out.descr = h.substr(d, h.find('\'', d) - d);
  size_t sh = h.find("'shape': (");
  REQUIRE(sh != std::string::npos);
  sh += 10;
  std::string dims = h.substr(sh, h.find(')', sh) - sh);
  std::stringstream ds(dims);
  std::string tok;
  while (std::getline(ds, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    out.shape.push_back(std::stoull(tok));
  }
  out.data = s.substr(off + hlen);
  return out;
}

std::string read_all(h5d::Engine& engine, const h5d::Array& a) {
  std::string buf(a.nbytes(), '\0');
  if (!buf.empty()) h5d::read_bytes(engine, a, 0, buf.size(), reinterpret_cast<uint8_t*>(&buf[0]));
  return buf;
}

// The same bytes read in pieces that cut rows anywhere (as FUSE reads do).
std::string read_pieces(h5d::Engine& engine, const h5d::Array& a, uint64_t piece) {
  std::string buf(a.nbytes(), '\0');
  for (uint64_t off = 0; off < buf.size(); off += piece) {
    uint64_t n = std::min<uint64_t>(piece, buf.size() - off);
    h5d::read_bytes(engine, a, off, n, reinterpret_cast<uint8_t*>(&buf[off]));
  }
  return buf;
}

nlohmann::json load_manifest(const std::string& out) {
  std::ifstream in(out + "/expected/expected.json");
  return nlohmann::json::parse(in);
}

// Every key of the manifest: shape, dtype, bytes and per-row train IDs equal the expectation.
void check_run(h5d::test::TestCore& engine, Run& run, const std::string& out, const nlohmann::json& m) {
  Npy tids = load_npy(out + "/expected/" + m["train_ids"].get<std::string>());
  std::string got_tids = read_all(engine, *run.train_ids_array());
  CHECK(run.train_ids().size() == tids.shape.at(0));
  CHECK(got_tids == tids.data);

  for (const auto& [name, section] : m["sources"].items()) {
    INFO("source " << name);
    REQUIRE(run.has_source(name));
    CHECK(run.source(name).is_control() == (section == "CONTROL"));
  }
  CHECK(run.source_names().size() == m["sources"].size());

  size_t checked = 0;
  for (const auto& k : m["keys"]) {
    std::string src = k["source"], key = k["key"];
    INFO(src << " " << key);
    h5d::euxfel::KeyInfo info = run.key(src, key);
    CHECK(info.is_array == k["is_array"].get<bool>());
    CHECK(info.rows == k["rows"].get<uint64_t>());
    CHECK(info.group == k["group"].get<std::string>());
    Npy et = load_npy(out + "/expected/" + k["train_ids"].get<std::string>());
    CHECK(read_all(engine, *run.key_train_ids(src, key)) == et.data);
    if (!k["is_array"].get<bool>()) {
      CHECK_THROWS_AS(run.key_array(src, key), h5d::Error);
      continue;
    }
    Npy e = load_npy(out + "/expected/" + k["data"].get<std::string>());
    h5d::ArrayPtr a = run.key_array(src, key);
    CHECK(a->shape() == e.shape);
    CHECK(a->dtype().typestr == e.descr);
    std::string got = read_all(engine, *a);
    CHECK(got.size() == e.data.size());
    CHECK((got == e.data));
    if (e.data.size() > 3000) CHECK((read_pieces(engine, *a, 2999) == e.data));
    ++checked;
  }
  CHECK(checked > 0);

  for (const auto& [legacy, canonical] : m["legacy"].items()) {
    INFO("legacy " << legacy);
    REQUIRE(run.has_source(legacy));
    if (run.overview().empty()) CHECK(run.source(legacy).alias_of() == canonical.get<std::string>());
    // The legacy name reads the same data as the canonical one.
    CHECK(read_all(engine, *run.key_array(legacy, "image.data")) ==
          read_all(engine, *run.key_array(canonical, "image.data")));
  }
  for (const auto& [src, dups] : m["duplicates"].items()) {
    INFO("duplicates " << src);
    CHECK(run.source(src).duplicate_trains() == dups.get<std::vector<uint64_t>>());
  }
}

}  // namespace

TEST_CASE("euxfel: run of sequence files, every format version", "[euxfel]") {
  if (!have_generator()) {
    WARN("skipped: /usr/bin/python3 with h5py and numpy is needed to write test runs");
    return;
  }
  for (const char* fmt : {"0.5", "1.0", "1.2", "1.3"}) {
    SECTION(std::string("format ") + fmt) {
      std::string out = generate(std::string("--format ") + fmt);
      REQUIRE(!out.empty());
      auto m = load_manifest(out);
      h5d::test::TestCore engine(h5d::test::CoreOptions{});
      auto run = Run::open(engine.files, m["run_dir"].get<std::string>());
      CHECK(run->overview().empty());
      CHECK(run->format_version() == fmt);
      CHECK(run->run_number() == 338);
      check_run(engine, *run, out, m);
      // RUN values of a CONTROL source (SourceData.run_values()).
      h5d::Value rv = run->run_values("SA1_XTD2_XGM/DOOCS/MAIN");
      bool found = false;
      for (const auto& [k, v] : rv.members)
        if (k == "classId.value") found = v.kind == h5d::Value::Kind::String && v.s == "DoocsXGM";
      CHECK(found);
      // Attributes: CONTROL .value keys carry the parent group's attributes.
      auto ki = run->key("SA1_XTD2_XGM/DOOCS/MAIN", "pulseEnergy.photonFlux.value");
      bool desc = false;
      for (const auto& [an, av] : ki.attrs) desc |= an == "description";
      CHECK(desc);
      std::system(("rm -rf '" + out + "'").c_str());
    }
  }
}

TEST_CASE("euxfel: old first/last/status index", "[euxfel]") {
  if (!have_generator()) return;
  std::string out = generate("--scenario oldindex --format 1.0");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  h5d::test::TestCore engine(h5d::test::CoreOptions{});
  auto run = Run::open(engine.files, m["run_dir"].get<std::string>());
  check_run(engine, *run, out, m);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: virtual overview file gives the same arrays", "[euxfel]") {
  if (!have_generator()) return;
  std::string out = generate("--overview --format 1.2");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  std::string dir = m["run_dir"];
  h5d::test::TestCore engine(h5d::test::CoreOptions{});
  auto run = Run::open(engine.files, dir);
  CHECK(run->overview() == dir + "/overview.h5");
  CHECK(run->files().size() == 1);
  check_run(engine, *run, out, m);

  RunOptions no_ov;
  no_ov.use_overview = false;
  auto plain = Run::open(engine.files, dir, no_ov);
  CHECK(plain->overview().empty());
  CHECK(plain->files().size() > 1);
  check_run(engine, *plain, out, m);

  // A file whose size no longer matches makes the overview invalid (voview.check_sources).
  std::string victim = dir + "/RAW-R0338-DA01-S00001.h5";
  REQUIRE(::truncate(victim.c_str(), 0) == 0);
  std::string why;
  CHECK(h5d::euxfel::find_valid_overview(engine.files, dir, &why).empty());
  CHECK(why.find("size") != std::string::npos);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: corrected data with legacy DET names", "[euxfel]") {
  if (!have_generator()) return;
  std::string out = generate("--scenario corr --format 1.2");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  h5d::test::TestCore engine(h5d::test::CoreOptions{});
  auto run = Run::open(engine.files, m["run_dir"].get<std::string>());
  CHECK(run->source("SPB_DET_AGIPD1M-1/DET/0CH0:xtdf").alias_of() ==
        "SPB_DET_AGIPD1M-1/CORR/0CH0:output");
  CHECK(run->source("SPB_DET_AGIPD1M-1/CORR/0CH0:output").alias_of().empty());
  check_run(engine, *run, out, m);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: a train in two sequence files is reported, rows kept in file order",
          "[euxfel]") {
  if (!have_generator()) return;
  std::string out = generate("--scenario dup --format 1.3");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  REQUIRE(m["duplicates"].size() > 0);
  h5d::test::TestCore engine(h5d::test::CoreOptions{});
  auto run = Run::open(engine.files, m["run_dir"].get<std::string>());
  check_run(engine, *run, out, m);
  bool reported = false;
  for (const auto& e : run->errors()) reported |= e.find("conflicting data") != std::string::npos;
  CHECK(reported);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: suspect trains are dropped with inc_suspect_trains=false", "[euxfel]") {
  if (!have_generator()) return;
  std::string out = generate("--format 1.3");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  h5d::test::TestCore engine(h5d::test::CoreOptions{});
  RunOptions o;
  o.inc_suspect_trains = false;
  auto run = Run::open(engine.files, m["run_dir"].get<std::string>(), o);
  // The generator flags train 10005 as suspect (INDEX/flag 0) in the first sequence files.
  auto& t = run->train_ids();
  CHECK(std::find(t.begin(), t.end(), 10005u) == t.end());
  auto gi = run->group_index("SA1_XTD2_XGM/DOOCS/MAIN", "");
  for (const auto& b : gi->blocks)
    CHECK(std::find(b.train_ids.begin(), b.train_ids.end(), 10005u) == b.train_ids.end());
  auto all = Run::open(engine.files, m["run_dir"].get<std::string>());
  CHECK(all->train_ids().size() == t.size() + 1);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: run directory recognition", "[euxfel]") {
  CHECK(h5d::euxfel::is_sequence_file_name("RAW-R0338-AGIPD00-S00001.h5"));
  CHECK(h5d::euxfel::is_sequence_file_name("CORR-R0001-DA01-S00000.h5"));
  CHECK_FALSE(h5d::euxfel::is_sequence_file_name("overview.h5"));
  CHECK_FALSE(h5d::euxfel::is_sequence_file_name("RAW-R0338-OVERVIEW.h5"));
  CHECK_FALSE(h5d::euxfel::is_sequence_file_name("data.h5"));
  CHECK_FALSE(h5d::euxfel::looks_like_run_dir("/nonexistent"));
}

TEST_CASE("euxfel: a run opened through HDF5 helpers (its files read in parallel) equals one opened in process",
          "[euxfel]") {
  if (!have_generator()) {
    WARN("skipped: /usr/bin/python3 with h5py and numpy is needed to write test runs");
    return;
  }
  std::string out = generate("--format 1.3");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  const std::string dir = m["run_dir"].get<std::string>();
  h5d::test::CoreOptions with_helpers;
  with_helpers.helper = h5d::test::helper_options(2, 20000);
  auto same = [](Run& a, Run& b) {
    REQUIRE(b.files().size() == a.files().size());
    for (size_t i = 0; i < a.files().size(); ++i) {
      CHECK(b.files()[i].name == a.files()[i].name);
      CHECK(b.files()[i].train_ids == a.files()[i].train_ids);
      CHECK(b.files()[i].index.size() == a.files()[i].index.size());
    }
    CHECK(b.train_ids() == a.train_ids());
    CHECK(b.format_version() == a.format_version());
    CHECK(b.source_names() == a.source_names());
    // The same notes (the reasons' wording may differ: a helper's error names the request).
    const auto ea = a.errors(), eb = b.errors();
    REQUIRE(eb.size() == ea.size());
    for (size_t i = 0; i < ea.size(); ++i) CHECK(eb[i].substr(0, eb[i].find(": ")) == ea[i].substr(0, ea[i].find(": ")));
    const h5d::Value ma = a.metadata(), mb = b.metadata();
    REQUIRE(mb.members.size() == ma.members.size());
    for (size_t i = 0; i < ma.members.size(); ++i) {
      CHECK(mb.members[i].first == ma.members[i].first);
      CHECK(mb.members[i].second.s == ma.members[i].second.s);
    }
    for (const std::string& src : a.source_names()) {
      INFO(src);
      auto keys = a.keys(src);
      REQUIRE(!keys.empty());
      REQUIRE(b.keys(src).size() == keys.size());
      for (const auto& k : keys) {
        if (!k.is_array) continue;
        INFO(k.name);
        CHECK(read_all(a.engine(), *a.key_array(src, k.name)) == read_all(b.engine(), *b.key_array(src, k.name)));
        break;  // one array per source: the parts' opens in parallel against one at a time
      }
    }
  };
  std::string first;
  {
    h5d::test::TestCore local(h5d::test::CoreOptions{}), remote(with_helpers);
    auto a = Run::open(local.files, dir), b = Run::open(remote.files, dir);
    same(*a, *b);
    first = a->files().front().name;
  }
  // The first file damaged (its bytes replaced): skipped by both, and the run's metadata comes
  // from the next file, as EXtra-data takes files[0] of those it could open.
  const std::string broken = out + "/broken_run";
  REQUIRE(std::system(("cp -r '" + dir + "' '" + broken + "'").c_str()) == 0);
  {
    std::fstream f(broken + "/" + first, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    const std::string junk(4096, 'x');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  {
    h5d::test::TestCore local(h5d::test::CoreOptions{}), remote(with_helpers);
    auto a = Run::open(local.files, broken), b = Run::open(remote.files, broken);
    same(*a, *b);
    CHECK(a->files().front().name != first);
    bool said = false;
    for (const std::string& e : b->errors()) said |= e.find("skipping " + first) != std::string::npos;
    CHECK(said);
    CHECK(!b->metadata().members.empty());
  }
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: a run whose files a files map describes opens none of them and equals the run read from them",
          "[euxfel]") {
  if (!have_generator()) {
    WARN("skipped: /usr/bin/python3 with h5py and numpy is needed to write test runs");
    return;
  }
  std::string out = generate("--format 1.3 --scenario corr");
  REQUIRE(!out.empty());
  auto m = load_manifest(out);
  const std::string dir = m["run_dir"].get<std::string>();
  h5d::test::CoreOptions with_helpers;
  with_helpers.helper = h5d::test::helper_options(2, 20000);
  h5d::test::TestCore local(h5d::test::CoreOptions{}), remote(with_helpers);
  auto a = Run::open(local.files, dir);
  auto known = std::make_shared<h5d::euxfel::KnownFiles>();
  for (const auto& f : a->files()) {
    h5d::euxfel::KnownFile k;
    k.train_ids = f.train_ids;
    k.valid = f.valid;
    k.control_sources = f.control_sources;
    k.instrument_sources = f.instrument_sources;
    k.legacy = f.legacy;
    (*known)[f.name] = k;
  }
  known->erase(a->files().back().name);  // one file the map does not describe: read
  RunOptions opts;
  opts.known = known;
  auto b = Run::open(remote.files, dir, opts);
  CHECK(b->files_from_map() == a->files().size() - 1);
  CHECK(remote.helpers()->files_asked() == 1);  // only the file the map left out
  REQUIRE(b->files().size() == a->files().size());
  CHECK(b->train_ids() == a->train_ids());
  CHECK(b->source_names() == a->source_names());
  for (const std::string& src : a->source_names()) {
    INFO(src);
    CHECK(b->source(src).alias_of() == a->source(src).alias_of());
    CHECK(b->source(src).files() == a->source(src).files());
  }
  CHECK(read_all(local, *a->train_flags_array()) == read_all(remote, *b->train_flags_array()));
  // One module's key: its files are opened, no other.
  const std::string mod = "SPB_DET_AGIPD1M-1/CORR/0CH0:output";
  CHECK(read_all(local, *a->key_array(mod, "image.data")) == read_all(remote, *b->key_array(mod, "image.data")));
  CHECK(read_all(local, *a->key_train_ids(mod, "image.data")) == read_all(remote, *b->key_train_ids(mod, "image.data")));
  CHECK(remote.helpers()->files_asked() == 1 + b->source(mod).files().size());
  // run.json's details (format version, METADATA of the first file) are read when asked.
  CHECK(b->format_version() == a->format_version());
  CHECK(b->proposal() == a->proposal());
  CHECK(b->run_number() == a->run_number());
  const h5d::Value ma = a->metadata(), mb = b->metadata();
  REQUIRE(mb.members.size() == ma.members.size());
  for (size_t i = 0; i < ma.members.size(); ++i) CHECK(mb.members[i].first == ma.members[i].first);
  std::system(("rm -rf '" + out + "'").c_str());
}

TEST_CASE("euxfel: files map entries are used only when they match their files, and damaged maps not at all",
          "[euxfel]") {
  const std::string dir = tmp_root() + "/files-map-" + std::to_string(::getpid());
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  auto make = [&](const std::string& name, size_t bytes) {
    std::ofstream(dir + "/" + name) << std::string(bytes, 'x');
    // mtime 1600000000.5 s: a double Python prints, and parses back, exactly
    const timespec t[2] = {{1600000000, 500000000}, {1600000000, 500000000}};
    REQUIRE(::utimensat(AT_FDCWD, (dir + "/" + name).c_str(), t, 0) == 0);
  };
  make("A.h5", 10);
  make("B.h5", 20);
  make("C.h5", 30);
  auto entry = [](const std::string& name, const std::string& mtime, size_t size, const std::string& rest) {
    return "{\"filename\": \"" + name + "\", \"mtime\": " + mtime + ", \"size\": " + std::to_string(size) + rest + "}";
  };
  const std::string full = ", \"train_ids\": [5, 6, 7], \"control_sources\": [\"X/Y\"], \"instrument_sources\": "
                           "[\"D/DET/0CH0:xtdf\", \"D/DET/0CH0:xtdf\"], \"legacy_sources\": {}, "
                           "\"suspect_train_indices\": [1]";
  std::string why;
  size_t left_out = 0;
  auto k = h5d::vfs::parse_files_map(
      dir,
      "[" + entry("A.h5", "1600000000.5", 10, full) + ", " + entry("B.h5", "1600000000.25", 20, full) + ", " +
          entry("C.h5", "1600000000.5", 31, full) + ", " + entry("../A.h5", "1600000000.5", 10, full) + ", " +
          entry("D.h5", "1600000000.5", 10, full) + ", " +
          // an older EXtra-data's entry, without suspect_train_indices and legacy_sources
          entry("A.h5", "1600000000.5", 10, ", \"train_ids\": [5], \"control_sources\": [], \"instrument_sources\": []") +
          ", 17, null]",
      &why, &left_out);
  CHECK(why.empty());
  CHECK(left_out == 7);  // mtime, size, path, missing file, missing keys, two non-objects
  REQUIRE(k.size() == 1);
  const auto& a = k.at("A.h5");
  CHECK(a.train_ids == std::vector<uint64_t>{5, 6, 7});
  CHECK(a.valid == std::vector<uint8_t>{1, 0, 1});
  CHECK(a.instrument_sources == std::vector<std::string>{"D/DET/0CH0:xtdf"});
  CHECK(a.control_sources == std::vector<std::string>{"X/Y"});
  // Wrong types and out-of-range indices: the entry is left out, nothing else happens.
  for (const std::string& bad : {std::string(", \"train_ids\": [\"5\"]"), std::string(", \"train_ids\": [-5]"),
                                 std::string(", \"train_ids\": {}"),
                                 std::string(", \"suspect_train_indices\": [3]"),
                                 std::string(", \"legacy_sources\": [\"a\"]"),
                                 std::string(", \"control_sources\": [1]")}) {
    INFO(bad);
    std::string text = entry("A.h5", "1600000000.5", 10, full);
    // a later key of the same name wins in nlohmann's object: put the bad one last
    text.insert(text.size() - 1, bad);
    k = h5d::vfs::parse_files_map(dir, "[" + text + "]", &why, &left_out);
    CHECK(why.empty());
    CHECK(k.empty());
    CHECK(left_out == 1);
  }
  for (const std::string& garbage : {std::string("not json"), std::string("{\"filename\": \"A.h5\"}"), std::string("["),
                                     std::string("\"[]\""), std::string(100000, '[')}) {
    k = h5d::vfs::parse_files_map(dir, garbage, &why, &left_out);
    CHECK(!why.empty());
    CHECK(k.empty());
  }
  // read_files_map: the file in the run directory; none there, nothing.
  CHECK(h5d::vfs::read_files_map(dir) == nullptr);
  std::ofstream(dir + "/karabo_data_map.json") << "[" << entry("B.h5", "1600000000.5", 20, full) << "]";
  std::string used;
  auto r = h5d::vfs::read_files_map(dir, &used);
  REQUIRE(r);
  CHECK(used == dir + "/karabo_data_map.json");
  CHECK(r->count("B.h5") == 1);
  std::system(("rm -rf '" + dir + "'").c_str());
}
