// Names: which files and directories are EuXFEL sequence files and runs.
#include "core/euxfel/run.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <regex>

#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"

namespace h5d::euxfel {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

namespace detail {

const std::regex& seq_name_re() {
  static const std::regex re(R"(^([A-Z]+)-R(\d{4})-(\w+)-S(\d{5})\.h5$)");
  return re;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> h5_files_in(const std::string& dir, bool exclude_overviews) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    const int err = errno ? errno : ENOENT;
    fail(err, dir + ": cannot list directory: " + std::strerror(err));
  }
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (!ends_with(n, ".h5")) continue;
    if (lower(n) == "overview.h5") continue;
    if (exclude_overviews && ends_with(n, "-OVERVIEW.h5")) continue;
    names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ~0ull;
  return static_cast<uint64_t>(st.st_size);
}

std::string join(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace detail

using detail::ends_with;
using detail::h5_files_in;
using detail::join;
using detail::seq_name_re;

bool is_sequence_file_name(const std::string& basename) {
  return std::regex_match(basename, seq_name_re());
}

bool is_run_file(H5File& f) {
  return meta::is_group(f, "/INDEX") && meta::is_group(f, "/METADATA");
}

bool looks_like_run_dir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    if (is_sequence_file_name(e->d_name)) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

bool looks_like_run_dir_deep(H5Files& files, const std::string& dir) {
  if (looks_like_run_dir(dir)) return true;
  try {
    for (const std::string& n : h5_files_in(dir, true)) {
      auto f = files.open(join(dir, n));
      return is_run_file(*f) && meta::exists(*f, "/INDEX/trainId");
    }
  } catch (const std::exception&) {
  }
  return false;
}

}  // namespace h5d::euxfel
