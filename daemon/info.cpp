#include "daemon/info.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/options.h"
#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/run.h"
#include "core/fmt/chunk_index.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "core/log.h"
#include "vfs/run_view.h"
#include "vfs/sidecar.h"
#include "vfs/tree.h"

namespace h5d::daemon {
namespace {

// Exit statuses (docs/usage.md, "Run summary: h5direct info"): 2 is a bad command line.
constexpr int kAllRead = 0, kNothingRead = 1, kReadInPart = 3;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool has_h5_files(const std::string& dir) {
  for (const std::string& n : entries(dir))
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0) return true;
  return false;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// run.json of a run view in a mount: PATH/run.json, and no .h5 files beside it.
bool read_mounted_summary(const std::string& path, nlohmann::json& out) {
  const std::string p = path + "/run.json";
  struct stat st;
  if (::stat(p.c_str(), &st) != 0 || has_h5_files(path)) return false;
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  out = nlohmann::json::parse(ss.str());
  return true;
}

// A run: a directory of .h5 files, or a run view in a mount.
bool is_run(const std::string& dir) {
  struct stat st;
  return has_h5_files(dir) || ::stat((dir + "/run.json").c_str(), &st) == 0;
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The files `info` reads (through HDF5 helpers, as in a mount), opened at the first use;
// warnings (files skipped, data errors) go to stderr, every line with -o debug.
class Reader {
 public:
  Reader(const std::string& program, config::InfoOptions& o) : program_(program), o_(o) {}
  H5Files& files() {
    if (!files_) {
      o_.m.helper.path = find_helper();
      if (o_.m.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      const bool all = o_.m.debug;
      const std::string program = program_;
      log::set_debug(all);
      log::set_sink([program, all](log::Level l, const std::string& msg) {
        if (all || l >= log::Level::Warn) std::fprintf(stderr, "%s: %s\n", program.c_str(), msg.c_str());
      });
      engine_ = std::make_unique<Engine>(o_.m.engine);
      files_ = std::make_unique<H5Files>(*engine_, o_.m.helper);
    }
    return *files_;
  }
  // A run's run.json: read in a mount, else made from its files as a mount's run view makes it
  // (EXtra-data's files map included).
  nlohmann::json summary(const std::string& dir) {
    nlohmann::json j;
    if (read_mounted_summary(dir, j)) return j;
    auto run = vfs::open_run(files(), dir, o_.m.vfs);
    return vfs::run_summary_json(*run);
  }

 private:
  std::string program_;
  config::InfoOptions& o_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<H5Files> files_;  // destroyed before the engine
};

// ---- An HDF5 file -------------------------------------------------------------------------------

// The datasets of an HDF5 file, walked from its root group: hard-linked groups are entered (at
// most kMaxDepth deep: hard links can make a cycle), groups reached through soft or external
// links are named with their target, not entered (they lead back into the tree or elsewhere).
// A group that cannot be listed is named with why, and the walk goes on (as a mount lists what
// it can).
constexpr int kMaxDepth = 32;

struct FileWalk {
  nlohmann::json datasets = nlohmann::json::array(), links = nlohmann::json::array(),
                 unreadable_groups = nlohmann::json::array();
};

void walk_file(H5File& f, const std::string& group, int depth, FileWalk& w) {
  std::vector<LinkEntry> members;
  try {
    members = f.list_group(group);
  } catch (const std::exception& e) {
    if (group == "/") throw;  // nothing in the file can be read
    w.unreadable_groups.push_back({{"path", group}, {"error", e.what()}});
    return;
  }
  for (const LinkEntry& e : members) {
    const std::string path = (group == "/" ? "" : group) + "/" + e.name;
    if (e.kind == ObjectKind::Dataset) {
      nlohmann::json d;
      try {
        d = vfs::dataset_sidecar(*f.dataset_info(path), 0);
        for (const char* k : {"sidecar_version", "file", "npy_data_offset", "raw_offset", "attrs"}) d.erase(k);
        // What of its storage cannot be read (chunks past a cut, a damaged chunk index), as a
        // mount finds it when those bytes are read.
        if (d.value("is_array", false)) {
          const std::string why = f.dataset_array(path)->damage();
          if (!why.empty()) d["damaged"] = why;
        }
      } catch (const std::exception& err) {  // one unreadable dataset: said, the others listed
        d = {{"error", err.what()}};
      }
      d["path"] = path;
      if (!e.soft_target.empty()) d["link"] = e.soft_target;
      w.datasets.push_back(std::move(d));
    } else if (e.kind == ObjectKind::Group) {
      if (!e.soft_target.empty()) {
        w.links.push_back({{"path", path}, {"target", e.soft_target}});
      } else if (depth < kMaxDepth) {
        walk_file(f, path, depth + 1, w);
      }
    }
  }
}

std::string shape_text(const nlohmann::json& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].dump();
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string count_text(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// One line a dataset: path, shape, dtype, layout (chunks, filters), and what is damaged.
std::string file_info_text(const nlohmann::json& j) {
  std::ostringstream out;
  const auto& ds = j["datasets"];
  size_t unreadable = 0, damaged = 0;
  for (const auto& d : ds) {
    unreadable += d.contains("error");
    damaged += d.contains("damaged");
  }
  const size_t groups = j["unreadable_groups"].size();
  out << j["file"].get<std::string>() << ": HDF5 file, ";
  if (j.contains("truncated")) out << "truncated: " << j["truncated"].get<std::string>() << "; ";
  if (unreadable + damaged + groups == 0) {
    out << count_text(ds.size(), "dataset");
  } else {
    out << ds.size() - unreadable - damaged << " dataset" << (ds.size() - unreadable - damaged == 1 ? "" : "s")
        << " readable";
    if (damaged) out << ", " << damaged << " damaged";
    if (unreadable) out << ", " << unreadable << " unreadable";
    if (groups) out << ", " << count_text(groups, "group") << " unreadable";
  }
  out << " (mount it to read them as .npy files)\n";
  for (const auto& d : ds) {
    out << "  " << d["path"].get<std::string>();
    if (d.contains("error")) {
      out << "  unreadable: " << d["error"].get<std::string>() << "\n";
      continue;
    }
    if (d.value("is_array", false)) {
      const auto& t = d["dtype"];
      out << "  " << shape_text(d["shape"]) << " " << (t.is_string() ? t.get<std::string>() : t.dump());
    } else {
      out << "  " << d.value("hdf5_type", std::string("?")) << " (not an array)";
    }
    out << "  " << d.value("layout", std::string("?"));
    if (d.contains("chunks") && d["chunks"].is_array() && !d["chunks"].empty()) out << " " << shape_text(d["chunks"]);
    if (d.contains("filters") && d["filters"].is_array()) {
      for (const auto& fl : d["filters"]) out << " " << fl.value("name", std::string("?"));
    }
    if (d.contains("link")) out << "  -> " << d["link"].get<std::string>();
    if (d.contains("damaged")) out << "  damaged: " << d["damaged"].get<std::string>();
    out << "\n";
  }
  for (const auto& l : j["links"]) {
    out << "  " << l["path"].get<std::string>() << "/  -> " << l["target"].get<std::string>() << "\n";
  }
  for (const auto& g : j["unreadable_groups"]) {
    out << "  " << g["path"].get<std::string>() << "/  unreadable: " << g["error"].get<std::string>() << "\n";
  }
  return out.str();
}

// A file shorter than the end its superblock stores: "N bytes, its superblock says M"; "" else.
std::string truncation(const std::string& path) {
  try {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return {};
    FdCache fds(1);
    auto fd = fds.get(path);
    const uint64_t stored = fmt::read_stored_end(*fd);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (stored <= size) return {};
    const std::string m = fmt::truncated_message(size, stored);  // "truncated file: N bytes, ..."
    const std::string head = "truncated file: ";
    return m.rfind(head, 0) == 0 ? m.substr(head.size()) : m;
  } catch (const std::exception&) {
    return {};
  }
}

int file_info(Reader& reader, const config::InfoOptions& o) {
  nlohmann::json summary = {{"file", o.path}};
  const std::string cut = truncation(o.path);
  if (!cut.empty()) summary["truncated"] = cut;
  FileWalk w;
  try {
    walk_file(*reader.files().open(o.path), "/", 0, w);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("nothing in it can be read: ") + e.what());
  }
  summary["datasets"] = std::move(w.datasets);
  summary["links"] = std::move(w.links);
  summary["unreadable_groups"] = std::move(w.unreadable_groups);
  bool partial = !summary["unreadable_groups"].empty();
  for (const auto& d : summary["datasets"]) partial = partial || d.contains("error") || d.contains("damaged");
  std::fputs(o.json ? vfs::json_text(summary).c_str() : file_info_text(summary).c_str(), stdout);
  return partial ? kReadInPart : kAllRead;
}

// ---- A folder of runs, as lsxfel summarises it ---------------------------------------------------

// The runs below `dir` (its subdirectories that hold a run), summarised one a line; a run that
// cannot be read is named with why. Returns the exit status; -1 when `dir` holds no run.
int folder_info(Reader& reader, const config::InfoOptions& o, const std::string& dir, const std::string& heading) {
  std::vector<std::string> runs;
  for (const std::string& n : entries(dir))
    if (n[0] != '.' && is_dir(dir + "/" + n) && is_run(dir + "/" + n)) runs.push_back(n);
  if (runs.empty()) return -1;
  int status = kAllRead;
  nlohmann::json list = nlohmann::json::array();
  std::string text = heading;
  for (const std::string& n : runs) {
    try {
      const nlohmann::json s = reader.summary(dir + "/" + n);
      text += vfs::run_line_text(s, n) + "\n";
      list.push_back({{"name", n}, {"run", s}});
    } catch (const std::exception& e) {
      status = kReadInPart;
      text += "  " + n + " : cannot read: " + e.what() + "\n";
      list.push_back({{"name", n}, {"error", e.what()}});
    }
  }
  if (o.json) {
    std::fputs(vfs::json_text({{"directory", dir}, {"runs", list}}).c_str(), stdout);
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return status;
}

// Why PATH cannot be summarized, before anything is opened; "" when it may be (a directory or
// an HDF5 file, which sets `is_file`).
std::string path_problem(const std::string& path, bool& is_file) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  is_file = S_ISREG(st.st_mode);
  if (is_file) {
    if (::access(path.c_str(), R_OK) != 0) return std::strerror(errno);
    if (!vfs::is_hdf5_file(path)) {
      return "not a directory, nor an HDF5 file: info takes a run directory, a run in a mount, or an HDF5 file";
    }
    return {};
  }
  if (!S_ISDIR(st.st_mode)) return "not a directory: info takes a run directory, a run in a mount, or an HDF5 file";
  DIR* d = ::opendir(path.c_str());
  if (!d) return std::string("cannot list it: ") + std::strerror(errno);
  ::closedir(d);
  return {};
}

}  // namespace

int run_info(const std::string& program, const std::vector<std::string>& args) {
  config::InfoOptions o;
  try {
    o = config::parse_info_command_line(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n%s", program.c_str(), e.what(), config::info_usage_text(program).c_str());
    return 2;
  }
  if (o.help) {
    std::fputs(config::info_usage_text(program).c_str(), stdout);
    return 0;
  }
  bool is_file = false;
  if (std::string why = path_problem(o.path, is_file); !why.empty()) {
    std::fprintf(stderr, "%s info: %s: %s\n", program.c_str(), o.path.c_str(), why.c_str());
    return kNothingRead;
  }
  o.m.helper.roots = {o.path};  // what the helpers may open (core/h5lib/broker.h)
  Reader reader(program, o);
  try {
    if (is_file) return file_info(reader, o);  // an HDF5 file: its datasets
    const std::string name = base_name(o.path);
    if (!is_run(o.path)) {
      // A folder of runs (a proposal's raw/), or a proposal directory holding raw/.
      int status = folder_info(reader, o, o.path, name + " : Proposal data directory\n\n");
      if (status < 0 && is_dir(o.path + "/raw"))
        status = folder_info(reader, o, o.path + "/raw", name + " : Proposal directory\n\n" + name + "/raw/\n");
      if (status >= 0) return status;
    }
    const nlohmann::json summary = reader.summary(o.path);
    std::fputs(o.json ? vfs::json_text(summary).c_str() : vfs::run_info_text(summary, o.details).c_str(), stdout);
  } catch (const std::exception& e) {
    // Said once: messages from below often start with the path already.
    const std::string what = e.what();
    const bool named = what.rfind(o.path + ":", 0) == 0 || what.rfind(o.path + " ", 0) == 0;
    std::fprintf(stderr, "%s info: %s%s\n", program.c_str(), named ? "" : (o.path + ": ").c_str(), what.c_str());
    return kNothingRead;
  }
  return kAllRead;
}

}  // namespace h5d::daemon
