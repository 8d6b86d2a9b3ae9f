#include "daemon/info.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/options.h"
#include "core/engine/engine.h"
#include "core/euxfel/run.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "core/log.h"
#include "vfs/run_view.h"
#include "vfs/sidecar.h"
#include "vfs/tree.h"

namespace h5d::daemon {
namespace {

bool has_h5_files(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0) found = true;
  }
  ::closedir(d);
  return found;
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

// The datasets of an HDF5 file, walked from its root group: hard-linked groups are entered (at
// most kMaxDepth deep: hard links can make a cycle), groups reached through soft or external
// links are named with their target, not entered (they lead back into the tree or elsewhere).
constexpr int kMaxDepth = 32;

void walk_file(H5File& f, const std::string& group, int depth, nlohmann::json& datasets,
               nlohmann::json& links) {
  for (const LinkEntry& e : f.list_group(group)) {
    const std::string path = (group == "/" ? "" : group) + "/" + e.name;
    if (e.kind == ObjectKind::Dataset) {
      nlohmann::json d;
      try {
        d = vfs::dataset_sidecar(*f.dataset_info(path), 0);
        for (const char* k : {"sidecar_version", "file", "npy_data_offset", "raw_offset", "attrs"}) d.erase(k);
      } catch (const std::exception& err) {  // one unreadable dataset: said, the others listed
        d = {{"error", err.what()}};
      }
      d["path"] = path;
      if (!e.soft_target.empty()) d["link"] = e.soft_target;
      datasets.push_back(std::move(d));
    } else if (e.kind == ObjectKind::Group) {
      if (!e.soft_target.empty()) {
        links.push_back({{"path", path}, {"target", e.soft_target}});
      } else if (depth < kMaxDepth) {
        walk_file(f, path, depth + 1, datasets, links);
      }
    }
  }
}

std::string shape_text(const nlohmann::json& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].dump();
  return out + (shape.size() == 1 ? ",)" : ")");
}

// One line a dataset: path, shape, dtype, layout (chunks, filters).
std::string file_info_text(const nlohmann::json& j) {
  std::ostringstream out;
  const auto& ds = j["datasets"];
  out << j["file"].get<std::string>() << ": HDF5 file, " << ds.size() << " dataset" << (ds.size() == 1 ? "" : "s")
      << " (mount it to read them as .npy files)\n";
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
    out << "\n";
  }
  for (const auto& l : j["links"]) {
    out << "  " << l["path"].get<std::string>() << "/  -> " << l["target"].get<std::string>() << "\n";
  }
  return out.str();
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
    return 1;
  }
  o.m.engine.helper.roots = {o.path};  // what the helpers may open (core/h5lib/broker.h)
  try {
    nlohmann::json summary;
    if (is_file) {
      // An HDF5 file: its datasets (a run's summary needs the run's directory).
      o.m.engine.helper.path = find_helper();
      if (o.m.engine.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      Engine engine(o.m.engine);
      summary = {{"file", o.path}, {"datasets", nlohmann::json::array()}, {"links", nlohmann::json::array()}};
      walk_file(*engine.open_file(o.path), "/", 0, summary["datasets"], summary["links"]);
      std::fputs(o.json ? vfs::json_text(summary).c_str() : file_info_text(summary).c_str(), stdout);
      return 0;
    }
    if (!read_mounted_summary(o.path, summary)) {
      o.m.engine.helper.path = find_helper();
      if (o.m.engine.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      // Warnings (files skipped, data errors) on stderr, every line with -o debug; the summary
      // alone on stdout.
      const bool all = o.m.debug;
      log::set_debug(all);
      log::set_sink([program, all](log::Level l, const std::string& msg) {
        if (all || l >= log::Level::Warn) std::fprintf(stderr, "%s: %s\n", program.c_str(), msg.c_str());
      });
      Engine engine(o.m.engine);
      // As a mount's run view opens it: EXtra-data's files map included.
      auto run = vfs::open_run(engine, o.path, o.m.vfs);
      summary = vfs::run_summary_json(*run);
    }
    if (o.json) {
      std::fputs(vfs::json_text(summary).c_str(), stdout);
    } else {
      std::fputs(vfs::run_info_text(summary, o.details).c_str(), stdout);
    }
  } catch (const std::exception& e) {
    // Said once: messages from below often start with the path already.
    const std::string what = e.what();
    const bool named = what.rfind(o.path + ":", 0) == 0 || what.rfind(o.path + " ", 0) == 0;
    std::fprintf(stderr, "%s info: %s%s\n", program.c_str(), named ? "" : (o.path + ": ").c_str(), what.c_str());
    return 1;
  }
  return 0;
}

}  // namespace h5d::daemon
