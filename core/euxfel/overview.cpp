// Overview files: EXtra-data's virtual overview of a run, used only while it still matches the
// run's files (version, names and sizes in .source_files).
#include "core/euxfel/run.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <regex>

#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"

namespace h5d::euxfel {

using detail::ends_with;
using detail::file_size;
using detail::first_element;
using detail::h5_files_in;
using detail::join;

std::string find_valid_overview(H5Files& files, const std::string& dir, std::string* why_not) {
  std::vector<std::string> candidates{join(dir, "overview.h5")};
  // voview_paths_for_run: <prop>/(raw|proc)/r####  ->  <prop>/usr/.extra_data/RAW-R####-OVERVIEW.h5
  char* real = realpath(dir.c_str(), nullptr);
  std::string rdir = real ? real : dir;
  free(real);
  static const std::regex run_re(R"(^(.+)/(raw|proc)/(r\d+)/?$)");
  std::smatch m;
  if (std::regex_match(rdir, m, run_re)) {
    std::string kind = m[2].str(), run = m[3].str();
    for (char& c : kind) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (char& c : run) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    candidates.push_back(m[1].str() + "/usr/.extra_data/" + kind + "-" + run + "-OVERVIEW.h5");
  }
  // Our extension: an overview file kept inside the run directory under its usual name.
  try {
    DIR* d = opendir(dir.c_str());
    if (d) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (ends_with(n, "-OVERVIEW.h5")) candidates.push_back(join(dir, n));
      }
      closedir(d);
    }
  } catch (...) {
  }
  std::string reasons;
  for (const std::string& c : candidates) {
    struct stat st;
    if (stat(c.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    try {
      auto f = files.open(c);
      int64_t version = 0;
      for (const auto& [name, v] : f->attributes("/")) {
        if (name != "virtual_overview_version") continue;
        Value x = first_element(v);
        version = x.kind == Value::Kind::Int ? x.i : x.kind == Value::Kind::UInt ? int64_t(x.u) : 0;
      }
      if (version > 1) {
        reasons += c + ": virtual_overview_version " + std::to_string(version) + " > 1; ";
        continue;
      }
      std::vector<std::string> names = meta::read_strings(*f, "/.source_files/names");
      std::vector<uint64_t> sizes = meta::read_u64(*f, "/.source_files/sizes");
      if (names.size() != sizes.size()) {
        reasons += c + ": .source_files names and sizes differ in length; ";
        continue;
      }
      std::vector<std::string> now = h5_files_in(dir, false);
      // EXtra-data stores base names (older versions stored absolute paths: compare base names).
      std::vector<std::string> stored;
      for (const std::string& n : names) stored.push_back(n.substr(n.find_last_of('/') + 1));
      std::vector<std::string> stored_sorted = stored;
      std::sort(stored_sorted.begin(), stored_sorted.end());
      std::vector<std::string> now_data;
      for (const std::string& n : now)
        if (join(dir, n) != c) now_data.push_back(n);
      if (stored_sorted != now_data) {
        reasons += c + ": the run's files differ from .source_files; ";
        continue;
      }
      bool ok = true;
      for (size_t i = 0; i < stored.size() && ok; ++i)
        if (file_size(join(dir, stored[i])) != sizes[i]) ok = false;
      if (!ok) {
        reasons += c + ": a file's size differs from .source_files; ";
        continue;
      }
      return c;
    } catch (const std::exception& e) {
      reasons += c + ": " + e.what() + "; ";
    }
  }
  if (why_not) *why_not = reasons;
  return "";
}

}  // namespace h5d::euxfel
