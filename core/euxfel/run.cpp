// A run: its files opened (from the overview file or each sequence file) and its sources,
// train IDs, proposal and run number built from them.
#include "core/euxfel/run.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <set>
#include <thread>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/live.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/metadata.h"
#include "core/log.h"

namespace h5d::euxfel {

using detail::file_size;
using detail::first_element;
using detail::h5_files_in;
using detail::join;
using detail::seq_name_re;
using detail::u64_array;

Run::Run(H5Files& files, std::string dir, RunOptions opts)
    : h5files_(files), dir_(std::move(dir)), opts_(opts) {}

Engine& Run::engine() const { return h5files_.engine(); }

std::shared_ptr<Run> Run::open(H5Files& files, const std::string& dir, RunOptions opts) {
  std::shared_ptr<Run> run(new Run(files, dir, opts));
  std::vector<std::string> paths;
  if (opts.use_overview) {
    std::string why;
    run->overview_ = find_valid_overview(files, dir, &why);
    if (run->overview_.empty() && !why.empty())
      log::info("euxfel: " + dir + ": overview file not used: " + why);
  }
  if (!run->overview_.empty()) {
    paths.push_back(run->overview_);
  } else {
    for (const std::string& n : h5_files_in(dir, true)) paths.push_back(join(dir, n));
    run->leave_out_files_being_written(paths);
  }
  // libhdf5 reads each file's metadata under the HDF5 lock of its helper: ask the kernel to read
  // the start of every file that will be opened ahead now (in parallel, without waiting), so
  // that a cold cache does not make the opens below wait for the disk one by one. Files the
  // files map describes are not opened.
  for (const std::string& p : paths) {
    if (run->known(p)) continue;
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

const KnownFile* Run::known(const std::string& path) const {
  if (!opts_.known || !overview_.empty()) return nullptr;
  auto it = opts_.known->find(path.substr(path.find_last_of('/') + 1));
  return it == opts_.known->end() ? nullptr : &it->second;
}

// A file a libhdf5 writer has open (latest format: superblock flags) is left out with one log
// line and an entry in errors(): libhdf5 would refuse it, and its metadata may be incomplete.
void Run::leave_out_files_being_written(std::vector<std::string>& paths) {
  const std::vector<uint8_t> writing = open_for_writing(paths);  // all superblocks at once
  std::vector<std::string> kept;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string& p = paths[i];
    if (!writing[i]) {
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

namespace {

// One sequence file as read (or why it was skipped), before it joins the run in path order.
struct LoadedFile {
  SequenceFile sf;
  meta::SequenceMeta meta;
  std::string error;  // non-empty: skipped
};

// Fills l for the file at `path`: from its files map entry k when there is one, else read from
// the file (with the run's metadata: `with_metadata`); l.error says why a file cannot be read.
void load_file(LoadedFile& l, const std::string& path, const KnownFile* k, H5Files& files, bool with_metadata) {
  l.sf.path = path;
  l.sf.name = path.substr(path.find_last_of('/') + 1);
  l.sf.size = file_size(path);
  if (k) {
    l.sf.from_map = true;
    l.meta.train_ids = k->train_ids;
    l.meta.valid = k->valid;
    l.meta.control_sources = k->control_sources;
    l.meta.instrument_sources = k->instrument_sources;
    l.meta.legacy = k->legacy;
    l.error.clear();
    return;
  }
  try {
    auto f = files.open(path);
    l.meta = meta::read_sequence_file(*f, with_metadata);
    l.error.clear();
  } catch (const std::exception& e) {
    l.error = e.what();
  }
}

// The "opened N of M files" lines of a long scan (at info level): every kProgressFiles files,
// or every 2 s. Called from the threads that open the files.
class ScanProgress {
 public:
  ScanProgress(const std::string& dir, size_t files, bool long_scan, std::chrono::steady_clock::time_point t0)
      : dir_(dir), files_(files), total_(std::to_string(files)), long_scan_(long_scan), last_(t0) {}

  // One more file opened.
  void opened_one() {
    if (!long_scan_) return;
    std::lock_guard<std::mutex> lk(mu_);
    ++opened_;
    const auto now = std::chrono::steady_clock::now();
    if (opened_ < files_ && (opened_ % kProgressFiles == 0 || now - last_ >= std::chrono::seconds(2))) {
      log::info("euxfel: " + dir_ + ": opened " + std::to_string(opened_) + " of " + total_ + " files");
      last_ = now;
    }
  }

 private:
  const std::string& dir_;
  const size_t files_;
  const std::string total_;
  const bool long_scan_;
  std::mutex mu_;  // a leaf: only the progress line above
  size_t opened_ = 0;
  std::chrono::steady_clock::time_point last_;
};

// The SequenceFile of a file loaded: l.sf with what was read (l.meta) moved into it, but for its
// notes and the run's metadata.
SequenceFile sequence_file_of(LoadedFile& l) {
  SequenceFile sf = std::move(l.sf);
  meta::SequenceMeta& m = l.meta;
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
  return sf;
}

}  // namespace

void Run::for_each_file(const std::vector<std::string>& paths, const std::function<void(size_t)>& fn) const {
  // Each file is one request to an HDF5 helper: the metadata spreads them over its helpers (so
  // each file stays open where the run's later requests for it go, and the helpers work at
  // once); in process, libhdf5 runs under one lock anyway: in turn.
  h5files_.metadata().for_each_file(paths, fn);
}

void Run::load_files(const std::vector<std::string>& paths) {
  // A long scan says how far it got (at info level): every 100 files, or every 2 s.
  std::vector<std::string> to_read;  // files the map does not describe
  for (const std::string& p : paths)
    if (!known(p)) to_read.push_back(p);
  const bool long_scan = to_read.size() >= kProgressFiles;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string total = std::to_string(to_read.size());
  if (long_scan) log::info("euxfel: " + dir_ + ": opening " + total + " files");
  // The run's metadata comes from its first readable file (DataCollection.run_metadata uses
  // files[0]): asked of the first path when it is read now; read again below should that one
  // be skipped, and later (load_details) when the map describes the first file.
  const bool run_is_new = files_.empty();
  std::vector<LoadedFile> loaded(paths.size());
  auto load = [&](size_t i, bool with_metadata) {
    load_file(loaded[i], paths[i], known(paths[i]), h5files_, with_metadata);
  };
  ScanProgress progress(dir_, to_read.size(), long_scan, t0);
  for (size_t i = 0; i < paths.size(); ++i)
    if (known(paths[i])) load(i, false);
  std::vector<size_t> read_index;  // index into paths of to_read[k]
  for (size_t i = 0; i < paths.size(); ++i)
    if (!known(paths[i])) read_index.push_back(i);
  for_each_file(to_read, [&](size_t k) {
    load(read_index[k], run_is_new && read_index[k] == 0);
    progress.opened_one();
  });
  for (size_t i = 0; i < loaded.size(); ++i) {
    LoadedFile& l = loaded[i];
    if (!l.error.empty()) {
      // DataCollection.from_paths: "Skipping file ..." and goes on with the others.
      note_error("skipping " + l.sf.name + ": " + l.error);
      continue;
    }
    if (files_.empty() && run_is_new && i > 0 && !l.sf.from_map) {
      load(i, true);  // the first path was skipped: this one is the run's first file
      if (!l.error.empty()) {
        note_error("skipping " + l.sf.name + ": " + l.error);
        continue;
      }
    }
    SequenceFile sf = sequence_file_of(l);
    meta::SequenceMeta& m = l.meta;
    for (const std::string& n : m.notes) note_error(n);
    if (files_.empty()) {
      format_version_ = sf.format_version;
      metadata_values_ = std::move(m.metadata_values);
      details_loaded_ = !sf.from_map;  // else read when asked (load_details)
    }
    files_from_map_ += sf.from_map;
    files_.push_back(std::move(sf));
  }
  if (files_from_map_)
    log::info("euxfel: " + dir_ + ": " + std::to_string(files_from_map_) + " of " + std::to_string(files_.size()) +
              " files described by the files map (not opened to list the run)");
  if (long_scan) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log::info("euxfel: " + dir_ + ": opened all " + total + " files in " + std::to_string(secs).substr(0, 5) + " s");
  }
}

void Run::load_details() const {
  std::lock_guard<std::mutex> lk(details_mu_);
  if (details_loaded_) return;
  details_loaded_ = true;
  std::vector<std::string> paths;
  std::vector<size_t> which;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (!files_[i].from_map) continue;
    paths.push_back(files_[i].path);
    which.push_back(i);
  }
  std::vector<meta::SequenceMeta> metas(paths.size());
  std::vector<std::string> errs(paths.size());
  for_each_file(paths, [&](size_t k) {
    try {
      metas[k] = meta::read_sequence_file(*h5files_.open(paths[k]), which[k] == 0);
    } catch (const std::exception& e) {
      errs[k] = e.what();
    }
  });
  for (size_t k = 0; k < paths.size(); ++k) {
    SequenceFile& sf = files_[which[k]];
    if (!errs[k].empty()) {
      note_error(sf.name + ": format version and METADATA not read: " + errs[k]);
      continue;
    }
    sf.format_version = metas[k].format_version;
    for (const std::string& n : metas[k].notes) note_error(n);
    if (which[k] == 0) {
      format_version_ = sf.format_version;
      metadata_values_ = std::move(metas[k].metadata_values);
    }
  }
  identify();
}

int64_t Run::proposal() const {
  load_details();
  std::lock_guard<std::mutex> lk(details_mu_);
  return proposal_;
}

int64_t Run::run_number() const {
  load_details();
  std::lock_guard<std::mutex> lk(details_mu_);
  return run_number_;
}

std::string Run::format_version() const {
  load_details();
  std::lock_guard<std::mutex> lk(details_mu_);
  return format_version_;
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

  identify();
}

// Proposal and run number: file names, METADATA (of the first file), then the path.
void Run::identify() const {
  proposal_ = run_number_ = -1;
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

void Run::note_error(const std::string& msg) const {
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

}  // namespace h5d::euxfel
