// Option parsing: -o lists, the JSON config file, sizes, bad input.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/options.h"

using h5d::config::apply_config_json;
using h5d::config::ConfigError;
using h5d::config::MountOptions;
using h5d::config::parse_command_line;
using h5d::config::parse_size;
using h5d::config::split_option_list;

namespace {
MountOptions parse(std::vector<std::string> a) { return parse_command_line(a); }
std::string error_of(std::vector<std::string> a) {
  try {
    parse_command_line(a);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("sizes", "[config]") {
  CHECK(parse_size("65536") == 65536);
  CHECK(parse_size("512M") == 512ull << 20);
  CHECK(parse_size("4G") == 4ull << 30);
  CHECK(parse_size("4g") == 4ull << 30);
  CHECK(parse_size("1.5GiB") == 3ull << 29);
  CHECK(parse_size("2KB") == 2048);
  CHECK(parse_size("1T") == 1ull << 40);
  for (const char* bad : {"", "M", "-1", "12Q", "1.2.3", "abc", ".", "99999999999999999999T"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size(bad), ConfigError);
  }
}

TEST_CASE("option lists split at unescaped commas", "[config]") {
  CHECK(split_option_list("a,b=1,,c") == std::vector<std::string>{"a", "b=1", "c"});
  CHECK(split_option_list("fsname=x\\,y,ro") == std::vector<std::string>{"fsname=x,y", "ro"});
  CHECK(split_option_list("").empty());
}

TEST_CASE("command line: positionals, -f, -o anywhere", "[config]") {
  auto m = parse({"src.h5", "/mnt", "-f", "-o", "threads=3,cache_size=512M", "-omax_open_files=7"});
  CHECK(m.source == "src.h5");
  CHECK(m.mountpoint == "/mnt");
  CHECK(m.foreground);
  CHECK(m.engine.threads == 3);
  CHECK(m.engine.cache_bytes == 512ull << 20);
  CHECK(m.engine.max_open_files == 7);

  auto m2 = parse({"-o", "ro,dev,suid,nofail,_netdev,x-systemd.automount,default_permissions", "a", "b"});
  CHECK(m2.source == "a");
  CHECK_FALSE(m2.foreground);

  auto m3 = parse({"a", "b", "-o", "vds_missing=fill,debug,allow_other,auto_unmount,fsname=foo,"
                                   "subtype=bar,readahead_kb=1024,run_view=per_file,prefetch_max=8M,prefetch_after=3M"});
  CHECK(m3.engine.vds_missing_fill);
  CHECK(m3.debug);
  CHECK(m3.fuse.allow_other);
  CHECK(m3.fuse.auto_unmount);
  CHECK(m3.fuse.fsname == "foo");
  CHECK(m3.fuse.subtype == "bar");
  CHECK(m3.fuse.readahead_kb == 1024);
  CHECK(m2.fuse.readahead_kb == -1);  // default: decided at mount time (1024 as root)
  CHECK(parse({"a", "b", "-o", "readahead_kb=0"}).fuse.readahead_kb == 0);
  CHECK(m3.vfs.run_view == h5d::vfs::RunViewMode::PerFile);
  CHECK(m3.vfs.prefetch_max == 8ull << 20);
  CHECK(m3.vfs.prefetch_after == 3ull << 20);

  CHECK(parse({"--help"}).help);
  CHECK(parse({"-V"}).version);
  CHECK(parse({"-d", "a", "b"}).debug);
  CHECK(parse({"--", "-weird", "b"}).source == "-weird");
}

TEST_CASE("command line: bad input gives clear errors", "[config]") {
  CHECK(error_of({"a"}).find("missing") != std::string::npos);
  CHECK(error_of({"a", "b", "c"}).find("too many") != std::string::npos);
  CHECK(parse_command_line({"a", "b", "-o", "rw"}).vfs.writable);
  CHECK_FALSE(parse_command_line({"a", "b"}).vfs.writable);
  CHECK_FALSE(parse_command_line({"a", "b", "-o", "rw,ro"}).vfs.writable);
  CHECK(parse_command_line({"a", "b", "-o", "rw,write_compression=gzip,write_existing"}).writer.compression == "gzip");
  CHECK(parse_command_line({"a", "b", "-o", "rw,write_existing"}).writer.write_existing);
  CHECK(error_of({"a", "b", "-o", "write_compression=rar"}).find("write_compression") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "bogus=1"}).find("unknown option 'bogus'") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "threads=0"}).find("threads") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "threads=x"}).find("threads") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "threads"}).find("needs a value") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "threads=99999999999999999999999"}).find("threads") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "cache_size=lots"}).find("cache_size") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "vds_missing=maybe"}).find("vds_missing") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "run_view=x"}).find("run_view") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "allow_other,allow_root"}).find("together") != std::string::npos);
  CHECK(error_of({"a", "b", "-x"}).find("unknown argument") != std::string::npos);
  CHECK(error_of({"a", "b", "-o"}).find("-o") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "config=/nonexistent/h5d.json"}).find("cannot read") != std::string::npos);
}

TEST_CASE("config file: same keys, command line wins", "[config]") {
  const std::string path = std::string(std::getenv("H5D_TEST_TMP") ? std::getenv("H5D_TEST_TMP") : "/tmp") +
                           "/test_config_file.json";
  {
    std::ofstream out(path);
    out << R"({"threads": 5, "cache_size": "1G", "debug": true, "allow_other": false,
              "vds_missing": "fill", "ro": true})";
  }
  auto m = parse({"a", "b", "-o", "threads=2,config=" + path});
  CHECK(m.engine.threads == 2);  // -o wins, whatever its position
  CHECK(m.engine.cache_bytes == 1ull << 30);
  CHECK(m.debug);
  CHECK(m.engine.vds_missing_fill);
  CHECK(m.config_file == path);
  {
    std::ofstream out(path);
    out << "{not json";
  }
  CHECK(error_of({"a", "b", "-o", "config=" + path}).find("not valid JSON") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("config JSON: types are checked", "[config]") {
  MountOptions m;
  CHECK_THROWS_AS(apply_config_json(m, nlohmann::json::array(), "t"), ConfigError);
  CHECK_THROWS_AS(apply_config_json(m, {{"threads", -1}}, "t"), ConfigError);
  CHECK_THROWS_AS(apply_config_json(m, {{"threads", 1.5}}, "t"), ConfigError);
  CHECK_THROWS_AS(apply_config_json(m, {{"threads", {1, 2}}}, "t"), ConfigError);
  CHECK_THROWS_AS(apply_config_json(m, {{"config", "x"}}, "t"), ConfigError);
  CHECK_NOTHROW(apply_config_json(m, {{"rw", true}}, "t"));
  CHECK(m.vfs.writable);
  CHECK_NOTHROW(apply_config_json(m, {{"rw", false}, {"ro", true}, {"threads", 4}}, "t"));
  CHECK_FALSE(m.vfs.writable);
  CHECK(m.engine.threads == 4);
  try {
    apply_config_json(m, {{"nope", 1}}, "config file x.json");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("config file x.json") != std::string::npos);
    CHECK(std::string(e.what()).find("nope") != std::string::npos);
  }
}
