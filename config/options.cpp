#include "config/options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace h5d::config {
namespace {

using nlohmann::json;

// mount(8) and fstab options that mean nothing for a read-only FUSE filesystem.
const std::set<std::string> kIgnored = {
    "ro", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "nofail", "_netdev", "auto",
    "noauto", "user", "users", "nouser", "owner", "group", "defaults", "atime", "noatime",
    "relatime", "norelatime", "strictatime", "nostrictatime", "diratime", "nodiratime",
    "lazytime", "nolazytime", "async", "silent", "loud", "default_permissions"};

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

void apply_option(MountOptions& m, const std::string& item, const std::string& origin) {
  const auto eq = item.find('=');
  const std::string key = item.substr(0, eq);
  const bool has_value = eq != std::string::npos;
  const std::string v = has_value ? item.substr(eq + 1) : "";
  auto need_value = [&] {
    if (!has_value || v.empty()) throw ConfigError(origin + ": option " + key + " needs a value (" + key + "=...)");
  };
  auto size_value = [&] {
    try {
      return parse_size(v);
    } catch (const ConfigError& e) {
      throw ConfigError("option " + key + ": " + e.what());
    }
  };
  auto flag = [&](bool& target) { target = has_value ? parse_bool(key, v) : true; };
  try {
    if (key == "rw") {
      m.vfs.writable = has_value ? parse_bool(key, v) : true;
    } else if (key == "ro") {
      m.vfs.writable = false;
    } else if (key == "write_compression") {
      need_value();
      if (v != "none" && v != "gzip" && v != "deflate" && v != "blosc" && v != "lz4" && v != "zstd") {
        throw ConfigError("option write_compression: '" + v + "' is not one of none, gzip, blosc, lz4, zstd");
      }
      m.writer.compression = v == "none" ? "" : v;
    } else if (key == "write_level") {
      need_value();
      m.writer.level = static_cast<int>(parse_uint(key, v, 0, 22));
    } else if (key == "write_existing") {
      flag(m.writer.write_existing);
    } else if (kIgnored.count(key) || key.rfind("x-", 0) == 0 || key == "comment") {
      // accepted and ignored (mount(8)/fstab conventions; default_permissions is always on)
    } else if (key == "threads") {
      need_value();
      m.engine.threads = static_cast<unsigned>(parse_uint(key, v, 1, 1024));
    } else if (key == "cache_size") {
      need_value();
      m.engine.cache_bytes = size_value();
    } else if (key == "max_open_files") {
      need_value();
      m.engine.max_open_files = static_cast<unsigned>(parse_uint(key, v, 1, 1u << 20));
    } else if (key == "hdf5_helpers") {
      need_value();
      m.engine.helper.count = static_cast<unsigned>(parse_uint(key, v, 1, 64));
    } else if (key == "hdf5_timeout") {
      need_value();
      m.engine.helper.timeout_ms = static_cast<unsigned>(parse_uint(key, v, 1, 3600)) * 1000;
    } else if (key == "vds_missing") {
      need_value();
      if (v == "error") m.engine.vds_missing_fill = false;
      else if (v == "fill") m.engine.vds_missing_fill = true;
      else throw ConfigError("option vds_missing: '" + v + "' is not one of error, fill");
    } else if (key == "prefetch_max") {
      need_value();
      m.vfs.prefetch_max = size_value();
    } else if (key == "push") {
      flag(m.fuse.push);
    } else if (key == "prefetch_after") {
      need_value();
      m.vfs.prefetch_after = size_value();
    } else if (key == "run_view") {
      need_value();
      if (v == "auto") m.vfs.run_view = vfs::RunViewMode::Auto;
      else if (v == "off") m.vfs.run_view = vfs::RunViewMode::Off;
      else if (v == "per_file") m.vfs.run_view = vfs::RunViewMode::PerFile;
      else throw ConfigError("option run_view: '" + v + "' is not one of auto, off, per_file");
    } else if (key == "debug") {
      flag(m.debug);
    } else if (key == "allow_other") {
      flag(m.fuse.allow_other);
    } else if (key == "allow_root") {
      flag(m.fuse.allow_root);
    } else if (key == "auto_unmount") {
      flag(m.fuse.auto_unmount);
    } else if (key == "fsname") {
      need_value();
      m.fuse.fsname = v;
    } else if (key == "subtype") {
      need_value();
      m.fuse.subtype = v;
    } else if (key == "readahead_kb") {
      need_value();
      m.fuse.readahead_kb = static_cast<int>(parse_uint(key, v, 0, 1u << 20));
    } else if (key == "config") {
      need_value();
      if (origin != "-o") throw ConfigError("option config cannot be used inside a config file");
      m.config_file = v;
    } else {
      throw ConfigError("unknown option '" + key + "' (see mount.h5direct --help)");
    }
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    if (msg.rfind(origin, 0) == 0) throw;
    throw ConfigError(origin + ": " + msg);
  } catch (const std::exception& e) {
    throw ConfigError(origin + ": option " + key + ": " + e.what());
  }
  if (m.fuse.allow_other && m.fuse.allow_root) {
    throw ConfigError(origin + ": allow_other and allow_root cannot be used together");
  }
}

void apply_config_json(MountOptions& m, const json& j, const std::string& origin) {
  if (!j.is_object()) throw ConfigError(origin + ": the config must be a JSON object");
  for (const auto& [key, val] : j.items()) {
    std::string item;
    if (val.is_boolean()) {
      item = key + "=" + (val.get<bool>() ? "true" : "false");
      if (kIgnored.count(key)) item = val.get<bool>() ? key : "";
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
    } else if (a == "-d") {
      m.foreground = true;
      m.debug = true;
    } else if (a == "-o") {
      if (i + 1 >= args.size()) throw ConfigError("-o needs an option list");
      for (auto& o : split_option_list(args[++i])) opts.push_back(o);
    } else if (a.rfind("-o", 0) == 0) {
      for (auto& o : split_option_list(a.substr(2))) opts.push_back(o);
    } else {
      throw ConfigError("unknown argument '" + a + "' (see mount.h5direct --help)");
    }
  }
  if (m.help || m.version) return m;
  if (positional.size() != 2) {
    throw ConfigError(positional.size() < 2 ? "missing SOURCE and/or MOUNTPOINT (usage: mount.h5direct SOURCE MOUNTPOINT [-f] [-o opt,...])"
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
  return m;
}

std::string usage_text(const std::string& program) {
  return "usage: " + program + " SOURCE MOUNTPOINT [-f] [-o opt[,opt...]]\n"
R"(
Shows the HDF5 datasets under SOURCE (an HDF5 file or a directory) as .npy, .raw and .json
files under MOUNTPOINT (read-only unless -o rw).

  -f                   stay in the foreground until unmounted (fusermount3 -u MOUNTPOINT)
  -d                   foreground + debug
  -h, --help           this text
  -V, --version        the version
  -o threads=N         decode threads (default: number of cores)
  -o cache_size=SIZE   decoded-chunk cache (e.g. 512M, 4G; default 1/8 of RAM, at most 4G)
  -o max_open_files=N  file descriptors kept open (default 128)
  -o hdf5_helpers=N    helper processes that run libhdf5 for the daemon (default 2)
  -o hdf5_timeout=S    a libhdf5 call taking longer is killed, its file marked bad (default 30)
  -o vds_missing=error|fill  reads touching a missing VDS source fail with EIO (default) or
                       read as the fill value
  -o prefetch_max=SIZE largest sequential prefetch window per open file (default 64M)
  -o push=0|1          push the rest of partly read compressed chunks into the page cache
                       (default 1)
  -o prefetch_after=SIZE
                       prefetch only once a read stream has gone this far (default 4M)
  -o readahead_kb=N    kernel read-ahead for this mount in KiB (root only; default 1024 as
                       root, 0 keeps the kernel's 128)
  -o run_view=auto|off|per_file  EuXFEL run view (default auto)
  -o debug             log which path served each read
  -o allow_other, allow_root, auto_unmount, fsname=NAME, subtype=NAME
  -o config=FILE       a JSON object with the same keys; -o options override it
  -o rw                writable mount (SOURCE a directory): mkdir NAME.h5 makes a new HDF5 file,
                       NAME.npy (a .npy header) or NAME.json (a spec) in it a new dataset
  -o write_compression=none|gzip|blosc|lz4|zstd  default for new datasets (default none:
                       contiguous, written with pwrite); write_level=N its level
  -o write_existing    rw: allow in-place writes to existing uncompressed contiguous datasets
  -o ro, dev, suid, nofail, _netdev, ...  accepted (ro is the default) and ignored
default_permissions is always on: the source files' owners and modes decide who may read.
)";
}

}  // namespace h5d::config
