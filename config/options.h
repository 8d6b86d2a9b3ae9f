// Parsing of mount.h5direct's command line and of the JSON config file (-o config=FILE) into the
// option structs that core (EngineOptions), vfs (VfsOptions) and fusefs (FuseOptions) own. The
// only place options are parsed. Every malformed input throws ConfigError with a message meant
// for the user; nothing here exits or prints.
#pragma once
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/engine/engine.h"
#include "core/h5lib/h5helper.h"
#include "core/write/writer.h"
#include "fusefs/fuse_options.h"
#include "vfs/vfs_options.h"

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
  std::string log_file;     // -o log=FILE: the log once the mount exists (else syslog/stderr)
  bool nonempty = false;    // -o nonempty: a non-empty directory or a mount point may be mounted on
  EngineOptions engine;
  HelperOptions helper;     // the HDF5 helpers: hdf5_helpers=, hdf5_timeout=, sandbox= (paths set by the daemon)
  WriterOptions writer;     // -o write_compression=, write_level=, write_existing (with writable)
  vfs::VfsOptions vfs;      // vfs.writable: -o writable (never the generic rw of mount(8))
  fusefs::FuseOptions fuse;
  std::set<std::string> given;  // the names of the options set (checks that depend on others)
};

// One row of the option table: the one place that knows an option's name, value, default and
// meaning. --help is generated from it, and tests compare docs/usage.md with it.
struct OptionInfo {
  std::string name;         // "threads"
  std::string value;        // "N", "SIZE", "error|fill"; empty for a flag
  std::string default_text; // "128", "off", "the number of cores"
  std::string help;         // one line
};
const std::vector<OptionInfo>& option_table();
// mount(8) and fstab options accepted and ignored (ro and rw among them: neither changes anything).
const std::vector<std::string>& ignored_options();

// Parses the arguments after the program name and checks the result (check_options). Options may come before, between or after the
// two positional arguments; -o lists may repeat. The config file (if any) is applied first, then
// the -o options, so the command line wins.
MountOptions parse_command_line(const std::vector<std::string>& args);

// One option ("key" or "key=value") as from a -o list. `origin` names where it came from.
void apply_option(MountOptions& m, const std::string& item, const std::string& origin = "-o");
// A JSON object with the same keys as -o (values: strings, numbers or booleans).
void apply_config_json(MountOptions& m, const nlohmann::json& j, const std::string& origin);
void apply_config_file(MountOptions& m, const std::string& path);
// The checks that depend on several options: contradictions (ro with writable, -s with
// max_threads), options that do not apply (write_* without writable), levels out of the range of
// the chosen compressor. Throws ConfigError.
void check_options(const MountOptions& m);
// The known option nearest to `key` (edit distance), or "" when none is close.
std::string nearest_option(const std::string& key);

// "512M", "4G", "1.5GiB", "65536" -> bytes (binary units).
uint64_t parse_size(const std::string& s);
// Splits a -o list at commas; "\," is a literal comma.
std::vector<std::string> split_option_list(const std::string& s);

std::string usage_text(const std::string& program);
// The usage lines alone (mounting, info), as --help starts; said after a wrong command line.
std::string usage_lines(const std::string& program);

// `h5direct info [--details] [--json] [-o OPTIONS] PATH` (docs/euxfel.md, "Run summary"): a
// run's summary as EXtra-data's run.info() prints it, from a run view of a mount (PATH/run.json)
// or from a run directory's files; a folder of runs; an HDF5 file's datasets. -o takes the mount
// options (inc_suspect_trains, hdf5_helpers, ...).
struct InfoOptions {
  std::string path;
  bool details = false;  // --details: every source's keys (run.info(details_for_sources=['*']))
  bool json = false;     // --json: run.json as the mount shows it
  bool help = false;
  MountOptions m;        // -o options (engine and vfs parts apply)
};
// The arguments after "info".
InfoOptions parse_info_command_line(const std::vector<std::string>& args);
std::string info_usage_text(const std::string& program);

}  // namespace h5d::config
