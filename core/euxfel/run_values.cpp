// Values for a run's sidecars (run.json and the .json of non-array keys): key values across
// files, a CONTROL source's RUN values, the run's metadata. Plain Values; vfs renders the JSON.
#include "core/euxfel/run.h"

#include <algorithm>
#include <set>

#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/euxfel/h5meta.h"
#include "core/euxfel/run_internal.h"
#include "core/h5lib/h5file.h"
#include "core/log.h"

namespace h5d::euxfel {

using detail::ends_with;
using detail::first_element;

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
      file_value = h5files_.open(files_[b.file].path)->read_value(k.dset_path, kMaxValueElementsPerFile);
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
  auto f = h5files_.open(sf.path);
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

std::vector<KeyInfo> Run::run_only_keys(const std::string& source) {
  std::vector<KeyInfo> out;
  if (!this->source(source).is_control()) return out;
  std::set<std::string> control;
  for (const KeyInfo& k : keys(source)) control.insert(k.name);
  const Source& s = this->source(source);
  const std::string base = "/RUN/" + (s.alias_of_.empty() ? s.name_ : s.alias_of_);
  auto f = h5files_.open(files_[s.files_.front()].path);
  std::vector<std::string> rels, paths;
  for (const std::string& rel : meta::list_datasets(*f, base)) {
    std::string k = rel;
    std::replace(k.begin(), k.end(), '/', '.');
    if (!ends_with(k, ".value") || control.count(k)) continue;
    rels.push_back(k.substr(0, k.size() - 6));
    paths.push_back(base + "/" + rel);
  }
  const auto details = f->datasets_details(base, paths);  // one helper request for all
  for (size_t i = 0; i < paths.size(); ++i) {
    KeyInfo k;
    k.name = rels[i];
    k.dset_path = paths[i];
    const DatasetInfo& info = *details[i];
    k.is_array = info.is_array && info.dtype.typestr.find_first_of("SU") == std::string::npos;
    k.why_not_array = info.is_array ? "a string" : info.why_not_array;
    k.hdf5_type = info.hdf5_type;
    k.dtype = info.dtype;
    if (!info.shape.empty()) k.entry_shape.assign(info.shape.begin() + 1, info.shape.end());
    out.push_back(std::move(k));
  }
  std::sort(out.begin(), out.end(), [](const KeyInfo& a, const KeyInfo& b) { return a.name < b.name; });
  return out;
}

Value Run::metadata() const {
  load_details();  // files the map described: their format version, the first file's METADATA
  std::unique_lock<std::mutex> details(details_mu_);
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
  details.unlock();
  Value errs = Value::list();
  for (const std::string& e : errors()) errs.items.push_back(Value::string(e));
  v.set("errors", errs);
  return v;
}

}  // namespace h5d::euxfel
