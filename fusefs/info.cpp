#include "fusefs/info.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/options.h"
#include "core/engine/engine.h"
#include "core/euxfel/run.h"
#include "core/h5lib/h5helper.h"
#include "core/log.h"
#include "vfs/run_view.h"
#include "vfs/sidecar.h"

namespace h5d::fusefs {
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
  try {
    nlohmann::json summary;
    if (!read_mounted_summary(o.path, summary)) {
      o.m.engine.helper.path = find_helper();
      if (o.m.engine.helper.path.empty())
        throw std::runtime_error("h5direct-helper not found beside this program (nor in ../libexec/h5direct)");
      // Warnings (files skipped, data errors) on stderr; the summary alone on stdout.
      log::set_sink([](log::Level l, const std::string& msg) {
        if (l >= log::Level::Warn) std::fprintf(stderr, "h5direct: %s\n", msg.c_str());
      });
      Engine engine(o.m.engine);
      euxfel::RunOptions ro;
      ro.inc_suspect_trains = o.m.vfs.inc_suspect_trains;
      auto run = euxfel::Run::open(engine, o.path, ro);
      summary = vfs::run_summary_json(*run);
    }
    if (o.json) {
      std::fputs(vfs::json_text(summary).c_str(), stdout);
    } else {
      std::fputs(vfs::run_info_text(summary, o.details).c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s info: %s: %s\n", program.c_str(), o.path.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace h5d::fusefs
