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
  CHECK(parse_command_line({"a", "b", "-o", "writable"}).vfs.writable);
  CHECK_FALSE(parse_command_line({"a", "b"}).vfs.writable);
  CHECK(parse_command_line({"a", "b", "-o", "writable,write_compression=gzip,write_existing"}).writer.compression == "gzip");
  CHECK(parse_command_line({"a", "b", "-o", "rw,writable,write_existing"}).writer.write_existing);
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
  CHECK_NOTHROW(apply_config_json(m, {{"writable", true}}, "t"));
  CHECK(m.vfs.writable);
  CHECK_NOTHROW(apply_config_json(m, {{"writable", false}, {"ro", true}, {"threads", 4}}, "t"));
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

// Issue 15: mount(8) always passes rw; only -o writable makes a mount writable.
TEST_CASE("rw and ro from mount(8) mean nothing; writes need -o writable", "[config]") {
  CHECK_FALSE(parse({"a", "b", "-o", "rw"}).vfs.writable);
  CHECK_FALSE(parse({"a", "b", "-o", "rw,dev,suid,defaults"}).vfs.writable);
  CHECK_FALSE(parse({"a", "b", "-o", "ro"}).vfs.writable);
  CHECK(parse({"a", "b", "-o", "rw,writable"}).vfs.writable);
  CHECK(error_of({"a", "b", "-o", "ro,writable"}).find("contradict") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writable", "-o", "ro"}).find("contradict") != std::string::npos);
  MountOptions m;
  apply_config_json(m, {{"rw", true}}, "t");
  CHECK_FALSE(m.vfs.writable);
}

TEST_CASE("options that do not apply, out of range values and contradictions are refused", "[config]") {
  for (const char* o : {"write_compression=gzip", "write_level=3", "write_existing"}) {
    INFO(o);
    CHECK(error_of({"a", "b", "-o", o}).find("writable") != std::string::npos);
    CHECK(error_of({"a", "b", "-o", std::string("rw,") + o}).find("writable") != std::string::npos);
  }
  // write_level=22 used to become 9 for gzip without a word
  CHECK(error_of({"a", "b", "-o", "writable,write_compression=gzip,write_level=22"}).find("out of range for gzip") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writable,write_compression=blosc,write_level=10"}).find("out of range") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writable,write_compression=zstd,write_level=0"}).find("out of range") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writable,write_compression=lz4,write_level=1"}).find("no level") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writable,write_level=3"}).find("needs write_compression") != std::string::npos);
  CHECK(parse({"a", "b", "-o", "writable,write_compression=zstd,write_level=22"}).writer.level == 22);
  CHECK(parse({"a", "b", "-o", "write_level=9,writable,write_compression=gzip"}).writer.level == 9);
  CHECK(error_of({"a", "b", "-o", "write_level=23,writable,write_compression=zstd"}).find("write_level") != std::string::npos);
  // prefetch_max=0 used to be accepted (and meant the first window); the minimum is that window
  CHECK(error_of({"a", "b", "-o", "prefetch_max=0"}).find("prefetch_max") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "prefetch_max=1M"}).find("at least 1152K") != std::string::npos);
  CHECK(parse({"a", "b", "-o", "prefetch_max=1152K"}).vfs.prefetch_max == 1152ull << 10);
  CHECK(parse({"a", "b", "-o", "prefetch_after=0"}).vfs.prefetch_after == 0);
  CHECK(parse({"a", "b", "-o", "cache_size=0"}).engine.cache_bytes == 0);  // 0: the default
  CHECK(error_of({"a", "b", "-s", "-o", "max_threads=4"}).find("contradict") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "max_threads=4,max_idle_threads=8"}).find("more than") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "max_threads=0"}).find("max_threads") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "umask=0999"}).find("umask") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "umask=01777"}).find("umask") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "attr_timeout=-1"}).find("attr_timeout") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "entry_timeout=soon"}).find("entry_timeout") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "kernel_cache=1"}).find("takes no value") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "uid=-3"}).find("uid") != std::string::npos);
}

TEST_CASE("common FUSE options are accepted and mapped", "[config]") {
  auto m = parse({"a", "b", "-s", "-o", "uid=1234,gid=99,umask=027,attr_timeout=1.5,entry_timeout=0,kernel_cache"});
  CHECK(m.fuse.max_threads == 1);
  CHECK(m.fuse.max_idle_threads == 1);
  CHECK(m.vfs.show_uid == 1234);
  CHECK(m.vfs.show_gid == 99);
  CHECK(m.vfs.umask == 027);
  CHECK(m.fuse.attr_timeout == 1.5);
  CHECK(m.fuse.entry_timeout == 0.0);
  auto m2 = parse({"a", "b", "-o", "max_threads=8"});
  CHECK(m2.fuse.max_threads == 8);
  CHECK(m2.fuse.max_idle_threads == 8);
  CHECK(parse({"a", "b"}).vfs.show_uid == -1);
  CHECK(parse({"a", "b"}).vfs.umask == -1);
  CHECK(parse({"a", "b", "-o", "log=/tmp/x.log,nonempty"}).log_file == "/tmp/x.log");
  CHECK(parse({"a", "b", "-o", "nonempty"}).nonempty);
  CHECK(parse({"a", "b", "--log-file", "/tmp/y.log"}).log_file == "/tmp/y.log");
  CHECK(parse({"--log-file=/tmp/z.log", "a", "b"}).log_file == "/tmp/z.log");
  CHECK(error_of({"a", "b", "--log-file"}).find("--log-file") != std::string::npos);
}

TEST_CASE("an unknown option gets the nearest known one suggested", "[config]") {
  CHECK(error_of({"a", "b", "-o", "threds=4"}).find("did you mean 'threads'") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "cachesize=1G"}).find("did you mean 'cache_size'") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "writeable"}).find("did you mean 'writable'") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "max_thread=3"}).find("did you mean 'max_threads'") != std::string::npos);
  CHECK(error_of({"a", "b", "-o", "zzzzzzzzzz"}).find("did you mean") == std::string::npos);
  CHECK(h5d::config::nearest_option("allow_othr") == "allow_other");
}

TEST_CASE("--help is generated from the option table", "[config]") {
  const std::string help = h5d::config::usage_text("h5direct");
  for (const auto& o : h5d::config::option_table()) {
    INFO(o.name);
    const std::string head = "  -o " + o.name + (o.value.empty() ? "" : "=" + o.value) + "\n";
    CHECK(help.find(head) != std::string::npos);
    CHECK(help.find("[default: " + o.default_text + "]") != std::string::npos);
  }
  for (const auto& n : h5d::config::ignored_options()) CHECK_NOTHROW(parse({"a", "b", "-o", n}));
}
