// The run's index: keys of a source, INDEX blocks of each (source, group), the arrays of keys
// over the whole run, and the per-train arrays (timestamps, flags).
#include "core/euxfel/run.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"

namespace h5d::euxfel {

using detail::ends_with;
using detail::u64_array;

void Run::load_keys_locked(Source& s) {
  if (s.keys_loaded_) return;
  s.keys_loaded_ = true;
  // SourceData.keys(): "Only one file is used to find the keys" (the first of the source).
  const SequenceFile& sf = files_[s.files_.front()];
  std::string section = s.is_control() ? "CONTROL" : "INSTRUMENT";
  std::string data_name = s.alias_of_.empty() ? s.name_ : s.alias_of_;
  std::string base = "/" + section + "/" + data_name;
  try {
    auto f = h5files_.open(sf.path);
    const std::vector<std::string> rels = meta::list_datasets(*f, base);
    std::vector<std::string> paths;
    for (const std::string& rel : rels) paths.push_back(base + "/" + rel);
    // With attributes and small values; all of the source's keys in one helper request.
    const auto details = f->datasets_details(base, paths);
    for (size_t i = 0; i < rels.size(); ++i) {
      const std::string& rel = rels[i];
      KeyInfo k;
      k.name = rel;
      std::replace(k.name.begin(), k.name.end(), '/', '.');
      k.dset_path = paths[i];
      k.group = s.is_control() ? "" : k.name.substr(0, k.name.find('.'));
      const auto& info = details[i];
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

void Run::fetch_index_locked(Source& s, const std::vector<std::string>& groups) {
  const std::string base = "/INDEX/" + (s.alias_of_.empty() ? s.name_ : s.alias_of_);
  auto path_of = [&](const std::string& g) { return base + (g.empty() ? "" : "/" + g); };
  std::vector<std::string> paths;
  std::vector<size_t> which;
  for (size_t fi : s.files_) {
    const SequenceFile& sf = files_[fi];
    if (sf.train_ids.empty()) continue;  // KeyData._find_chunks skips files without trains
    for (const std::string& g : groups) {
      if (sf.index.count(path_of(g))) continue;
      paths.push_back(sf.path);
      which.push_back(fi);
      break;
    }
  }
  if (paths.empty()) return;
  // One request per file (every group at once), all files at once over the helpers.
  std::vector<std::vector<meta::IndexArrays>> got(paths.size());
  std::vector<std::string> errs(paths.size());
  for_each_file(paths, [&](size_t k) {
    try {
      got[k] = meta::read_index(*h5files_.open(paths[k]), base, groups, files_[which[k]].train_ids.size());
      if (got[k].size() != groups.size()) fail(EIO, "INDEX arrays of " + std::to_string(got[k].size()) + " groups for " +
                                                        std::to_string(groups.size()));
    } catch (const std::exception& e) {
      errs[k] = e.what();
    }
  });
  for (size_t k = 0; k < paths.size(); ++k) {
    SequenceFile& sf = files_[which[k]];
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const std::string idx = path_of(groups[gi]);
      if (sf.index.count(idx)) continue;
      auto rd = std::make_shared<FileIndex>();
      if (!errs[k].empty()) {
        rd->error = errs[k];
      } else {
        rd->firsts = std::move(got[k][gi].firsts);
        rd->counts = std::move(got[k][gi].counts);
        rd->error = std::move(got[k][gi].error);
      }
      sf.index[idx] = std::move(rd);
    }
  }
}

std::shared_ptr<const GroupIndex> Run::group_index_locked(Source& s, const std::string& group) {
  auto it = s.groups_.find(group);
  if (it != s.groups_.end()) return it->second;
  auto gi = std::make_shared<GroupIndex>();
  std::string idx = "/INDEX/" + (s.alias_of_.empty() ? s.name_ : s.alias_of_) +
                    (group.empty() ? "" : "/" + group);
  {
    // The INDEX of this group in every file of the source, with the other groups of its keys
    // (the source's directory lists them all next), in one sweep over its files.
    std::set<std::string> groups{group};
    if (s.keys_loaded_)
      for (const KeyInfo& k : s.keys_) groups.insert(k.group);
    fetch_index_locked(s, {groups.begin(), groups.end()});
  }
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
      rd->error = "INDEX not read";
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
  H5Files& h5 = h5files_;
  for (const Block& b : gi->blocks) {
    if (b.rows == 0) continue;
    const std::string& path = files_[b.file].path;
    if (!parts.empty() && parts.back().what == path && parts.back().begin + parts.back().rows == b.first) {
      parts.back().rows += b.rows;
      continue;
    }
    const std::string dset = k.dset_path;
    parts.push_back({[&h5, path, dset] { return h5.open(path)->dataset_array(dset); },
                     b.first, b.rows, path, path, dset});
  }
  // Each part's open needs its dataset's metadata in its file (from an HDF5 helper in the
  // daemon): a read over many files fetches them in one batch (H5Files::prefetch_infos: one
  // request per helper, all at once), then opens the parts (the chunk index, read in this
  // process) on the engine's pool.
  auto open_many = [&h5](const std::vector<const ConcatArray::Part*>& many) {
    std::vector<std::pair<std::string, std::string>> items;
    for (const ConcatArray::Part* p : many) items.emplace_back(p->file, p->dataset);
    h5.prefetch_infos(items);
  };
  auto a = std::make_shared<ConcatArray>(std::move(parts), k.entry_shape, k.dtype,
                                         dir_ + ": " + source + " " + key, open_many, &engine().pool());
  s.arrays_[key] = a;
  return a;
}

std::vector<Run::RowBlock> Run::key_row_blocks(const std::string& source, const std::string& key) {
  KeyInfo k = this->key(source, key);
  auto gi = group_index(source, k.group);
  std::vector<RowBlock> out;
  uint64_t row = 0;
  for (const Block& b : gi->blocks) {
    if (b.rows == 0) continue;
    size_t i0 = 0, i1 = b.counts.size();
    while (i0 < i1 && b.counts[i0] == 0) ++i0;
    while (i1 > i0 && b.counts[i1 - 1] == 0) --i1;
    if (!out.empty() && out.back().file == b.file && out.back().first + out.back().rows == b.first) {
      out.back().rows += b.rows;  // continues the last block in its file (as key_array's parts)
      if (i1 > i0) out.back().last_train = b.train_ids[i1 - 1];
    } else {
      RowBlock r;
      r.file = b.file;
      r.row = row;
      r.rows = b.rows;
      r.first = b.first;
      if (i1 > i0) {
        r.first_train = b.train_ids[i0];
        r.last_train = b.train_ids[i1 - 1];
      }
      out.push_back(r);
    }
    row += b.rows;
  }
  // Every key of the source at once (their .json files are rendered together by `ls -l`, tar,
  // a walk): the first asks for all their files' dataset metadata, in one HDF5 helper request
  // per helper; the others find it cached.
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Source& s = source_mut(source);
    first = !s.infos_asked_;
    s.infos_asked_ = true;
  }
  if (first) {
    std::vector<std::pair<std::string, std::string>> items;
    for (const KeyInfo& other : keys(source)) {
      for (const Block& b : group_index(source, other.group)->blocks)
        if (b.rows) items.emplace_back(files_[b.file].path, other.dset_path);
    }
    h5files_.prefetch_infos(items);
  }
  for (RowBlock& r : out) {
    try {
      auto info = h5files_.open(files_[r.file].path)->dataset_info(k.dset_path);
      if (!info->chunks.empty()) r.chunk_rows = info->chunks[0];
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  }
  return out;
}

ArrayPtr Run::key_train_ids(const std::string& source, const std::string& key) {
  KeyInfo k = this->key(source, key);
  return group_index(source, k.group)->row_train_ids;
}
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
      if (!meta::try_read_u64(*h5files_.open(sf.path), "/INDEX/timestamp", file_ts)) continue;
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

}  // namespace h5d::euxfel
