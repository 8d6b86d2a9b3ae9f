#include "vfs/run_view.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/euxfel/detector.h"
#include "core/euxfel/live.h"
#include "core/euxfel/run.h"
#include "core/log.h"
#include "vfs/detector_view.h"
#include "vfs/files_map.h"
#include "vfs/npy.h"
#include "vfs/sidecar.h"

namespace h5d::vfs {
namespace {

using euxfel::KeyInfo;
using euxfel::Run;
using nlohmann::json;

constexpr const char* kTrainIdsDir = ".train_ids";
constexpr const char* kRunValues = ".run_values.json";

std::string group_file_name(const std::string& group) {
  return (group.empty() ? std::string("control") : group) + ".npy";
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t next = s.find('/', pos);
    std::string part = s.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!part.empty() && part != "." && part != "..") out.push_back(part);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

// Relative symlink target from the directory holding `from` to `to` (both source paths).
std::string relative_target(const std::string& from, const std::string& to) {
  std::vector<std::string> a = split(from), b = split(to);
  size_t common = 0;
  while (common + 1 < a.size() && common < b.size() && a[common] == b[common]) ++common;
  std::string out;
  for (size_t i = common; i + 1 < a.size(); ++i) out += "../";
  for (size_t i = common; i < b.size(); ++i) out += b[i] + (i + 1 < b.size() ? "/" : "");
  return out;
}

// An in-memory array of the run (train IDs, flags) as a file.
ArraySpec u64_spec(std::shared_ptr<const Array> a, const std::string& what) {
  ArraySpec spec;
  spec.shape = a->shape();
  spec.dtype = a->dtype();
  spec.what = what;
  spec.read_path = "memory";
  spec.loader = [a] { return a; };
  return spec;
}

// first_train, last_train, and how the rows are stored (docs/sidecar.md, "Run keys"): one block
// per run of rows of one sequence file's dataset, and row_chunks, the blocks' row counts (dask's
// chunks= along rows, each chunk one file's rows).
void add_row_blocks(json& j, Run& run, const std::string& source, const std::string& key) {
  const std::vector<Run::RowBlock> blocks = run.key_row_blocks(source, key);
  json list = json::array(), chunks = json::array();
  for (const Run::RowBlock& b : blocks) {
    json r = {{"rows", {b.row, b.row + b.rows}},
              {"file", run.files()[b.file].name},
              {"dataset_rows", {b.first, b.first + b.rows}},
              {"first_train", b.first_train},
              {"last_train", b.last_train},
              {"chunk_rows", b.chunk_rows ? json(b.chunk_rows) : json(nullptr)}};
    if (!b.error.empty()) r["error"] = b.error;
    list.push_back(std::move(r));
    chunks.push_back(b.rows);
  }
  j["first_train"] = blocks.empty() ? json(nullptr) : json(blocks.front().first_train);
  j["last_train"] = blocks.empty() ? json(nullptr) : json(blocks.back().last_train);
  j["row_blocks"] = std::move(list);
  j["row_chunks"] = std::move(chunks);
}

json key_sidecar(Run& run, const std::string& source, const KeyInfo& k) {
  const euxfel::Source& s = run.source(source);
  json j;
  j["source"] = source;
  j["key"] = k.name;
  j["section"] = s.is_control() ? "CONTROL" : "INSTRUMENT";
  j["index_group"] = k.group;
  j["dataset_path"] = k.dset_path;
  j["is_array"] = k.is_array;
  j["hdf5_type"] = k.hdf5_type;
  Shape shape{k.rows};
  shape.insert(shape.end(), k.entry_shape.begin(), k.entry_shape.end());
  j["shape"] = shape;
  j["entry_shape"] = k.entry_shape;
  j["rows"] = k.rows;
  if (k.is_array) {
    j["dtype"] = dtype_descr_json(k.dtype);
    j["npy_data_offset"] = npy_header(k.dtype, shape).size();
  } else {
    j["why_not_array"] = k.why_not_array;
  }
  j["train_ids"] = std::string(kTrainIdsDir) + "/" + group_file_name(k.group);
  json attrs = json::object();
  for (const auto& [n, v] : k.attrs) attrs[n] = to_json(v);
  j["attrs"] = attrs;
  json files = json::array();
  for (size_t fi : s.files()) files.push_back(run.files()[fi].name);
  j["files"] = files;
  if (!s.alias_of().empty()) j["legacy_name_of"] = s.alias_of();
  if (!s.duplicate_trains().empty()) {
    j["duplicate_trains"] = s.duplicate_trains();
    j["error"] = "the same train ID occurs more than once in this source's files; rows are "
                 "shown as stored (EXtra-data refuses to open such a run)";
  }
  auto gi = run.group_index(source, k.group);
  if (!gi->errors.empty()) j["index_errors"] = gi->errors;
  return j;
}

}  // namespace

std::shared_ptr<Run> open_run(H5Files& files, const std::string& dir, const VfsOptions& opts) {
  euxfel::RunOptions ro;
  ro.inc_suspect_trains = opts.inc_suspect_trains;
  ro.known = read_files_map(dir);  // EXtra-data's files map: the files it describes are not opened
  return Run::open(files, dir, ro);
}

json run_summary_json(Run& run) {
  json j = to_json(run.metadata());
  j["train_ids_file"] = "trainId.npy";
  j["timestamps_file"] = "timestamp.npy";
  j["flags_file"] = "flag.npy";
  json& sources = j["sources"];
  for (const std::string& name : run.source_names()) {
    const euxfel::Source& s = run.source(name);
    json& sj = sources[name];
    if (!s.alias_of().empty()) continue;  // a legacy name: the canonical source has the keys
    json keys = json::object();
    for (const KeyInfo& k : run.keys(name)) {
      json kj;
      Shape shape{k.rows};
      shape.insert(shape.end(), k.entry_shape.begin(), k.entry_shape.end());
      kj["shape"] = shape;
      kj["entry_shape"] = k.entry_shape;
      kj["dtype"] = k.is_array ? dtype_descr_json(k.dtype) : json(nullptr);
      if (!k.is_array) kj["why_not_array"] = k.why_not_array;
      kj["index_group"] = k.group;
      keys[k.name] = kj;
    }
    sj["keys"] = keys;
    // Trains with data, per index group (run.info()'s "data for N trains (P%), M-K entries per
    // train") and for the source (any group).
    json groups = json::object();
    std::vector<uint8_t> any(run.train_ids().size(), 0);
    for (const std::string& g : run.index_groups(name)) {
      auto gi = run.group_index(name, g);
      uint64_t with = 0, most = 0, least = 0;  // least: of the trains with data
      for (size_t i = 0; i < gi->counts_per_run_train.size(); ++i) {
        const uint64_t c = gi->counts_per_run_train[i];
        if (c) {
          ++with;
          if (i < any.size()) any[i] = 1;
          least = least ? std::min(least, c) : c;
        }
        most = std::max(most, c);
      }
      groups[g.empty() ? std::string("control") : g] = {{"trains_with_data", with},
                                                         {"min_entries_per_train", least},
                                                         {"max_entries_per_train", most},
                                                         {"rows", gi->rows}};
    }
    sj["index_groups"] = groups;
    sj["train_count"] = std::count(any.begin(), any.end(), uint8_t{1});
    if (s.is_control()) {
      // RUN keys that are not CONTROL keys (lsxfel --detail's "additional run keys").
      json run_only = json::object();
      try {
        for (const KeyInfo& k : run.run_only_keys(name)) {
          run_only[k.name] = {{"dtype", k.is_array ? dtype_descr_json(k.dtype) : json(nullptr)},
                              {"entry_shape", k.entry_shape}};
        }
      } catch (const std::exception& e) {
        log::warn("euxfel: " + run.dir() + ": " + name + ": cannot list its RUN keys: " + e.what());
      }
      sj["run_only_keys"] = run_only;
    }
  }
  return j;
}

namespace {

// A .json holds at most this many bytes of a non-array key's values: it is read whole (json.load)
// and rendered in memory; 1 MiB holds some 50000 short per-train strings, hours of a run.
constexpr uint64_t kMaxValueBytes = 1u << 20;

// value: the rows EXtra-data's run[source, key].ndarray() gives for a non-array key (strings).
void add_key_values(json& j, Run& run, const std::string& source, const std::string& key) {
  try {
    Run::KeyValues v = run.key_values(source, key, kMaxValueBytes);
    j["value"] = to_json(v.rows);
    j["value_rows"] = v.rows.items.size();
    j["value_note"] = "run[source, key].ndarray(): the indexed rows of every sequence file, in train order";
    if (!v.cut.empty()) j["value_cut"] = v.cut;
  } catch (const std::exception& e) {
    j["value"] = nullptr;
    j["value_cut"] = std::string("values not read: ") + e.what();
  }
}

// The directory of one source: its keys, .train_ids/, .run_values.json, plus sub-directories
// of sources whose names continue below this one.
class SourceDirProvider final : public DirProvider {
 public:
  SourceDirProvider(const TreeContext& ctx, std::shared_ptr<Run> run, std::string source,
                    std::vector<ChildEntry> subdirs, NodeMeta dmeta, NodeMeta fmeta)
      : ctx_(ctx), run_(std::move(run)), source_(std::move(source)),
        subdirs_(std::move(subdirs)), dmeta_(dmeta), fmeta_(fmeta) {}

  std::vector<ChildEntry> list() override {
    std::vector<ChildEntry> out = subdirs_;
    std::shared_ptr<Run> run = run_;
    const std::string source = source_;
    std::vector<KeyInfo> keys = run->keys(source);
    std::map<std::string, std::shared_ptr<const euxfel::GroupIndex>> groups;
    for (const KeyInfo& k : keys) {
      if (!groups.count(k.group)) groups[k.group] = run->group_index(source, k.group);
      json side = key_sidecar(*run, source, k);
      if (k.is_array) {
        ArraySpec spec;
        spec.shape = Shape{k.rows};
        spec.shape.insert(spec.shape.end(), k.entry_shape.begin(), k.entry_shape.end());
        spec.dtype = k.dtype;
        spec.what = run->dir() + ": " + source + " " + k.name;
        spec.read_path = run->overview().empty() ? "direct" : "direct (overview VDS)";
        std::string key = k.name;
        spec.loader = [run, source, key] { return run->key_array(source, key); };
        out.push_back({k.name + ".npy", make_array_file(ctx_, ArrayFormat::Npy, spec, fmeta_)});
        out.push_back({k.name + ".raw", make_array_file(ctx_, ArrayFormat::Raw, std::move(spec), fmeta_)});
      }
      // Rendered at its first stat or open (listing reads no values and no dataset of the
      // other sequence files): the row blocks (every file's dataset metadata) and, for
      // non-arrays, the values of every row.
      const std::string key = k.name;
      const bool is_array = k.is_array;
      out.push_back({k.name + ".json", make_text_file(
                                           [run, source, key, side, is_array] {
                                             json j = side;
                                             add_row_blocks(j, *run, source, key);
                                             if (!is_array) add_key_values(j, *run, source, key);
                                             return json_text(j);
                                           },
                                           fmeta_)});
    }
    std::vector<ChildEntry> tid_files;
    for (const auto& [g, gi] : groups) {
      tid_files.push_back({group_file_name(g),
                           make_array_file(ctx_, ArrayFormat::Npy,
                                           u64_spec(gi->row_train_ids,
                                                    run->dir() + ": " + source + " " + g +
                                                        " train IDs"),
                                           fmeta_)});
    }
    if (!tid_files.empty()) out.push_back({kTrainIdsDir, make_dir_node(dmeta_, std::move(tid_files))});
    if (run->source(source).is_control()) {
      out.push_back({kRunValues, make_text_file(
                                     [run, source] {
                                       json j;
                                       j["source"] = source;
                                       j["run_values"] = to_json(run->run_values(source));
                                       return json_text(j);
                                     },
                                     fmeta_)});
    }
    return out;
  }

 private:
  const TreeContext& ctx_;
  std::shared_ptr<Run> run_;
  std::string source_;
  std::vector<ChildEntry> subdirs_;
  NodeMeta dmeta_, fmeta_;
};

// One level of the source-name tree.
struct SourceTrie {
  std::string source;  // non-empty: a source ends here
  std::map<std::string, SourceTrie> children;
};

class RunDirProvider final : public DirProvider {
 public:
  RunDirProvider(const TreeContext& ctx, std::string path, const struct stat& st, DirChainPtr up)
      : ctx_(ctx), path_(std::move(path)), dmeta_(source_meta(path_, st, MetaRule::Dir)),
        fmeta_(source_meta(path_, st, MetaRule::File)), chain_(chain_with(std::move(up), st)) {
    dmeta_.live = fmeta_.live = revalidate_seconds() > 0;
  }

  // Runs being written: a sequence file added, or one that changed or was closed by its writer,
  // makes the run be opened and listed again (docs/euxfel.md, "Runs being written").
  double revalidate_seconds() const override { return ctx_.opts.revalidate; }
  bool changed() override {
    euxfel::RunDirState now = euxfel::RunDirState::take(path_, &state_);
    if (now == state_) return false;
    log::info("run view: " + path_ + ": changed on disk; the run is read again");
    state_ = std::move(now);
    return true;
  }

  std::vector<ChildEntry> list() override {
    // Before the run is read: a change meanwhile is seen at the next check.
    state_ = euxfel::RunDirState::take(path_, &state_);
    std::shared_ptr<Run> run;
    try {
      run = open_run(ctx_.files, path_, ctx_.opts);
    } catch (const std::exception& e) {
      log::warn("run view: " + path_ + ": not shown as a run: " + e.what());
      return make_plain_dir_provider(ctx_, path_, chain_)->list();
    }
    // Who reads the run view must be able to read the files its bytes come from, as opening
    // them directly would need: run-wide entries all of the run's files, a source its own.
    std::vector<std::string> all_files;
    for (const euxfel::SequenceFile& f : run->files()) all_files.push_back(f.path);
    if (!run->overview().empty()) all_files.push_back(run->overview());
    const NodeMeta run_dmeta = with_also(dmeta_, all_files), run_fmeta = with_also(fmeta_, all_files);
    std::vector<ChildEntry> out;
    // Multi-module detectors (EXtra-data's identify_multimod_detectors), by source names only.
    std::vector<std::string> instrument;
    for (const std::string& name : run->source_names()) {
      const euxfel::Source& s = run->source(name);
      if (!s.is_control() && s.alias_of().empty()) instrument.push_back(name);
    }
    detectors_.clear();
    for (euxfel::DetectorSources& d : euxfel::find_detectors(instrument)) {
      std::string name = d.name;
      detectors_.emplace(name, std::move(d));
    }
    json dets = json::object();
    for (const auto& [name, d] : detectors_) {
      json dj;
      dj["class"] = d.cls;
      dj["directory"] = name;
      std::vector<int> mods;
      for (const auto& m : d.modules) mods.push_back(m.first);
      dj["modules"] = mods;
      dets[name] = dj;
    }
    // Rendered at its first open: the keys of every source (one file's tree each).
    out.push_back({"run.json", make_text_file(
                                   [run, dets] {
                                     json j = run_summary_json(*run);
                                     j["detectors"] = dets;
                                     return json_text(j);
                                   },
                                   run_fmeta)});
    out.push_back({"trainId.npy", make_array_file(ctx_, ArrayFormat::Npy,
                                                  u64_spec(run->train_ids_array(),
                                                           path_ + ": run train IDs"),
                                                  run_fmeta)});
    out.push_back({"flag.npy", make_array_file(ctx_, ArrayFormat::Npy,
                                               u64_spec(run->train_flags_array(),
                                                        path_ + ": run train flags"),
                                               run_fmeta)});
    {
      // INDEX/timestamp of every file is read when timestamp.npy is first opened.
      ArraySpec ts;
      ts.shape = Shape{run->train_ids().size()};
      ts.dtype.typestr = "<M8[ns]";
      ts.dtype.itemsize = 8;
      ts.what = path_ + ": run train timestamps";
      ts.read_path = "memory";
      ts.loader = [run] { return run->train_timestamps_array(); };
      out.push_back({"timestamp.npy", make_array_file(ctx_, ArrayFormat::Npy, std::move(ts), run_fmeta)});
    }
    SourceTrie root;
    for (const std::string& name : run->source_names()) {
      SourceTrie* t = &root;
      for (const std::string& part : split(name)) t = &t->children[part];
      t->source = name;
    }
    for (auto& [name, t] : root.children) {
      auto det = detectors_.find(name);
      if (det != detectors_.end() && t.source.empty()) {
        // The detector's directory: its stacked keys beside the module source directories.
        std::vector<ChildEntry> subdirs;
        for (const auto& [cname, c] : t.children) {
          if (NodePtr n = build(run, c)) subdirs.push_back({cname, n});
        }
        out.push_back({name, make_detector_dir(ctx_, run, det->second, std::move(subdirs), run_dmeta,
                                               run_fmeta)});
        continue;
      }
      if (NodePtr n = build(run, t)) out.push_back({name, n});
    }
    if (ctx_.opts.run_view == RunViewMode::PerFile) {
      // Beside the run view: every file of the directory in its own plain view (sequence files
      // end in .h5; source names' first components never do).
      for (ChildEntry& c : make_plain_dir_provider(ctx_, path_, chain_)->list()) out.push_back(std::move(c));
    }
    return out;
  }

 private:
  NodePtr build(const std::shared_ptr<Run>& run, const SourceTrie& t) {
    std::vector<ChildEntry> subdirs;
    for (const auto& [name, c] : t.children) {
      if (NodePtr n = build(run, c)) subdirs.push_back({name, n});
    }
    if (t.source.empty()) return make_dir_node(dmeta_, std::move(subdirs));
    const euxfel::Source& s = run->source(t.source);
    if (!s.alias_of().empty() && run->has_source(s.alias_of()) && subdirs.empty()) {
      return std::make_shared<SymlinkNode>(with_perm(fmeta_, 0777),
                                           relative_target(t.source, s.alias_of()));
    }
    std::vector<std::string> files;
    for (size_t i : s.files()) files.push_back(run->files()[i].path);
    if (!run->overview().empty()) files.push_back(run->overview());
    const NodeMeta dm = with_also(dmeta_, files), fm = with_also(fmeta_, files);
    return std::make_shared<DirNode>(
        dm, std::make_unique<SourceDirProvider>(ctx_, run, t.source, std::move(subdirs), dm, fm));
  }

  const TreeContext& ctx_;
  std::string path_;
  NodeMeta dmeta_, fmeta_;
  DirChainPtr chain_;
  std::map<std::string, euxfel::DetectorSources> detectors_;  // by name, filled by list()
  euxfel::RunDirState state_;  // the directory as it was at the last list() or check
};

}  // namespace

ProviderFactory make_run_view_factory(const VfsOptions& opts) {
  if (opts.run_view == RunViewMode::Off) return {};
  return [](const ProviderRequest& req) -> std::unique_ptr<DirProvider> {
    if (req.kind != SourceKind::Directory) return nullptr;
    // Names only: nothing is opened until the directory is looked up or listed.
    if (!euxfel::looks_like_run_dir(req.path)) return nullptr;
    return std::make_unique<RunDirProvider>(req.ctx, req.path, req.st, req.chain);
  };
}

}  // namespace h5d::vfs
