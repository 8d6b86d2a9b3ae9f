#include "vfs/files_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/log.h"

namespace h5d::vfs {
namespace {

using nlohmann::json;

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return p;
  return buf;
}

// st_mtime as Python's os.stat gives it (CPython fill_time: sec + nsec * 1e-9 in double), the
// value EXtra-data stored and compares with ==.
double python_mtime(const struct stat& st) {
  volatile double frac = static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;  // no fused multiply-add
  return static_cast<double>(st.st_mtim.tv_sec) + frac;
}

bool string_list(const json& j, std::vector<std::string>& out) {
  if (!j.is_array()) return false;
  for (const json& x : j) {
    if (!x.is_string()) return false;
    out.push_back(x.get<std::string>());
  }
  return true;
}

bool uint_list(const json& j, std::vector<uint64_t>& out) {
  if (!j.is_array()) return false;
  out.reserve(j.size());
  for (const json& x : j) {
    if (!x.is_number_unsigned()) return false;
    out.push_back(x.get<uint64_t>());
  }
  return true;
}

// One entry checked and converted; false (with why) when it is left out.
bool entry(const std::string& dir, const json& e, std::string& name, euxfel::KnownFile& k, std::string& why) {
  if (!e.is_object()) return why = "not an object", false;
  auto f = e.find("filename");
  if (f == e.end() || !f->is_string()) return why = "no filename", false;
  name = f->get<std::string>();
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return why = "not a file name", false;
  // RunFilesMap.expected_cache_keys: entries of older EXtra-data versions lack some and are
  // not used (EXtra-data reads those files again).
  for (const char* key : {"mtime", "size", "train_ids", "control_sources", "instrument_sources",
                          "suspect_train_indices", "legacy_sources"})
    if (!e.contains(key)) return why = std::string("no ") + key, false;
  const json& mtime = e["mtime"];
  const json& size = e["size"];
  if (!mtime.is_number() || !size.is_number_unsigned()) return why = "mtime or size not a number", false;
  struct stat st;
  if (::stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return why = "no such file", false;
  if (size.get<uint64_t>() != static_cast<uint64_t>(st.st_size)) return why = "size differs from the file's", false;
  // Python compares float == float, or int == float exactly.
  const double now = python_mtime(st);
  const bool same = mtime.is_number_float() ? mtime.get<double>() == now
                    : mtime.is_number_unsigned() ? static_cast<double>(mtime.get<uint64_t>()) == now
                                                 : false;
  if (!same) return why = "mtime differs from the file's", false;
  std::vector<uint64_t> suspect;
  if (!uint_list(e["train_ids"], k.train_ids)) return why = "train_ids not a list of train IDs", false;
  if (!uint_list(e["suspect_train_indices"], suspect)) return why = "suspect_train_indices not a list of indices", false;
  if (!string_list(e["control_sources"], k.control_sources) ||
      !string_list(e["instrument_sources"], k.instrument_sources))
    return why = "sources not a list of names", false;
  const json& legacy = e["legacy_sources"];
  if (!legacy.is_object()) return why = "legacy_sources not an object", false;
  for (const auto& [from, to] : legacy.items()) {
    if (!to.is_string()) return why = "legacy_sources not names", false;
    k.legacy[from] = to.get<std::string>();
  }
  k.valid.assign(k.train_ids.size(), 1);
  for (uint64_t i : suspect) {
    if (i >= k.valid.size()) return why = "a suspect train index beyond the train IDs", false;
    k.valid[i] = 0;
  }
  // Sorted and unique, as Run takes a file's sources (EXtra-data keeps them in sets).
  for (auto* v : {&k.control_sources, &k.instrument_sources}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
    v->erase(std::remove(v->begin(), v->end(), std::string()), v->end());
  }
  return true;
}

}  // namespace

std::vector<std::string> files_map_candidates(const std::string& dir) {
  std::vector<std::string> out{dir + "/karabo_data_map.json"};
  const std::string real = real_path(dir);
  std::smatch m;
  static const std::regex online(R"(^(.+/p\d+)/(raw|proc)/(r\d+)/?$)");
  static const std::regex maxwell(R"(^.+/(raw|proc|red|open)/(\w+)/(\w+)/(p\d+)/(r\d+)/?$)");
  if (std::regex_match(real, m, online))
    out.push_back(m[1].str() + "/scratch/.karabo_data_maps/" + m[2].str() + "_" + m[3].str() + ".json");
  if (std::regex_match(real, m, maxwell)) {
    const std::string scratch = "/gpfs/exfel/exp/" + m[2].str() + "/" + m[3].str() + "/" + m[4].str() + "/scratch";
    const std::string p = scratch + "/.karabo_data_maps/" + m[1].str() + "_" + m[5].str() + ".json";
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

euxfel::KnownFiles parse_files_map(const std::string& dir, const std::string& text, std::string* why,
                                   size_t* left_out) {
  euxfel::KnownFiles out;
  if (why) why->clear();
  if (left_out) *left_out = 0;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (why) *why = "not JSON";
    return out;
  }
  if (!j.is_array()) {
    if (why) *why = "not a JSON list";
    return out;
  }
  for (const json& e : j) {
    std::string name, bad;
    euxfel::KnownFile k;
    if (!entry(dir, e, name, k, bad)) {
      if (left_out) ++*left_out;
      if (log::debug_enabled()) log::debug("files map of " + dir + ": entry " + (name.empty() ? "?" : name) + " not used: " + bad);
      continue;
    }
    out[name] = std::move(k);  // a later entry for the same file wins, as in RunFilesMap.load
  }
  return out;
}

std::shared_ptr<const euxfel::KnownFiles> read_files_map(const std::string& dir, std::string* used) {
  try {
    // RunFilesMap.load: the newest of the maps found (greatest mtime) first; one that cannot be
    // read or parsed gives way to the next.
    std::vector<std::pair<double, std::string>> found;
    for (const std::string& p : files_map_candidates(dir)) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) found.emplace_back(python_mtime(st), p);
    }
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [mt, p] : found) {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st;
      std::string text;
      bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
      if (ok && static_cast<uint64_t>(st.st_size) > kMaxFilesMapBytes) {
        log::warn("files map " + p + " ignored: " + std::to_string(st.st_size) + " bytes, more than " +
                  std::to_string(kMaxFilesMapBytes));
        ok = false;
      }
      if (ok) {
        char buf[1 << 16];
        for (;;) {
          const ssize_t n = ::read(fd, buf, sizeof buf);
          if (n < 0) {
            ok = false;
            break;
          }
          if (n == 0) break;
          text.append(buf, static_cast<size_t>(n));
          if (text.size() > kMaxFilesMapBytes) {
            ok = false;
            log::warn("files map " + p + " ignored: larger than " + std::to_string(kMaxFilesMapBytes) + " bytes");
            break;
          }
        }
      }
      ::close(fd);
      if (!ok) continue;
      std::string why;
      size_t left_out = 0;
      euxfel::KnownFiles k = parse_files_map(dir, text, &why, &left_out);
      if (!why.empty()) {
        log::warn("files map " + p + " ignored: " + why);
        continue;
      }
      log::info("files map " + p + ": " + std::to_string(k.size()) + " entries match their files" +
                (left_out ? ", " + std::to_string(left_out) + " do not (those files are read)" : std::string()));
      if (used) *used = p;
      if (k.empty()) return nullptr;
      return std::make_shared<const euxfel::KnownFiles>(std::move(k));
    }
  } catch (const std::exception& e) {
    log::warn("files map of " + dir + " ignored: " + e.what());
  }
  return nullptr;
}

}  // namespace h5d::vfs
