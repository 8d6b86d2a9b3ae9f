// One sequence file's train IDs, validity flags, sources and INDEX arrays, as Run::load_files
// takes them.
#include <algorithm>
#include <set>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"

namespace h5d::euxfel {
namespace {

// FileAccess._guess_valid_trains (format 0.5: no INDEX/flag): a monotonic sequence with the
// fewest trains flagged.
std::vector<uint8_t> guess_valid_trains(const std::vector<uint64_t>& t) {
  size_t n = t.size();
  std::vector<uint8_t> flag(n, 1);
  for (size_t ix = 0; ix + 1 < n; ++ix) {
    if (!(t[ix + 1] <= t[ix])) continue;
    size_t before = 0, after = 0;
    for (size_t i = 0; i <= ix; ++i) before += t[i] >= t[ix + 1];
    for (size_t i = ix + 1; i < n; ++i) after += t[i] <= t[ix];
    if (before < after) {
      for (size_t i = 0; i <= ix; ++i)
        if (t[i] >= t[ix + 1]) flag[i] = 0;
    } else {
      for (size_t i = ix + 1; i < n; ++i)
        if (t[i] <= t[ix]) flag[i] = 0;
    }
  }
  return flag;
}

// The file's dataFormatVersion; "0.5" where it has none.
std::string format_version(H5File& f) {
  try {
    auto v = meta::read_strings(f, "/METADATA/dataFormatVersion");
    return v.empty() ? "0.5" : v[0];
  } catch (const Error& e) {
    if (e.code() != ENOENT) throw;
    return "0.5";
  }
}

// m.valid: the validity flag of each of m.train_ids (INDEX/flag, guessed for format 0.5, all
// valid, with a note, where a later format has no flags).
void read_valid(H5File& f, const std::string& name, meta::SequenceMeta& m) {
  std::vector<int64_t> flag;
  if (m.format_version == "0.5") {
    m.valid = guess_valid_trains(m.train_ids);
  } else if (meta::try_read_i64(f, "/INDEX/flag", flag, m.train_ids.size())) {
    m.valid.assign(m.train_ids.size(), 1);
    for (size_t i = 0; i < m.train_ids.size(); ++i) {
      bool v = i < flag.size() ? flag[i] != 0 : true;
      if (m.format_version == "1.1") v = !v;  // 1.1 stored an index: 0 = valid
      m.valid[i] = v;
    }
  } else {
    m.valid.assign(m.train_ids.size(), 1);
    m.notes.push_back(name + ": format " + m.format_version + " without INDEX/flag: all trains taken as valid");
  }
}

// The file's source IDs (METADATA's dataSourceId); Error(EIO) where it has none.
std::vector<std::string> source_ids(H5File& f, const std::string& format_version) {
  std::string src_path = format_version == "0.5" ? "/METADATA/dataSourceId"
                                                   : "/METADATA/dataSources/dataSourceId";
  try {
    return meta::read_strings(f, src_path);
  } catch (const Error& e) {
    if (e.code() != ENOENT) throw;
    fail(EIO, src_path + " not found");
  }
}

// m's control and instrument sources, their groups and the legacy names among them, from the
// file's source IDs.
void read_sources(H5File& f, meta::SequenceMeta& m) {
  std::set<std::string> control, instrument;
  for (const std::string& id : source_ids(f, m.format_version)) {
    if (id.empty()) continue;
    size_t slash = id.find('/');
    std::string category = id.substr(0, slash);
    std::string h5src = slash == std::string::npos ? "" : id.substr(slash + 1);
    if (category == "INSTRUMENT") {
      size_t colon = h5src.find(':');
      std::string device = h5src.substr(0, colon);
      std::string chan_grp = colon == std::string::npos ? "" : h5src.substr(colon + 1);
      size_t gslash = chan_grp.find('/');
      std::string chan = chan_grp.substr(0, gslash);
      std::string source = device + ":" + chan;
      if (gslash != std::string::npos && gslash + 1 < chan_grp.size())
        m.source_groups[source].push_back(chan_grp.substr(gslash + 1));
      if (instrument.insert(source).second) {
        std::string target = meta::soft_link_target(f, "/INSTRUMENT/" + source);
        if (!target.empty()) {
          // "/INSTRUMENT/<canonical>" -> "<canonical>"
          std::string rest = target.substr(1);
          size_t s2 = rest.find('/');
          m.legacy[source] = s2 == std::string::npos ? "" : rest.substr(s2 + 1);
        }
      }
    } else if (category == "CONTROL") {
      if (control.insert(h5src).second) m.source_groups[h5src].push_back("");
    } else if (category == "Karabo_TimerServer") {
      // format 1.1 pseudo-source: ignored as EXtra-data does
    } else {
      fail(EIO, "Unknown data category '" + category + "'");
    }
  }
  m.control_sources.assign(control.begin(), control.end());
  m.instrument_sources.assign(instrument.begin(), instrument.end());
}

// Sorts each source's groups (duplicates dropped) and, with with_index, reads the INDEX arrays
// of every (source, group), while the file is open.
void read_index_arrays(H5File& f, bool with_index, meta::SequenceMeta& m) {
  for (auto& [source, groups] : m.source_groups) {
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    if (!with_index || m.legacy.count(source) || m.train_ids.empty()) continue;  // legacy: via canonical name
    std::string base = "/INDEX/" + source;
    std::vector<meta::IndexArrays> arrays = meta::read_index(f, base, groups, m.train_ids.size());
    for (size_t gi = 0; gi < groups.size(); ++gi)
      m.index[base + (groups[gi].empty() ? "" : "/" + groups[gi])] = std::move(arrays[gi]);
  }
}

// m.metadata_values: the first element of each dataset in METADATA (what cannot be read is
// left out, at debug level).
void read_metadata_values(H5File& f, meta::SequenceMeta& m) {
  if (m.format_version == "0.5") {
    m.metadata_values.emplace_back("dataFormatVersion", Value::string("0.5"));
  } else {
    for (const std::string& n : meta::list_members(f, "/METADATA")) {
      std::string p = "/METADATA/" + n;
      if (!meta::is_dataset(f, p)) continue;
      try {
        m.metadata_values.emplace_back(n, detail::first_element(f.read_value(p, 1000)));
      } catch (const std::exception& e) {
        log::debug("euxfel: " + f.path() + ":" + p + ": " + e.what());
      }
    }
  }
}

}  // namespace

// What Run::load_files takes from one sequence file. In the daemon the whole of it is one HDF5
// helper request (this runs there, in process: LocalMetadata): listing a run costs one round
// trip per file.
meta::SequenceMeta meta::detail::read_sequence_file_parts(H5File& f, bool with_metadata, bool with_index) {
  SequenceMeta m;
  // One libhdf5 call per item: each read is its own existence check.
  const std::string name = f.path().substr(f.path().find_last_of('/') + 1);
  std::vector<uint64_t> tid;
  if (!meta::try_read_u64(f, "/INDEX/trainId", tid))
    fail(EIO, "INDEX/trainId dataset not found");
  m.format_version = format_version(f);
  for (uint64_t t : tid)
    if (t != 0) m.train_ids.push_back(t);
  read_valid(f, name, m);
  read_sources(f, m);
  read_index_arrays(f, with_index, m);
  if (with_metadata) read_metadata_values(f, m);
  return m;
}

}  // namespace h5d::euxfel
