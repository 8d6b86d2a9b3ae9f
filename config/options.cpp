#include "config/options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace h5d::config {
namespace {

using nlohmann::json;

// mount(8) and fstab options that mean nothing here. `rw` is among them: mount(8) passes it on
// every mount, so it must never make a mount writable (that takes -o writable).
const std::vector<std::string> kIgnored = {
    "ro", "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "nofail", "_netdev", "auto",
    "noauto", "user", "users", "nouser", "owner", "group", "defaults", "atime", "noatime",
    "relatime", "norelatime", "strictatime", "nostrictatime", "diratime", "nodiratime",
    "lazytime", "nolazytime", "async", "sync", "silent", "loud", "default_permissions"};

bool is_ignored(const std::string& key) {
  return std::find(kIgnored.begin(), kIgnored.end(), key) != kIgnored.end();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

uint64_t parse_uint(const std::string& key, const std::string& v, uint64_t lo, uint64_t hi) {
  if (v.empty() || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    throw ConfigError("option " + key + ": '" + v + "' is not a non-negative integer");
  }
  if (v.size() > 19) throw ConfigError("option " + key + ": '" + v + "' is too large");
  const uint64_t n = std::stoull(v);
  if (n < lo || n > hi) {
    throw ConfigError("option " + key + ": " + v + " is out of range [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
  }
  return n;
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw ConfigError("option " + key + ": '" + v + "' is not a boolean (true/false)");
}

}  // namespace

uint64_t parse_size(const std::string& s0) {
  const std::string s = trim(s0);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string num = s.substr(0, i);
  std::string unit = s.substr(i);
  if (num.empty() || std::count(num.begin(), num.end(), '.') > 1 || num == ".") {
    throw ConfigError("'" + s0 + "' is not a size (examples: 65536, 512M, 4G)");
  }
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "IB") == 0) unit.erase(unit.size() - 2);
  else if (unit.size() >= 2 && unit.back() == 'B') unit.pop_back();
  int shift;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else throw ConfigError("'" + s0 + "': unknown size unit (use K, M, G or T)");
  const long double v = std::stold(num) * std::ldexp(1.0L, shift);
  if (!(v < 18446744073709551615.0L)) throw ConfigError("'" + s0 + "' is too large");
  return static_cast<uint64_t>(v);
}

std::vector<std::string> split_option_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      cur += s[++i];
    } else if (s[i] == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += s[i];
    }
  }
  out.push_back(cur);
  std::vector<std::string> nonempty;
  for (auto& x : out) {
    if (!x.empty()) nonempty.push_back(std::move(x));
  }
  return nonempty;
}

namespace {

// One option as written: key, value (if any) and where it came from.
struct Arg {
  MountOptions& m;
  const std::string& key;
  const std::string& v;
  bool has_value;

  void need_value() const {
    if (!has_value || v.empty()) throw ConfigError("option " + key + " needs a value (" + key + "=...)");
  }
  void no_value() const {
    if (has_value) throw ConfigError("option " + key + " takes no value");
  }
  uint64_t uint(uint64_t lo, uint64_t hi) const {
    need_value();
    return parse_uint(key, v, lo, hi);
  }
  uint64_t size(uint64_t lo, uint64_t hi, const std::string& lo_text) const {
    need_value();
    uint64_t n;
    try {
      n = parse_size(v);
    } catch (const ConfigError& e) {
      throw ConfigError("option " + key + ": " + e.what());
    }
    if (n < lo || n > hi) {
      throw ConfigError("option " + key + ": " + v + " is out of range (at least " + lo_text +
                        ", at most " + std::to_string(hi >> 30) + "G)");
    }
    return n;
  }
  bool flag() const { return has_value ? parse_bool(key, v) : true; }
  double seconds() const {
    need_value();
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(d >= 0) || d > 315360000.0 || v[0] == '-') {
      throw ConfigError("option " + key + ": '" + v + "' is not a number of seconds in [0, 315360000]");
    }
    return d;
  }
  // The index of the value among `choices` ("a|b|c").
  size_t choice(const std::string& choices) const {
    need_value();
    std::vector<std::string> c;
    std::stringstream ss(choices);
    for (std::string x; std::getline(ss, x, '|');) c.push_back(x);
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] == v) return i;
    }
    std::string list;
    for (size_t i = 0; i < c.size(); ++i) list += (i ? (i + 1 == c.size() ? " or " : ", ") : "") + c[i];
    throw ConfigError("option " + key + ": '" + v + "' is not one of " + list);
  }
};

struct Option {
  OptionInfo info;
  std::function<void(const Arg&)> apply;
};

// The option table: parsing, --help and docs/usage.md's table all come from here.
const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      {{"threads", "N", "the number of cores", "decode threads (1-1024)"},
       [](const Arg& a) { a.m.engine.threads = static_cast<unsigned>(a.uint(1, 1024)); }},
      {{"io_depth", "N", "32", "source reads in flight for one file (1-1024); the daemon keeps twice as many I/O threads, so a file whose reads hang leaves as many to the others"},
       [](const Arg& a) { a.m.engine.io_depth = static_cast<unsigned>(a.uint(1, 1024)); }},
      {{"cache_size", "SIZE", "1/8 of RAM, at most 4G", "decoded-chunk cache: 512M, 4G, 1.5GiB, bytes; 0 = the default"},
       [](const Arg& a) { a.m.engine.cache_bytes = a.size(0, 1ull << 40, "0"); }},
      {{"max_open_files", "N", "128", "file descriptors kept open (1-1048576)"},
       [](const Arg& a) { a.m.engine.max_open_files = static_cast<unsigned>(a.uint(1, 1u << 20)); }},
      {{"hdf5_helpers", "N", "2", "helper processes that run libhdf5 for the daemon (1-64)"},
       [](const Arg& a) { a.m.helper.count = static_cast<unsigned>(a.uint(1, 64)); }},
      {{"hdf5_timeout", "S", "30", "seconds a libhdf5 call may take before its helper (or a written file's writer process) is killed; a read helper's file is marked bad (1-3600)"},
       [](const Arg& a) { a.m.helper.timeout_ms = static_cast<unsigned>(a.uint(1, 3600)) * 1000; }},
      {{"sandbox", "all|strict|log|off", "all", "the HDF5 helpers' sandbox: every layer this kernel has (all), refuse to mount unless every layer holds (strict), the system call filter only logging what it would refuse (log: to learn what a libhdf5 build calls), none (off: debugging only, logged as a warning)"},
       [](const Arg& a) {
         static const SandboxMode modes[] = {SandboxMode::All, SandboxMode::Strict, SandboxMode::Log, SandboxMode::Off};
         a.m.helper.sandbox = modes[a.choice("all|strict|log|off")];
       }},
      {{"vds_missing", "error|fill", "error", "a read touching a missing VDS source: EIO, or the fill value"},
       [](const Arg& a) { a.m.engine.vds_missing_fill = a.choice("error|fill") == 1; }},
      {{"prefetch_max", "SIZE", "64M", "largest sequential prefetch window per open file (1152K-64G; there is no 0)"},
       [](const Arg& a) { a.m.vfs.prefetch_max = a.size(a.m.vfs.prefetch_initial, 64ull << 30, "1152K, the first window"); }},
      {{"prefetch_after", "SIZE", "4M", "decode ahead once a read stream has gone this far, and three reads (0: from its third read; files read by single pages: at most two chunks)"},
       [](const Arg& a) { a.m.vfs.prefetch_after = a.size(0, 1ull << 40, "0"); }},
      {{"push", "0|1", "1", "push the rest of the compressed chunks a read touched, and in a stream decoded chunks 1 MiB ahead, into the page cache"},
       [](const Arg& a) { a.m.fuse.push = a.flag(); }},
      {{"splice", "0|1", "1", "reply with uncompressed data spliced from the source file's page cache, without a copy in the daemon"},
       [](const Arg& a) { a.m.fuse.splice = a.flag(); }},
      {{"readahead_kb", "N", "1024 as root, else the kernel's", "kernel read-ahead of the mount in KiB (root only: refused for a user; 0: the kernel's 128)"},
       [](const Arg& a) { a.m.fuse.readahead_kb = static_cast<int>(a.uint(0, 1u << 20)); }},
      {{"run_view", "auto|off|per_file", "auto", "the EuXFEL run view (per_file: also each file of a run on its own, beside the run view)"},
       [](const Arg& a) {
         static const vfs::RunViewMode modes[] = {vfs::RunViewMode::Auto, vfs::RunViewMode::Off,
                                                  vfs::RunViewMode::PerFile};
         a.m.vfs.run_view = modes[a.choice("auto|off|per_file")];
       }},
      {{"inc_suspect_trains", "0|1", "1", "EuXFEL run views keep trains flagged invalid in INDEX/flag, as EXtra-data's RunDirectory(inc_suspect_trains=True)"},
       [](const Arg& a) { a.m.vfs.inc_suspect_trains = a.flag(); }},
      {{"debug", "", "off", "log which path served each read"},
       [](const Arg& a) { a.m.debug = a.flag(); }},
      {{"log", "FILE", "syslog when daemonized, else stderr", "append the log to FILE once the mount exists"},
       [](const Arg& a) {
         a.need_value();
         a.m.log_file = a.v;
       }},
      {{"writable", "", "off", "a writable mount (SOURCE a directory); rw does not make one"},
       [](const Arg& a) { a.m.vfs.writable = a.flag(); }},
      {{"write_compression", "none|gzip|blosc|lz4|zstd", "none", "writable: how new datasets are stored"},
       [](const Arg& a) {
         const size_t i = a.choice("none|gzip|blosc|lz4|zstd|deflate");
         a.m.writer.compression = i == 0 ? "" : i == 5 ? "gzip" : a.v;
       }},
      {{"write_level", "N", "gzip 4, blosc 5, zstd 3", "writable: the level of write_compression (gzip, blosc 0-9; zstd 1-22)"},
       [](const Arg& a) { a.m.writer.level = static_cast<int>(a.uint(0, 22)); }},
      {{"write_existing", "", "off", "writable: in-place writes to contiguous uncompressed datasets"},
       [](const Arg& a) { a.m.writer.write_existing = a.flag(); }},
      {{"write_buffer", "SIZE", "512M", "writable: memory for chunks written in part (then spilled to the file; ENOSPC)"},
       [](const Arg& a) { a.m.writer.pending_budget = a.size(1ull << 20, 1ull << 40, "1M"); }},
      {{"nonempty", "", "off", "allow a non-empty directory or a mount point as MOUNTPOINT"},
       [](const Arg& a) { a.m.nonempty = a.flag(); }},
      {{"allow_other", "", "off", "let other users in (non-root: user_allow_other in /etc/fuse.conf)"},
       [](const Arg& a) { a.m.fuse.allow_other = a.flag(); }},
      {{"allow_root", "", "off", "let root in"},
       [](const Arg& a) { a.m.fuse.allow_root = a.flag(); }},
      {{"auto_unmount", "", "off", "unmount when the daemon dies"},
       [](const Arg& a) { a.m.fuse.auto_unmount = a.flag(); }},
      {{"fsname", "NAME", "the source path", "the device name shown in /proc/mounts"},
       [](const Arg& a) {
         a.need_value();
         a.m.fuse.fsname = a.v;
       }},
      {{"subtype", "NAME", "h5direct", "the type shown in /proc/mounts (fuse.NAME)"},
       [](const Arg& a) {
         a.need_value();
         a.m.fuse.subtype = a.v;
       }},
      {{"max_threads", "N", "64", "FUSE request threads (1-1024; -s: 1)"},
       [](const Arg& a) { a.m.fuse.max_threads = static_cast<unsigned>(a.uint(1, 1024)); }},
      {{"max_idle_threads", "N", "max_threads", "idle FUSE threads kept (1-1024, at most max_threads)"},
       [](const Arg& a) { a.m.fuse.max_idle_threads = static_cast<unsigned>(a.uint(1, 1024)); }},
      {{"uid", "N", "the source's", "the owner shown for every entry"},
       [](const Arg& a) { a.m.vfs.show_uid = static_cast<int64_t>(a.uint(0, 4294967294u)); }},
      {{"gid", "N", "the source's", "the group shown for every entry"},
       [](const Arg& a) { a.m.vfs.show_gid = static_cast<int64_t>(a.uint(0, 4294967294u)); }},
      {{"umask", "OCTAL", "none: the source's modes", "mode shown: 0777 (dirs), 0666 (files) minus umask, minus write bits"},
       [](const Arg& a) {
         a.need_value();
         if (a.v.size() > 4 || a.v.find_first_not_of("01234567") != std::string::npos) {
           throw ConfigError("option umask: '" + a.v + "' is not an octal mode in [0, 0777]");
         }
         const int u = std::stoi(a.v, nullptr, 8);
         if (u > 0777) throw ConfigError("option umask: '" + a.v + "' is not an octal mode in [0, 0777]");
         a.m.vfs.umask = u;
       }},
      {{"attr_timeout", "SECONDS", "86400", "how long the kernel caches attributes (0: asks every time)"},
       [](const Arg& a) { a.m.fuse.attr_timeout = a.seconds(); }},
      {{"entry_timeout", "SECONDS", "86400", "how long the kernel caches names (0: looks up every time)"},
       [](const Arg& a) { a.m.fuse.entry_timeout = a.seconds(); }},
      {{"revalidate", "SECONDS", "1", "directories, files and runs that change while mounted: checked (stat) at most this often at a lookup or listing, and shown anew (0: never; names then cached for entry_timeout)"},
       [](const Arg& a) { a.m.vfs.revalidate = a.seconds(); }},
      {{"kernel_cache", "", "always on", "file contents stay in the page cache across opens (accepted, always so)"},
       [](const Arg& a) { a.no_value(); }},
      {{"config", "FILE", "none", "a JSON object with these keys; -o options override it"},
       [](const Arg& a) {
         a.need_value();
         a.m.config_file = a.v;
       }},
  };
  return table;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

const std::vector<OptionInfo>& option_table() {
  static const std::vector<OptionInfo> t = [] {
    std::vector<OptionInfo> out;
    for (const auto& o : options()) out.push_back(o.info);
    return out;
  }();
  return t;
}

const std::vector<std::string>& ignored_options() { return kIgnored; }

std::string nearest_option(const std::string& key) {
  std::string best;
  size_t best_d = std::string::npos;
  auto consider = [&](const std::string& name) {
    const size_t d = edit_distance(key, name);
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  };
  for (const auto& o : options()) consider(o.info.name);
  for (const auto& n : kIgnored) consider(n);
  return best_d <= std::max<size_t>(2, key.size() / 3) ? best : "";
}

void apply_option(MountOptions& m, const std::string& item, const std::string& origin) {
  const auto eq = item.find('=');
  const std::string key = item.substr(0, eq);
  const bool has_value = eq != std::string::npos;
  const std::string v = has_value ? item.substr(eq + 1) : "";
  try {
    if (key == "config" && origin != "-o") throw ConfigError("option config cannot be used inside a config file");
    const auto& t = options();
    const auto it = std::find_if(t.begin(), t.end(), [&](const Option& o) { return o.info.name == key; });
    if (it != t.end()) {
      it->apply(Arg{m, key, v, has_value});
    } else if (is_ignored(key) || key.rfind("x-", 0) == 0 || key == "comment") {
      // accepted and ignored (mount(8)/fstab conventions; default_permissions is always on)
    } else {
      const std::string near = nearest_option(key);
      throw ConfigError("unknown option '" + key + "'" +
                        (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                        "; see --help for the options");
    }
    m.given.insert(key);
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    if (msg.rfind(origin, 0) == 0) throw;
    throw ConfigError(origin + ": " + msg);
  } catch (const std::exception& e) {
    throw ConfigError(origin + ": option " + key + ": " + e.what());
  }
}

void check_options(const MountOptions& m) {
  auto given = [&](const char* k) { return m.given.count(k) > 0; };
  if (m.fuse.allow_other && m.fuse.allow_root) {
    throw ConfigError("allow_other and allow_root cannot be used together");
  }
  if (m.vfs.writable && given("ro")) {
    throw ConfigError("ro and writable contradict each other: drop one (rw is what mount(8) adds; "
                      "only writable makes a mount writable)");
  }
  if (!m.vfs.writable) {
    for (const char* k : {"write_compression", "write_level", "write_existing", "write_buffer"}) {
      if (given(k)) throw ConfigError(std::string("option ") + k + " applies only to writable mounts (-o writable)");
    }
  }
  if (given("write_level")) {
    const std::string& c = m.writer.compression;
    int lo = 0, hi = 9;
    if (c.empty()) {
      throw ConfigError("option write_level needs write_compression (gzip, blosc or zstd): the level is that compressor's");
    } else if (c == "lz4") {
      throw ConfigError("option write_level: lz4 has no level");
    } else if (c == "zstd") {
      lo = 1;
      hi = 22;
    }
    if (m.writer.level < lo || m.writer.level > hi) {
      throw ConfigError("option write_level: " + std::to_string(m.writer.level) + " is out of range for " + c +
                        " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
  }
  if (given("-s") && given("max_threads") && m.fuse.max_threads > 1) {
    throw ConfigError("-s (one thread) and max_threads=" + std::to_string(m.fuse.max_threads) +
                      " contradict each other");
  }
  if (given("max_idle_threads") && m.fuse.max_idle_threads > m.fuse.max_threads) {
    throw ConfigError("max_idle_threads=" + std::to_string(m.fuse.max_idle_threads) +
                      " is more than max_threads=" + std::to_string(m.fuse.max_threads));
  }
}

void apply_config_json(MountOptions& m, const json& j, const std::string& origin) {
  if (!j.is_object()) throw ConfigError(origin + ": the config must be a JSON object");
  for (const auto& [key, val] : j.items()) {
    std::string item;
    if (val.is_boolean()) {
      item = key + "=" + (val.get<bool>() ? "true" : "false");
      if (is_ignored(key) || key == "kernel_cache") item = val.get<bool>() ? key : "";
    } else if (val.is_number_unsigned()) {
      item = key + "=" + std::to_string(val.get<uint64_t>());
    } else if (val.is_number_integer() && val.get<int64_t>() >= 0) {
      item = key + "=" + std::to_string(val.get<int64_t>());
    } else if (val.is_number_integer()) {
      throw ConfigError(origin + ": option " + key + ": negative numbers are not allowed");
    } else if (val.is_string()) {
      item = key + "=" + val.get<std::string>();
    } else {
      throw ConfigError(origin + ": option " + key + ": expected a string, a whole number or a boolean");
    }
    if (!item.empty()) apply_option(m, item, origin);
  }
}

void apply_config_file(MountOptions& m, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    throw ConfigError("config file " + path + " is not valid JSON: " + e.what());
  }
  apply_config_json(m, j, "config file " + path);
}

InfoOptions parse_info_command_line(const std::vector<std::string>& args) {
  InfoOptions o;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--details" || a == "-d") {
      o.details = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-o") {
      if (i + 1 >= args.size()) throw ConfigError("-o needs an option list");
      for (auto& item : split_option_list(args[++i])) apply_option(o.m, item);
    } else if (!a.empty() && a[0] == '-') {
      throw ConfigError("info: unknown argument '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (o.help) return o;
  if (positional.size() != 1) throw ConfigError("info needs one PATH (a run directory, a run in a mount, or an HDF5 file)");
  o.path = positional[0];
  return o;
}

std::string info_usage_text(const std::string& program) {
  return "usage: " + program + " info [--details] [--json] [-o OPTIONS] PATH\n"
         "  A European XFEL run's summary, as EXtra-data's run.info() (lsxfel RUN) prints it:\n"
         "  trains, detectors, instrument and control sources. PATH: a run directory (read as\n"
         "  a mount reads it, EXtra-data's files map included) or a run as a mount shows it\n"
         "  (its run.json is read). A folder of runs (a proposal's raw/, or the proposal): a\n"
         "  line per run, as lsxfel prints it, with its sources and size. An HDF5 file: its\n"
         "  datasets (path, shape, dtype, layout, chunks, filters; --json: their sidecars'\n"
         "  fields), and what of a damaged or truncated file cannot be read, and why.\n"
         "  --details  every source's keys, dtypes and entry shapes, and trains with data\n"
         "  --json     the run's run.json instead of text\n"
         "  -o         mount options that apply: inc_suspect_trains=0|1, hdf5_helpers=N,\n"
         "             debug (every log line on stderr), ...\n"
         "  Exit status: 0 everything read, 3 read in part (a damaged dataset or group, a\n"
         "  run that cannot be read: each named with why), 1 nothing read, 2 a bad command line.\n";
}

MountOptions parse_command_line(const std::vector<std::string>& args) {
  MountOptions m;
  std::vector<std::string> positional;
  std::vector<std::string> opts;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.empty() || a[0] != '-' || a == "-") {
      positional.push_back(a);
    } else if (a == "--") {
      only_positional = true;
    } else if (a == "-h" || a == "--help") {
      m.help = true;
    } else if (a == "-V" || a == "--version") {
      m.version = true;
    } else if (a == "-f") {
      m.foreground = true;
    } else if (a == "-s") {
      m.fuse.max_threads = 1;  // libfuse's -s: one thread serves every request
      m.given.insert("-s");
    } else if (a == "-d") {
      m.foreground = true;
      m.debug = true;
    } else if (a == "--log-file") {
      if (i + 1 >= args.size()) throw ConfigError("--log-file needs a file name");
      opts.push_back("log=" + args[++i]);
    } else if (a.rfind("--log-file=", 0) == 0) {
      opts.push_back("log=" + a.substr(11));
    } else if (a == "-o") {
      if (i + 1 >= args.size()) throw ConfigError("-o needs an option list");
      for (auto& o : split_option_list(args[++i])) opts.push_back(o);
    } else if (a.rfind("-o", 0) == 0) {
      for (auto& o : split_option_list(a.substr(2))) opts.push_back(o);
    } else {
      throw ConfigError("unknown argument '" + a + "' (see --help)");
    }
  }
  if (m.help || m.version) return m;
  if (positional.size() != 2) {
    throw ConfigError(positional.size() < 2 ? "missing SOURCE and/or MOUNTPOINT"
                                            : "too many arguments: '" + positional[2] + "'");
  }
  m.source = positional[0];
  m.mountpoint = positional[1];
  // The config file first, so that the command line wins.
  for (const auto& o : opts) {
    if (o.rfind("config=", 0) == 0 || o == "config") apply_option(m, o);
  }
  if (!m.config_file.empty()) apply_config_file(m, m.config_file);
  for (const auto& o : opts) {
    if (!(o.rfind("config=", 0) == 0 || o == "config")) apply_option(m, o);
  }
  if (!m.given.count("max_idle_threads")) m.fuse.max_idle_threads = m.fuse.max_threads;
  check_options(m);
  return m;
}

std::string usage_lines(const std::string& program) {
  return "usage: " + program + " SOURCE MOUNTPOINT [-f] [-s] [-d] [-o opt[,opt...]]\n"
         "       " + program + " info [--details] [--json] [-o OPTIONS] PATH\n";
}

std::string usage_text(const std::string& program) {
  std::string out = usage_lines(program) +
R"(
Shows the HDF5 datasets under SOURCE (an HDF5 file or a directory) as .npy, .raw and .json
files under MOUNTPOINT, read-only unless -o writable. info: a European XFEL run's summary, or
an HDF5 file's datasets ()" + program + R"( info --help).

  -f                   stay in the foreground until unmounted (fusermount3 -u MOUNTPOINT)
  -s                   one FUSE thread (max_threads=1)
  --log-file FILE      the same as -o log=FILE
  -d                   foreground + debug
  -h, --help           this text
  -V, --version        the version
Options (-o NAME=VALUE, or "NAME": VALUE in a config file):
)";
  for (const auto& o : option_table()) {
    std::string head = "  -o " + o.name + (o.value.empty() ? "" : "=" + o.value);
    out += head + "\n        " + o.help + " [default: " + o.default_text + "]\n";
  }
  out += "Accepted and ignored (mount(8), fstab): ";
  for (size_t i = 0; i < kIgnored.size(); ++i) out += (i ? ", " : "") + kIgnored[i];
  out += ", x-*, comment\n";
  out += "default_permissions is always on: the source files' owners and modes decide who may read.\n";
  return out;
}

}  // namespace h5d::config
