// The text of `h5direct info`: a run's summary as EXtra-data 1.24 prints it (DataCollection.info(),
// extra_data/display.py: what `lsxfel RUN` prints after its first line), and a folder of runs'
// lines as lsxfel prints them (extra_data/cli/lsxfel.py), from run.json (run_summary_json).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "vfs/run_view.h"

namespace h5d::vfs {
namespace {

using nlohmann::json;

// numpy's str() of a dtype (what EXtra-data prints for KeyData.dtype) from its descr: "float32",
// "uint16", "bool", "|S8", ">f4" (byte order not native), "datetime64[ns]"; structured types as
// numpy prints them; "object" for variable-length strings (no descr).
std::string numpy_name(const json& descr);

std::string py_str(const std::string& s) { return "'" + s + "'"; }

// A Python tuple as repr() prints it: (1000,), (2, 3).
std::string py_tuple(const json& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i].get<uint64_t>());
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string struct_name(const json& fields) {
  // numpy's list form, [('a', '<i4'), ('b', '<f8', (3,))]; with padding members (gaps) its dict
  // form, as str() shows such a dtype.
  bool padded = false;
  for (const json& f : fields) padded = padded || f[0].get<std::string>().empty();
  auto member = [](const json& t) { return t.is_string() ? py_str(t.get<std::string>()) : struct_name(t); };
  std::string out;
  if (!padded) {
    for (const json& f : fields) {
      out += (out.empty() ? "(" : ", (") + py_str(f[0].get<std::string>()) + ", " + member(f[1]);
      if (f.size() > 2) out += ", " + py_tuple(f[2]);
      out += ")";
    }
    return "[" + out + "]";
  }
  std::string names, formats;
  for (const json& f : fields) {
    if (f[0].get<std::string>().empty()) continue;
    names += (names.empty() ? "" : ", ") + py_str(f[0].get<std::string>());
    formats += (formats.empty() ? "" : ", ") + member(f[1]);
  }
  return "{'names': [" + names + "], 'formats': [" + formats + "]}";
}

std::string numpy_name(const json& descr) {
  if (descr.is_null()) return "object";
  if (descr.is_array()) return struct_name(descr);
  const std::string d = descr.get<std::string>();
  if (d.size() < 3) return d;
  const char order = d[0], kind = d[1];
  if (order == '>' && kind != 'S' && kind != 'V') return d;  // not native: shown as stored
  if (kind == 'M' || kind == 'm') {
    const size_t unit = d.find('[');
    return std::string(kind == 'M' ? "datetime64" : "timedelta64") + (unit == std::string::npos ? "" : d.substr(unit));
  }
  int bits = 0;
  try {
    bits = std::stoi(d.substr(2)) * 8;
  } catch (const std::exception&) {
    return d;
  }
  switch (kind) {
    case 'f': return "float" + std::to_string(bits);
    case 'i': return "int" + std::to_string(bits);
    case 'u': return "uint" + std::to_string(bits);
    case 'c': return "complex" + std::to_string(bits);
    case 'b': return "bool";
    default: return d;  // |S8, |V16, <U4
  }
}

// Python's format(n / total, '.2%').
std::string percent(uint64_t n, uint64_t total) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", total ? double(n) / double(total) * 100.0 : 0.0);
  return buf;
}

// str(datetime.timedelta(seconds=s)): "1:02:03", "1 day, 0:00:00", "2 days, 1:00:00".
std::string timedelta_text(uint64_t secs) {
  const uint64_t days = secs / 86400, rest = secs % 86400;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", (unsigned long long)(rest / 3600),
                (unsigned long long)(rest / 60 % 60), (unsigned long long)(rest % 60));
  if (days == 0) return buf;
  return std::to_string(days) + (days == 1 ? " day, " : " days, ") + buf;
}

// EXtra-data's DETECTOR_SOURCE_RE, (.+/(?:DET|CORR))/(\d+)CH: det = ".../DET" or ".../CORR".
bool xtdf_module(const std::string& s, std::string& det, std::string& modno) {
  for (size_t p = s.size(); p-- > 0;) {  // (.+) is greedy: the last match
    if (s[p] != '/' || p == 0) continue;
    for (const char* sect : {"/DET/", "/CORR/"}) {
      const size_t n = std::strlen(sect);
      if (s.compare(p, n, sect) != 0) continue;
      size_t e = p + n;
      while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
      if (e == p + n || s.compare(e, 2, "CH") != 0) continue;
      det = s.substr(0, p + n - 1);
      modno = s.substr(p + n, e - p - n);
      return true;
    }
  }
  return false;
}

// ---- Grouping similar source names (display.py's SourceGroup) ----------------------------------

// Text cut at runs of digits and runs of ASCII letters (re.split(r'(\d+|[a-zA-Z]+)', s)):
// separators at even indices (maybe empty), pieces at odd ones.
std::vector<std::string> cut_pieces(const std::string& s) {
  std::vector<std::string> out{""};
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool digit = std::isdigit(c), alpha = (c < 128 && std::isalpha(c));
    if (!digit && !alpha) {
      out.back() += s[i++];
      continue;
    }
    size_t j = i;
    while (j < s.size() && (digit ? std::isdigit(static_cast<unsigned char>(s[j]))
                                  : (static_cast<unsigned char>(s[j]) < 128 && std::isalpha(static_cast<unsigned char>(s[j])))))
      ++j;
    out.push_back(s.substr(i, j - i));
    out.push_back("");
    i = j;
  }
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A source name as grouping sees it: odd indices are the pieces that may differ within a group
// (numbers, and one- or two-letter names standing alone in a component), even indices the text
// that must match exactly (separators, and long names standing alone).
std::vector<std::string> name_pieces(const std::string& name) {
  std::vector<std::string> comps;
  for (size_t pos = 0;;) {
    const size_t slash = name.find('/', pos);
    comps.push_back(name.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos));
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  std::string channel;
  const size_t colon = comps.back().find(':');
  if (colon != std::string::npos) {
    channel = comps.back().substr(colon + 1);
    comps.back().resize(colon);
  }
  std::vector<std::string> out = cut_pieces(comps[0]);
  for (size_t c = 1; c < comps.size(); ++c) {
    std::vector<std::string> p = cut_pieces(comps[c]);
    out.back() += "/" + p[0];
    if (p.size() == 3 && p[2].empty()) {  // the component is one piece
      if (p[1].size() <= 2 || all_digits(p[1])) {
        out.push_back(p[1]);
        out.push_back("");
      } else {
        out.back() += p[1];
      }
    } else {
      out.insert(out.end(), p.begin() + 1, p.end());
    }
  }
  if (!channel.empty()) {
    std::vector<std::string> p = cut_pieces(channel);
    out.back() += ":" + p[0];
    out.insert(out.end(), p.begin() + 1, p.end());
  }
  return out;
}

using Group = std::vector<std::vector<std::string>>;

// Whether `p` joins group `g`: as many pieces, differing from its last member in exactly one
// piece that may vary, and (once the group has more than two members) one where its last and
// first members differ too.
bool joins(const Group& g, const std::vector<std::string>& p) {
  if (p.size() != g[0].size()) return false;
  size_t diffs = 0, at = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (g.back()[i] != p[i]) {
      ++diffs;
      at = i;
    }
  }
  if (diffs != 1 || at % 2 == 0) return false;
  return !(g.size() > 2 && g.back()[at] == g[0][at]);
}

std::string group_text(const Group& g) {
  size_t varies = g[0].size();
  if (g.size() > 1) {
    for (size_t i = 0; i < g[0].size(); ++i) {
      if (g[0][i] != g[1][i]) {
        varies = i;
        break;
      }
    }
  }
  bool numeric = varies < g[0].size();
  for (const auto& m : g) numeric = numeric && all_digits(m[varies]);
  std::string out;
  for (size_t i = 0; i < g[0].size(); ++i) {
    std::set<std::string> vals;
    for (const auto& m : g) vals.insert(m[i]);
    if (vals.size() == 1) {
      out += *vals.begin();
      continue;
    }
    std::vector<std::string> v(vals.begin(), vals.end());
    std::string inner;
    if (numeric && std::all_of(v.begin(), v.end(), all_digits)) {
      // Runs of consecutive numbers as ranges (the strings kept: 01, not 1).
      std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
        return std::stoull(a) < std::stoull(b);
      });
      for (size_t a = 0; a < v.size();) {
        size_t b = a;
        while (b + 1 < v.size() && std::stoull(v[b + 1]) == std::stoull(v[b]) + 1) ++b;
        inner += (inner.empty() ? "" : ", ") + (a == b ? v[a] : v[a] + "-" + v[b]);
        a = b + 1;
      }
    } else {
      for (const std::string& x : v) inner += (inner.empty() ? "" : ", ") + x;
    }
    out += "{" + inner + "}";
  }
  return out;
}

// The "  - ..." lines of sorted source names, similar names grouped (info(group_sources=True)).
void grouped_lines(std::ostringstream& o, const std::set<std::string>& names) {
  std::vector<Group> groups;
  for (const std::string& n : names) {
    std::vector<std::string> p = name_pieces(n);
    if (!groups.empty() && joins(groups.back(), p)) {
      groups.back().push_back(std::move(p));
    } else {
      groups.push_back({std::move(p)});
    }
  }
  for (const Group& g : groups) o << "  - " << group_text(g) << "\n";
}

// "      - key\t[float32, entry shape (1000,)]"
void key_line(std::ostringstream& o, const std::string& name, const json& dtype, const json& entry_shape) {
  o << "      - " << name << "\t[" << numpy_name(dtype);
  if (!entry_shape.empty()) o << ", entry shape " << py_tuple(entry_shape);
  o << "]\n";
}

// "# of trains", "Duration", "First train ID", "Last train ID" and the blank line after them.
void train_lines(std::ostringstream& o, const json& j, uint64_t n) {
  o << "# of trains:    " << n << "\n";
  if (n == 0 || j["first_train"].is_null()) {
    o << "Duration:       0.0\nFirst train ID: -\nLast train ID:  -\n\n";
  } else {
    const uint64_t first = j["first_train"].get<uint64_t>(), last = j["last_train"].get<uint64_t>();
    const uint64_t span = last - first + 1;
    o << "Duration:       " << timedelta_text(span / 10) << "." << span % 10 << "\nFirst train ID: " << first
      << "\nLast train ID:  " << last << "\n\n";
  }
}

// A run's source names sorted by kind, as the info text shows them.
struct SourceKinds {
  std::set<std::string> legacy, xtdf, instrument, control;
  std::map<std::string, std::map<std::string, std::string>> detectors;  // name -> modno -> source
};

// Sorts the sources of a summary into legacy names, XTDF detector modules, other instrument
// sources and control sources.
SourceKinds source_kinds(const json& sources) {
  SourceKinds k;
  for (const auto& [name, s] : sources.items()) {
    if (s.contains("legacy_name_of")) {
      k.legacy.insert(name);
      continue;
    }
    if (s.value("section", "") == "CONTROL") {
      k.control.insert(name);
      continue;
    }
    std::string det, modno;
    if (xtdf_module(name, det, modno)) {
      k.xtdf.insert(name);
      k.detectors[det][modno] = name;
    } else {
      k.instrument.insert(name);
    }
  }
  return k;
}

// Without details: each XTDF detector in a few lines, then the other sources grouped by name.
void summary_lines(std::ostringstream& o, const json& sources, const SourceKinds& kinds, uint64_t n) {
  for (const auto& [det, mods] : kinds.detectors) {
    o << mods.size() << " XTDF detector modules of " << det << "/*\n";
    const auto& [modno, src] = *mods.begin();  // the module number sorted first as text
    const json& s = sources[src];
    const json keys = s.value("keys", json::object());
    if (keys.contains("image.data")) {
      const json& es = keys["image.data"]["entry_shape"];
      std::string dims, module;
      for (size_t i = es.size() >= 2 ? es.size() - 2 : 0; i < es.size(); ++i)
        dims += (dims.empty() ? "" : " x ") + std::to_string(es[i].get<uint64_t>());
      for (char c : modno) module += (module.empty() ? "" : " ") + std::string(1, c);  // ' '.join(modno)
      o << "  e.g. module " << module << " : " << dims << " pixels\n";
    }
    o << "  " << src << "\n";
    const json groups = s.value("index_groups", json::object());
    if (groups.contains("image")) {
      const uint64_t fpt = groups["image"]["max_entries_per_train"].get<uint64_t>();
      o << "  " << fpt << " frames per train, up to " << fpt * n << " frames total\n";
    }
    o << "\n";
  }
  o << kinds.instrument.size() << " instrument sources (excluding XTDF detectors):\n";
  grouped_lines(o, kinds.instrument);
  o << "\n" << kinds.control.size() << " control sources:\n";
  grouped_lines(o, kinds.control);
  o << "\n";
}

// With details: every instrument source (XTDF modules too) with its keys, grouped by index group.
void instrument_detail_lines(std::ostringstream& o, const json& sources, const SourceKinds& kinds, uint64_t n) {
  // info(details_for_sources=['*']): every source on its own line, with its keys.
  std::set<std::string> inst = kinds.instrument;
  inst.insert(kinds.xtdf.begin(), kinds.xtdf.end());
  o << inst.size() << " instrument sources:\n";
  for (const std::string& name : inst) {
    o << "  - " << name << " \n";
    const json& s = sources[name];
    const json keys = s.value("keys", json::object());
    const json groups = s.value("index_groups", json::object());
    std::string group;
    for (const auto& [k, kj] : keys.items()) {  // sorted; grouped by their first component
      const std::string g = k.substr(0, k.find('.'));
      if (g != group) {
        group = g;
        o << "    - " << g << ":\n";
        const json gj = groups.value(g, json::object());
        const uint64_t with = gj.value("trains_with_data", uint64_t{0});
        const uint64_t lo = gj.value("min_entries_per_train", uint64_t{0});
        const uint64_t hi = gj.value("max_entries_per_train", uint64_t{0});
        o << "      data for " << with << " trains (" << percent(with, n) << "), "
          << (lo == hi ? std::to_string(lo) : std::to_string(lo) + "\xe2\x80\x93" + std::to_string(hi)  /* an en dash */)
          << " entries per train\n";
      }
      key_line(o, k, kj["dtype"], kj["entry_shape"]);
    }
  }
}

// With details: every control source with its keys (no .value suffix) and its run keys.
void control_detail_lines(std::ostringstream& o, const json& sources, const std::set<std::string>& control) {
  o << "\n" << control.size() << " control sources:\n";
  for (const std::string& name : control) {
    o << "  - " << name << " \n";
    o << "    - Control keys (1 entry per train):\n";
    const json all = sources[name].value("keys", json::object());
    const std::string v = ".value";
    for (const auto& [k, kj] : all.items()) {  // keys(inc_timestamps=False)
      if (k.size() > v.size() && k.compare(k.size() - v.size(), v.size(), v) == 0)
        key_line(o, k.substr(0, k.size() - v.size()), kj["dtype"], kj["entry_shape"]);
    }
    const json run_only = sources[name].value("run_only_keys", json::object());
    if (!run_only.empty()) {
      o << "    - Additional run keys (1 entry per run):\n";
      for (const auto& [k, kj] : run_only.items()) {
        o << "      - " << k << "\t[" << (kj["dtype"].is_null() ? std::string("string") : numpy_name(kj["dtype"]));
        if (!kj["entry_shape"].empty()) o << ", entry shape " << py_tuple(kj["entry_shape"]);
        o << "]\n";
      }
    }
  }
  o << "\n";
}

// The legacy source names and their targets; detector modules' condensed per detector.
void legacy_lines(std::ostringstream& o, const json& sources, const std::set<std::string>& legacy) {
  // Detector modules' legacy names condensed per detector, as EXtra-data prints them.
  o << legacy.size() << " legacy source names:\n";
  std::map<std::string, std::pair<std::string, size_t>> det_legacy;  // det -> canonical det, count
  for (const std::string& name : legacy) {
    const std::string target = sources[name]["legacy_name_of"].get<std::string>();
    std::string det, modno, cdet, cmod;
    if (xtdf_module(name, det, modno)) {
      auto& e = det_legacy[det];
      if (e.first.empty()) e.first = xtdf_module(target, cdet, cmod) ? cdet : target;
      ++e.second;
      continue;
    }
    o << " - " << name << " -> " << target << "\n";
  }
  for (const auto& [det, e] : det_legacy)
    o << " - " << det << "/* -> " << e.first << "/* (" << e.second << ")\n";
  o << "\n";
}

}  // namespace

std::string run_info_text(const json& j, bool details) {
  std::ostringstream o;
  const uint64_t n = j.value("train_count", uint64_t{0});
  train_lines(o, j, n);
  const json& sources = j["sources"];
  const SourceKinds kinds = source_kinds(sources);
  if (!details) {
    summary_lines(o, sources, kinds, n);
  } else {
    instrument_detail_lines(o, sources, kinds, n);
    control_detail_lines(o, sources, kinds.control);
  }
  if (!kinds.legacy.empty()) legacy_lines(o, sources, kinds.legacy);
  return o.str();
}

namespace {

// A size in binary units, one decimal ("1.9 MiB"; bytes below 1 KiB).
std::string size_text(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t u = 0;
  for (v /= 1024; v >= 1024 && u + 1 < std::size(units); v /= 1024) ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

std::string run_line_text(const json& j, const std::string& name) {
  // lsxfel's summarise_run: sequence files (NAME-S#####.h5), those of a detector aggregator
  // (AGIPD, DSSC, LPD: FilenameInfo.is_detector) and the others.
  static const std::regex seq(R"((.+)-S\d+\.h5)"), agg(R"(([A-Z]+)(\d+).*)");
  uint64_t detector = 0, other = 0, size = 0;
  const json files = j.value("files", json::array());
  for (const json& f : files) {
    const std::string fname = f.value("name", std::string());
    size += f.value("size", uint64_t{0});
    if (!std::regex_match(fname, seq)) continue;
    std::vector<std::string> parts;
    std::stringstream ss(fname.substr(0, fname.size() - 3));
    for (std::string part; std::getline(ss, part, '-');) parts.push_back(part);
    std::smatch m;
    const bool det = parts.size() == 4 && std::regex_match(parts[2], m, agg) &&
                     (m[1] == "AGIPD" || m[1] == "DSSC" || m[1] == "LPD");
    ++(det ? detector : other);
  }
  uint64_t sources = 0;
  const json all = j.value("sources", json::object());
  for (const auto& [n, s] : all.items())
    if (!s.contains("legacy_name_of")) ++sources;
  char head[160];
  std::snprintf(head, sizeof head, " : Run of %4llu trains, with %3llu detector files and %3llu others",
                (unsigned long long)j.value("train_count", uint64_t{0}), (unsigned long long)detector,
                (unsigned long long)other);
  return "  " + name + head + ", " + std::to_string(sources) + " sources, " + size_text(size);
}

}  // namespace h5d::vfs
