#include "core/euxfel/run.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <regex>
#include <set>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/live.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "core/log.h"

namespace h5d::euxfel {
namespace {

const std::regex& seq_name_re() {
  // FileAccess.euxfel_filename_pattern: ([A-Z]+)-R\d{4}-(\w+)-S(\d{5}).h5
  static const std::regex re(R"(^([A-Z]+)-R(\d{4})-(\w+)-S(\d{5})\.h5$)");
  return re;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// .h5 files of a run directory as EXtra-data's RunDirectory lists them (overview.h5 excluded,
// case-insensitively), sorted by name. Our own extension: *-OVERVIEW.h5 is not a data file.
std::vector<std::string> h5_files_in(const std::string& dir, bool exclude_overviews) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) fail(errno ? errno : ENOENT, dir + ": cannot list directory");
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

DType u64_dtype() {
  DType t;
  t.typestr = "<u8";
  t.itemsize = 8;
  return t;
}

ArrayPtr u64_array(const std::vector<uint64_t>& v, const std::string& what) {
  std::vector<uint8_t> bytes(v.size() * 8);
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian host
  return std::make_shared<MemoryArray>(Shape{v.size()}, u64_dtype(), std::move(bytes), what);
}

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

std::string first_string(const Value& v) {
  if (v.kind == Value::Kind::String) return v.s;
  if (v.kind == Value::Kind::List && !v.items.empty()) return first_string(v.items[0]);
  return "";
}

Value first_element(const Value& v) {
  if (v.kind == Value::Kind::List && !v.items.empty()) return v.items[0];
  return v;
}

}  // namespace

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

bool looks_like_run_dir_deep(Engine& engine, const std::string& dir) {
  if (looks_like_run_dir(dir)) return true;
  try {
    for (const std::string& n : h5_files_in(dir, true)) {
      auto f = engine.open_file(join(dir, n));
      return is_run_file(*f) && meta::exists(*f, "/INDEX/trainId");
    }
  } catch (const std::exception&) {
  }
  return false;
}

std::string find_valid_overview(Engine& engine, const std::string& dir, std::string* why_not) {
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
      auto f = engine.open_file(c);
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

// ---------------------------------------------------------------------------------------------

Run::Run(Engine& engine, std::string dir, RunOptions opts)
    : engine_(engine), dir_(std::move(dir)), opts_(opts) {}

std::shared_ptr<Run> Run::open(Engine& engine, const std::string& dir, RunOptions opts) {
  std::shared_ptr<Run> run(new Run(engine, dir, opts));
  std::vector<std::string> paths;
  if (opts.use_overview) {
    std::string why;
    run->overview_ = find_valid_overview(engine, dir, &why);
    if (run->overview_.empty() && !why.empty())
      log::info("euxfel: " + dir + ": overview file not used: " + why);
  }
  if (!run->overview_.empty()) {
    paths.push_back(run->overview_);
  } else {
    for (const std::string& n : h5_files_in(dir, true)) paths.push_back(join(dir, n));
    run->leave_out_files_being_written(paths);
  }
  // libhdf5 reads each file's metadata under the HDF5 lock, one file at a time: ask the kernel
  // to read the start of every file ahead now (in parallel, without waiting), so that a cold
  // cache does not make the opens below wait for the disk one by one.
  for (const std::string& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::posix_fadvise(fd, 0, 1 << 20, POSIX_FADV_WILLNEED);
    ::close(fd);
  }
  run->load_files(paths);
  if (run->files_.empty()) fail(ENOENT, dir + ": no readable EuXFEL data files");
  run->build_sources();
  return run;
}

// A file a libhdf5 writer has open (latest format: superblock flags) is left out with one log
// line and an entry in errors(): libhdf5 would refuse it, and its metadata may be incomplete.
void Run::leave_out_files_being_written(std::vector<std::string>& paths) {
  std::vector<std::string> kept;
  for (std::string& p : paths) {
    if (!open_for_writing(p)) {
      kept.push_back(std::move(p));
      continue;
    }
    note_left_out_while_written(p);  // logged once, not at every listing of the run
    std::lock_guard<std::mutex> lk(mu_);
    errors_.push_back("left out " + p.substr(p.find_last_of('/') + 1) +
               ": being written (libhdf5 has it open for writing); it joins the run once closed");
  }
  paths = std::move(kept);
}

constexpr size_t kProgressFiles = 100;

// What Run::load_files takes from one sequence file. In the daemon the whole of it is one HDF5
// helper request (it runs there, in process): listing a run costs one round trip per file.
meta::SequenceMeta meta::read_sequence_file(H5File& f, bool with_metadata) {
  if (HelperPool* hp = f.engine().helpers()) {
    auto m = helper::call<SequenceMeta>(*hp, proto::Op::MetaSequenceFile, f.path(), "/", with_metadata);
    if (m.valid.size() != m.train_ids.size())
      fail(EIO, f.path() + ": sequence file metadata from the HDF5 helper: " + std::to_string(m.valid.size()) +
                    " validity flags for " + std::to_string(m.train_ids.size()) + " trains");
    return m;
  }
  SequenceMeta m;
  // One libhdf5 call per item: each read is its own existence check.
  const std::string name = f.path().substr(f.path().find_last_of('/') + 1);
  std::vector<uint64_t> tid;
  if (!meta::try_read_u64(f, "/INDEX/trainId", tid))
    fail(EIO, "INDEX/trainId dataset not found");
  try {
    auto v = meta::read_strings(f, "/METADATA/dataFormatVersion");
    m.format_version = v.empty() ? "0.5" : v[0];
  } catch (const Error& e) {
    if (e.code() != ENOENT) throw;
    m.format_version = "0.5";
  }
  for (uint64_t t : tid)
    if (t != 0) m.train_ids.push_back(t);
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
  std::string src_path = m.format_version == "0.5" ? "/METADATA/dataSourceId"
                                                     : "/METADATA/dataSources/dataSourceId";
  std::vector<std::string> source_ids;
  try {
    source_ids = meta::read_strings(f, src_path);
  } catch (const Error& e) {
    if (e.code() != ENOENT) throw;
    fail(EIO, src_path + " not found");
  }
  std::set<std::string> control, instrument;
  for (const std::string& id : source_ids) {
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
  // The INDEX arrays of every (source, group), while the file is open: listing a source
  // later needs no sequence file opened again.
  for (auto& [source, groups] : m.source_groups) {
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    if (m.legacy.count(source) || m.train_ids.empty()) continue;  // read via canonical name
    std::string base = "/INDEX/" + source;
    std::vector<meta::IndexArrays> arrays = meta::read_index(f, base, groups, m.train_ids.size());
    for (size_t gi = 0; gi < groups.size(); ++gi)
      m.index[base + (groups[gi].empty() ? "" : "/" + groups[gi])] = std::move(arrays[gi]);
  }
  if (with_metadata) {
    if (m.format_version == "0.5") {
      m.metadata_values.emplace_back("dataFormatVersion", Value::string("0.5"));
    } else {
      for (const std::string& n : meta::list_members(f, "/METADATA")) {
        std::string p = "/METADATA/" + n;
        if (!meta::is_dataset(f, p)) continue;
        try {
          m.metadata_values.emplace_back(n, first_element(f.read_value(p, 1000)));
        } catch (const std::exception& e) {
          log::debug("euxfel: " + f.path() + ":" + p + ": " + e.what());
        }
      }
    }
  }
  return m;
}

void Run::load_files(const std::vector<std::string>& paths) {
  // A long scan says how far it got (at info level): every 100 files, or every 2 s.
  const bool long_scan = paths.size() >= kProgressFiles;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  const std::string total = std::to_string(paths.size());
  if (long_scan) log::info("euxfel: " + dir_ + ": opening " + total + " files");
  size_t opened = 0;
  for (const std::string& path : paths) {
    const auto now = std::chrono::steady_clock::now();
    if (long_scan && opened > 0 && (opened % kProgressFiles == 0 || now - last >= std::chrono::seconds(2))) {
      log::info("euxfel: " + dir_ + ": opened " + std::to_string(opened) + " of " + total + " files");
      last = now;
    }
    ++opened;
    SequenceFile sf;
    sf.path = path;
    sf.name = path.substr(path.find_last_of('/') + 1);
    sf.size = file_size(path);
    try {
      auto f = engine_.open_file(path);
      meta::SequenceMeta m = meta::read_sequence_file(*f, files_.empty());
      sf.format_version = std::move(m.format_version);
      sf.train_ids = std::move(m.train_ids);
      sf.valid = std::move(m.valid);
      sf.control_sources = std::move(m.control_sources);
      sf.instrument_sources = std::move(m.instrument_sources);
      sf.legacy = std::move(m.legacy);
      sf.source_groups = std::move(m.source_groups);
      for (auto& [index_path, arrays] : m.index) {
        auto fi = std::make_shared<FileIndex>();
        fi->firsts = std::move(arrays.firsts);
        fi->counts = std::move(arrays.counts);
        fi->error = std::move(arrays.error);
        sf.index[index_path] = std::move(fi);
      }
      for (const std::string& n : m.notes) note_error(n);
      if (files_.empty()) {
        // Run metadata from the first file (DataCollection.run_metadata uses files[0]).
        format_version_ = sf.format_version;
        metadata_values_ = std::move(m.metadata_values);
      }
    } catch (const std::exception& e) {
      // DataCollection.from_paths: "Skipping file ..." and goes on with the others.
      note_error("skipping " + sf.name + ": " + e.what());
      continue;
    }
    files_.push_back(std::move(sf));
  }
  if (long_scan) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log::info("euxfel: " + dir_ + ": opened all " + total + " files in " + std::to_string(secs).substr(0, 5) + " s");
  }
}

void Run::build_sources() {
  std::set<uint64_t> tids;
  for (size_t i = 0; i < files_.size(); ++i) {
    const SequenceFile& f = files_[i];
    for (size_t t = 0; t < f.train_ids.size(); ++t)
      if (opts_.inc_suspect_trains || f.valid[t]) tids.insert(f.train_ids[t]);
    auto add = [&](const std::string& name, Section sec) {
      Source& s = sources_[name];
      if (s.files_.empty()) {
        s.name_ = name;
        s.section_ = sec;
      } else if (s.section_ != sec) {
        note_error(name + " is a CONTROL source in one file and INSTRUMENT in another (" + f.name +
                   ")");
        return;
      }
      s.files_.push_back(i);
      auto it = f.legacy.find(name);
      if (it != f.legacy.end()) s.alias_of_ = it->second;
    };
    for (const std::string& s : f.control_sources) add(s, Section::Control);
    for (const std::string& s : f.instrument_sources) add(s, Section::Instrument);
  }
  train_ids_.assign(tids.begin(), tids.end());
  train_ids_array_ = u64_array(train_ids_, dir_ + ": run train IDs");

  // DataCollection._check_source_conflicts: the same train twice for one source.
  for (auto& [name, s] : sources_) {
    std::vector<uint64_t> all;
    for (size_t fi : s.files_) {
      const SequenceFile& f = files_[fi];
      for (size_t t = 0; t < f.train_ids.size(); ++t)
        if (opts_.inc_suspect_trains || f.valid[t]) all.push_back(f.train_ids[t]);
    }
    std::sort(all.begin(), all.end());
    for (size_t i = 1; i < all.size(); ++i)
      if (all[i] == all[i - 1] && (s.duplicates_.empty() || s.duplicates_.back() != all[i]))
        s.duplicates_.push_back(all[i]);
    if (!s.duplicates_.empty()) {
      std::string list;
      for (size_t i = 0; i < s.duplicates_.size() && i < 10; ++i)
        list += (i ? ", " : "") + std::to_string(s.duplicates_[i]);
      if (s.duplicates_.size() > 10) list += ", ...";
      note_error(name + ": conflicting data: " + std::to_string(s.duplicates_.size()) +
                 " train ID(s) occur more than once across its files (" + list +
                 "); EXtra-data refuses such a run; rows are shown as stored, in file order");
    }
  }

  // Proposal and run number: file names, METADATA, then the path.
  std::smatch m;
  for (const SequenceFile& f : files_) {
    if (std::regex_match(f.name, m, seq_name_re())) {
      run_number_ = std::stoll(m[2].str());
      break;
    }
  }
  for (const auto& [k, v] : metadata_values_) {
    Value x = first_element(v);
    int64_t n = x.kind == Value::Kind::Int ? x.i : x.kind == Value::Kind::UInt ? int64_t(x.u) : -1;
    if (k == "proposalNumber" && n >= 0) proposal_ = n;
    if (k == "runNumber" && n >= 0 && run_number_ < 0) run_number_ = n;
  }
  if (proposal_ < 0) {
    static const std::regex prop_re(R"((^|/)p(\d{6})(/|$))");
    if (std::regex_search(dir_, m, prop_re)) proposal_ = std::stoll(m[2].str());
  }
  if (run_number_ < 0) {
    static const std::regex run_re(R"((^|/)r(\d{4})/?$)");
    if (std::regex_search(dir_, m, run_re)) run_number_ = std::stoll(m[2].str());
  }
}

void Run::note_error(const std::string& msg) {
  log::warn("euxfel: " + dir_ + ": " + msg);
  std::lock_guard<std::mutex> lk(mu_);
  errors_.push_back(msg);
}

std::vector<std::string> Run::errors() const {
  std::lock_guard<std::mutex> lk(mu_);
  return errors_;
}

std::vector<std::string> Run::source_names() const {
  std::vector<std::string> out;
  for (const auto& [n, s] : sources_) out.push_back(n);
  return out;
}

const Source& Run::source(const std::string& name) const {
  auto it = sources_.find(name);
  if (it == sources_.end()) fail(ENOENT, dir_ + ": no source " + name);
  return it->second;
}

Source& Run::source_mut(const std::string& name) {
  auto it = sources_.find(name);
  if (it == sources_.end()) fail(ENOENT, dir_ + ": no source " + name);
  return it->second;
}

void Run::load_keys_locked(Source& s) {
  if (s.keys_loaded_) return;
  s.keys_loaded_ = true;
  // SourceData.keys(): "Only one file is used to find the keys" (the first of the source).
  const SequenceFile& sf = files_[s.files_.front()];
  std::string section = s.is_control() ? "CONTROL" : "INSTRUMENT";
  std::string data_name = s.alias_of_.empty() ? s.name_ : s.alias_of_;
  std::string base = "/" + section + "/" + data_name;
  try {
    auto f = engine_.open_file(sf.path);
    for (const std::string& rel : meta::list_datasets(*f, base)) {
      KeyInfo k;
      k.name = rel;
      std::replace(k.name.begin(), k.name.end(), '/', '.');
      k.dset_path = base + "/" + rel;
      k.group = s.is_control() ? "" : k.name.substr(0, k.name.find('.'));
      auto info = f->dataset_details(k.dset_path);  // with attributes and small value
      k.is_array = info->is_array;
      k.why_not_array = info->why_not_array;
      k.hdf5_type = info->hdf5_type;
      k.dtype = info->dtype;
      if (!info->shape.empty()) k.entry_shape.assign(info->shape.begin() + 1, info->shape.end());
      k.attrs = info->attrs;
      if (s.is_control() && ends_with(k.name, ".value")) {
        // KeyData._find_attributes: CONTROL attributes live on the parent group (and win).
        std::string parent = k.dset_path.substr(0, k.dset_path.find_last_of('/'));
        for (auto& attr : f->attributes(parent)) {
          const std::string& an = attr.first;
          auto it = std::find_if(k.attrs.begin(), k.attrs.end(),
                                 [&](const auto& p) { return p.first == an; });
          if (it != k.attrs.end()) it->second = attr.second;
          else k.attrs.emplace_back(an, attr.second);
        }
      }
      if (!k.is_array) k.small_value = info->small_value;
      s.keys_.push_back(std::move(k));
    }
  } catch (const std::exception& e) {
    s.keys_error_ = e.what();
    errors_.push_back(s.name_ + ": cannot list keys: " + e.what());
    log::warn("euxfel: " + dir_ + ": " + s.name_ + ": cannot list keys: " + e.what());
  }
  std::sort(s.keys_.begin(), s.keys_.end(),
            [](const KeyInfo& a, const KeyInfo& b) { return a.name < b.name; });
}

std::shared_ptr<const GroupIndex> Run::group_index_locked(Source& s, const std::string& group) {
  auto it = s.groups_.find(group);
  if (it != s.groups_.end()) return it->second;
  auto gi = std::make_shared<GroupIndex>();
  std::string idx = "/INDEX/" + (s.alias_of_.empty() ? s.name_ : s.alias_of_) +
                    (group.empty() ? "" : "/" + group);
  for (size_t fi : s.files_) {
    const SequenceFile& sf = files_[fi];
    size_t n = sf.train_ids.size();
    if (n == 0) continue;  // KeyData._find_chunks skips files without trains
    std::shared_ptr<const FileIndex> fidx;
    auto pre = sf.index.find(idx);
    if (pre != sf.index.end()) {
      fidx = pre->second;
    } else {
      auto rd = std::make_shared<FileIndex>();
      try {
        meta::IndexArrays a =
            meta::read_index(*engine_.open_file(sf.path), idx, {""}, n).front();
        rd->firsts = std::move(a.firsts);
        rd->counts = std::move(a.counts);
        rd->error = std::move(a.error);
      } catch (const std::exception& e) {
        rd->error = e.what();
      }
      fidx = std::move(rd);
    }
    if (!fidx->error.empty()) {
      std::string msg = s.name_ + " " + (group.empty() ? "" : group + " ") + "in " + sf.name +
                        ": cannot read INDEX: " + fidx->error + " (file left out)";
      gi->errors.push_back(msg);
      errors_.push_back(msg);
      log::warn("euxfel: " + dir_ + ": " + msg);
      continue;
    }
    const std::vector<uint64_t>& firsts = fidx->firsts;
    const std::vector<uint64_t>& counts = fidx->counts;
    size_t m = std::min({n, firsts.size(), counts.size()});
    if (m < n) {
      std::string msg = s.name_ + " " + group + " in " + sf.name + ": INDEX has " +
                        std::to_string(m) + " entries for " + std::to_string(n) +
                        " trains (trains without entries left out)";
      gi->errors.push_back(msg);
      errors_.push_back(msg);
    }
    // KeyData._find_chunks: contiguous runs of included trains; each block reads rows
    // [first of its first train, + sum of its counts).
    size_t i = 0;
    while (i < m) {
      bool inc = opts_.inc_suspect_trains || sf.valid[i];
      if (!inc) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < m && (opts_.inc_suspect_trains || sf.valid[j])) ++j;
      Block b;
      b.file = fi;
      b.first = firsts[i];
      b.train0 = sf.train_ids[i];
      b.train_ids.assign(sf.train_ids.data() + i, sf.train_ids.data() + j);
      b.counts.assign(counts.data() + i, counts.data() + j);
      for (uint64_t c : b.counts) b.rows += c;
      gi->blocks.push_back(std::move(b));
      i = j;
    }
  }
  // sorted(..., key=lambda c: c.train_ids[0]) is stable; ties keep file (name) order.
  std::stable_sort(gi->blocks.begin(), gi->blocks.end(),
                   [](const Block& a, const Block& b) { return a.train0 < b.train0; });
  std::vector<uint64_t> row_tids;
  gi->counts_per_run_train.assign(train_ids_.size(), 0);
  for (const Block& b : gi->blocks) {
    gi->rows += b.rows;
    for (size_t k = 0; k < b.train_ids.size(); ++k) {
      row_tids.insert(row_tids.end(), b.counts[k], b.train_ids[k]);
      auto pos = std::lower_bound(train_ids_.begin(), train_ids_.end(), b.train_ids[k]);
      if (pos != train_ids_.end() && *pos == b.train_ids[k])
        gi->counts_per_run_train[static_cast<size_t>(pos - train_ids_.begin())] += b.counts[k];
    }
  }
  gi->row_train_ids = u64_array(row_tids, dir_ + ": " + s.name_ + " " + group + " train IDs");
  s.groups_[group] = gi;
  return gi;
}

std::vector<KeyInfo> Run::keys(const std::string& source) {
  std::lock_guard<std::mutex> lk(mu_);
  Source& s = source_mut(source);
  load_keys_locked(s);
  std::vector<KeyInfo> out = s.keys_;
  for (KeyInfo& k : out) k.rows = group_index_locked(s, k.group)->rows;
  return out;
}

KeyInfo Run::key(const std::string& source, const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  Source& s = source_mut(source);
  load_keys_locked(s);
  auto it = std::lower_bound(s.keys_.begin(), s.keys_.end(), key,
                             [](const KeyInfo& a, const std::string& k) { return a.name < k; });
  if (it == s.keys_.end() || it->name != key) fail(ENOENT, dir_ + ": " + source + " has no key " + key);
  KeyInfo out = *it;
  out.rows = group_index_locked(s, out.group)->rows;
  return out;
}

std::vector<std::string> Run::index_groups(const std::string& source) {
  std::lock_guard<std::mutex> lk(mu_);
  Source& s = source_mut(source);
  if (s.is_control()) return {""};
  load_keys_locked(s);
  std::set<std::string> g;
  for (const KeyInfo& k : s.keys_) g.insert(k.group);
  return {g.begin(), g.end()};
}

std::shared_ptr<const GroupIndex> Run::group_index(const std::string& source,
                                                   const std::string& group) {
  std::lock_guard<std::mutex> lk(mu_);
  return group_index_locked(source_mut(source), group);
}

ArrayPtr Run::key_array(const std::string& source, const std::string& key) {
  KeyInfo k = this->key(source, key);
  if (!k.is_array)
    fail(EINVAL, source + " " + key + " is not an array: " + k.why_not_array);
  std::lock_guard<std::mutex> lk(mu_);
  Source& s = source_mut(source);
  auto it = s.arrays_.find(key);
  if (it != s.arrays_.end()) return it->second;
  auto gi = group_index_locked(s, k.group);
  // A key over the run: the concatenation of its blocks, contiguous blocks of one file as one
  // part; each file is opened when a read first touches it.
  std::vector<ConcatArray::Part> parts;
  for (const Block& b : gi->blocks) {
    if (b.rows == 0) continue;
    const std::string& path = files_[b.file].path;
    if (!parts.empty() && parts.back().what == path && parts.back().begin + parts.back().rows == b.first) {
      parts.back().rows += b.rows;
      continue;
    }
    Engine& engine = engine_;
    const std::string dset = k.dset_path;
    parts.push_back({[&engine, path, dset] { return engine.open_file(path)->dataset_array(dset); },
                     b.first, b.rows, path});
  }
  auto a = std::make_shared<ConcatArray>(std::move(parts), k.entry_shape, k.dtype,
                                         dir_ + ": " + source + " " + key);
  s.arrays_[key] = a;
  return a;
}

ArrayPtr Run::key_train_ids(const std::string& source, const std::string& key) {
  KeyInfo k = this->key(source, key);
  return group_index(source, k.group)->row_train_ids;
}

namespace {

uint64_t value_bytes(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return v.s.size() + 4;  // quotes, comma, space
    case Value::Kind::List: {
      uint64_t n = 2;
      for (const Value& x : v.items) n += value_bytes(x);
      return n;
    }
    default: return 8;
  }
}

// Elements one file's dataset may have for its values to be read (a per-train string key has a
// few thousand rows per sequence file; beyond this the key is not one libhdf5 call's worth).
constexpr uint64_t kMaxValueElementsPerFile = 1u << 22;

}  // namespace

ArrayPtr Run::train_timestamps_array() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (timestamps_) return timestamps_;
  }
  constexpr int64_t kNaT = INT64_MIN;  // numpy's NaT
  std::vector<int64_t> ts(train_ids_.size(), kNaT);
  std::vector<uint8_t> done(train_ids_.size(), 0);  // taken from a file (maybe as NaT)
  size_t missing = ts.size();
  for (const SequenceFile& sf : files_) {
    if (missing == 0) break;
    std::vector<size_t> where;  // run train index per file train, SIZE_MAX when not needed
    bool wanted = false;
    for (size_t i = 0; i < sf.train_ids.size(); ++i) {
      auto it = std::lower_bound(train_ids_.begin(), train_ids_.end(), sf.train_ids[i]);
      const bool use = it != train_ids_.end() && *it == sf.train_ids[i] &&
                       !done[static_cast<size_t>(it - train_ids_.begin())] &&
                       (opts_.inc_suspect_trains || sf.valid[i]);
      where.push_back(use ? static_cast<size_t>(it - train_ids_.begin()) : SIZE_MAX);
      wanted = wanted || use;
    }
    if (!wanted) continue;
    std::vector<uint64_t> file_ts;
    try {
      if (!meta::try_read_u64(*engine_.open_file(sf.path), "/INDEX/timestamp", file_ts)) continue;
    } catch (const std::exception& e) {
      note_error(sf.name + ": INDEX/timestamp not read: " + e.what());
      continue;
    }
    for (size_t i = 0; i < where.size() && i < file_ts.size(); ++i) {
      // As EXtra-data: the first file with INDEX/timestamp holding the train gives it; a zero
      // there is NaT (and later files are not asked).
      if (where[i] == SIZE_MAX || done[where[i]]) continue;
      done[where[i]] = 1;
      if (file_ts[i] != 0) ts[where[i]] = static_cast<int64_t>(file_ts[i]);
      --missing;
    }
  }
  DType t;
  t.typestr = "<M8[ns]";
  t.itemsize = 8;
  std::vector<uint8_t> bytes(ts.size() * 8);
  if (!ts.empty()) std::memcpy(bytes.data(), ts.data(), bytes.size());  // little-endian host
  auto a = std::make_shared<MemoryArray>(Shape{ts.size()}, t, std::move(bytes), dir_ + ": train timestamps");
  std::lock_guard<std::mutex> lk(mu_);
  if (!timestamps_) timestamps_ = a;
  return timestamps_;
}

ArrayPtr Run::train_flags_array() const {
  std::vector<uint8_t> flags(train_ids_.size(), 0);
  for (const SequenceFile& sf : files_) {
    for (size_t i = 0; i < sf.train_ids.size(); ++i) {
      auto it = std::lower_bound(train_ids_.begin(), train_ids_.end(), sf.train_ids[i]);
      if (it != train_ids_.end() && *it == sf.train_ids[i] && sf.valid[i])
        flags[static_cast<size_t>(it - train_ids_.begin())] = 1;
    }
  }
  DType t;
  t.typestr = "|u1";
  t.itemsize = 1;
  const size_t n = flags.size();
  return std::make_shared<MemoryArray>(Shape{n}, t, std::move(flags), dir_ + ": train flags");
}

Run::KeyValues Run::key_values(const std::string& source, const std::string& key, uint64_t max_bytes) {
  KeyInfo k = this->key(source, key);
  auto gi = group_index(source, k.group);
  KeyValues out;
  out.total_rows = gi->rows;
  uint64_t bytes = 0;
  size_t cached_file = SIZE_MAX;
  Value file_value;
  for (const Block& b : gi->blocks) {
    if (b.rows == 0) continue;
    if (b.file != cached_file) {
      cached_file = b.file;
      file_value = engine_.open_file(files_[b.file].path)->read_value(k.dset_path, kMaxValueElementsPerFile);
    }
    const std::string where = files_[b.file].name + ":" + k.dset_path;
    if (file_value.kind != Value::Kind::List) {
      out.cut = where + ": not read (" + (file_value.kind == Value::Kind::String ? file_value.s : "not a list") + ")";
      return out;
    }
    for (uint64_t r = b.first; r < b.first + b.rows; ++r) {
      if (r >= file_value.items.size()) {
        out.cut = where + ": the index names row " + std::to_string(r) + " beyond the dataset's " +
                  std::to_string(file_value.items.size()) + " rows";
        return out;
      }
      bytes += value_bytes(file_value.items[r]);
      if (bytes > max_bytes) {
        out.cut = "cut after " + std::to_string(out.rows.items.size()) + " of " +
                  std::to_string(out.total_rows) + " rows: the .json holds at most " +
                  std::to_string(max_bytes) + " bytes of values";
        return out;
      }
      out.rows.items.push_back(file_value.items[r]);
    }
  }
  return out;
}

Value Run::run_values(const std::string& source) {
  const Source& s = this->source(source);
  Value out = Value::object();
  if (!s.is_control()) return out;
  const SequenceFile& sf = files_[s.files_.front()];
  std::string base = "/RUN/" + (s.alias_of_.empty() ? s.name_ : s.alias_of_);
  auto f = engine_.open_file(sf.path);
  for (const std::string& rel : meta::list_datasets(*f, base)) {
    std::string k = rel;
    std::replace(k.begin(), k.end(), '/', '.');
    try {
      out.set(k, first_element(f->read_value(base + "/" + rel, 100000)));
    } catch (const std::exception& e) {
      Value err = Value::object();
      err.set("error", Value::string(e.what()));
      out.set(k, err);
    }
  }
  return out;
}

Value Run::metadata() const {
  Value v = Value::object();
  v.set("directory", Value::string(dir_));
  v.set("proposal", proposal_ >= 0 ? Value::integer(proposal_) : Value::null());
  v.set("run", run_number_ >= 0 ? Value::integer(run_number_) : Value::null());
  v.set("dataFormatVersion", Value::string(format_version_));
  v.set("overview_file", overview_.empty() ? Value::null() : Value::string(overview_));
  v.set("inc_suspect_trains", Value::boolean(opts_.inc_suspect_trains));
  v.set("train_count", Value::uinteger(train_ids_.size()));
  v.set("first_train", train_ids_.empty() ? Value::null() : Value::uinteger(train_ids_.front()));
  v.set("last_train", train_ids_.empty() ? Value::null() : Value::uinteger(train_ids_.back()));
  Value md = Value::object();
  for (const auto& [k, x] : metadata_values_) md.set(k, x);
  v.set("metadata", md);
  Value files = Value::list();
  for (const SequenceFile& f : files_) {
    Value fv = Value::object();
    fv.set("name", Value::string(f.name));
    fv.set("size", Value::uinteger(f.size));
    fv.set("dataFormatVersion", Value::string(f.format_version));
    fv.set("train_count", Value::uinteger(f.train_ids.size()));
    uint64_t suspect = 0;
    for (uint8_t x : f.valid) suspect += x == 0;
    fv.set("suspect_trains", Value::uinteger(suspect));
    files.items.push_back(fv);
  }
  v.set("files", files);
  Value srcs = Value::object();
  for (const auto& [n, s] : sources_) {
    Value sv = Value::object();
    sv.set("section", Value::string(s.is_control() ? "CONTROL" : "INSTRUMENT"));
    if (!s.alias_of_.empty()) sv.set("legacy_name_of", Value::string(s.alias_of_));
    Value fl = Value::list();
    for (size_t fi : s.files_) fl.items.push_back(Value::string(files_[fi].name));
    sv.set("files", fl);
    if (!s.duplicates_.empty()) {
      Value d = Value::list();
      for (uint64_t t : s.duplicates_) d.items.push_back(Value::uinteger(t));
      sv.set("duplicate_trains", d);
    }
    srcs.set(n, sv);
  }
  v.set("sources", srcs);
  Value errs = Value::list();
  for (const std::string& e : errors()) errs.items.push_back(Value::string(e));
  v.set("errors", errs);
  return v;
}

}  // namespace h5d::euxfel
