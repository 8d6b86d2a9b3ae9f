// Parsing of mount.h5direct's command line and of the JSON config file (-o config=FILE) into the
// option structs that core (EngineOptions), vfs (VfsOptions) and fusefs (FuseOptions) own. The
// only place options are parsed. Every malformed input throws ConfigError with a message meant
// for the user; nothing here exits or prints.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/engine.h"
#include "core/writer.h"
#include "fusefs/options.h"
#include "vfs/options.h"

namespace h5d::config {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MountOptions {
  std::string source;
  std::string mountpoint;
  bool foreground = false;  // -f
  bool help = false;        // -h, --help
  bool version = false;     // -V, --version
  bool debug = false;       // -o debug: log which path served each read
  std::string config_file;  // -o config=FILE (already applied)
  EngineOptions engine;
  WriterOptions writer;     // -o write_compression=, write_level=, write_existing (with rw)
  vfs::VfsOptions vfs;      // vfs.writable: -o rw
  fusefs::FuseOptions fuse;
};

// Parses the arguments after the program name. Options may come before, between or after the
// two positional arguments; -o lists may repeat. The config file (if any) is applied first, then
// the -o options, so the command line wins.
MountOptions parse_command_line(const std::vector<std::string>& args);

// One option ("key" or "key=value") as from a -o list. `origin` names where it came from.
void apply_option(MountOptions& m, const std::string& item, const std::string& origin = "-o");
// A JSON object with the same keys as -o (values: strings, numbers or booleans).
void apply_config_json(MountOptions& m, const nlohmann::json& j, const std::string& origin);
void apply_config_file(MountOptions& m, const std::string& path);

// "512M", "4G", "1.5GiB", "65536" -> bytes (binary units).
uint64_t parse_size(const std::string& s);
// Splits a -o list at commas; "\," is a literal comma.
std::vector<std::string> split_option_list(const std::string& s);

std::string usage_text(const std::string& program);

}  // namespace h5d::config
