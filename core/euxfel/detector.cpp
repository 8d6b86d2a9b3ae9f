#include "core/euxfel/detector.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>

#include "core/array/reader.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/log.h"

namespace h5d::euxfel {
namespace {

// components.py: the @multimod_detectors classes, in their order of definition.
struct DetectorClass {
  const char* cls;
  const char* det_name_pat;  // _det_name_pat
  const char* module_pat;    // _source_raw_pat / _source_corr_pat after /DET/ or /CORR/
  bool xtdf;
  int n_modules;  // 0: JUNGFRAU, from the data
  int modnos_start_at;
  const char* main_key;
  const char* mask_key;
};

const std::vector<DetectorClass>& classes() {
  static const std::vector<DetectorClass> c = {
      {"AGIPD1M", R"([^/]+_AGIPD1M[^/]*)", R"((\d+)CH)", true, 16, 0, "image.data", "image.mask"},
      {"AGIPD500K", R"([^/]+AGIPD500K[^/]*)", R"((\d+)CH)", true, 8, 0, "image.data", "image.mask"},
      {"DSSC1M", R"([^/]+_DSSC1M[^/]*)", R"((\d+)CH)", true, 16, 0, "image.data", "image.mask"},
      {"LPD1M", R"([^/]+_LPD1M[^/]*)", R"((\d+)CH)", true, 16, 0, "image.data", "image.mask"},
      {"JUNGFRAU", R"([^/]+_(?:JNGFR|JF[14]M|JUNGF|JF|JF500K\d?))",
       R"((?:MODULE_|RECEIVER-|JNGFR)(\d+))", false, 0, 1, "data.adc", "data.mask"},
  };
  return c;
}

// Python's re.match: anchored at the start only.
bool match_start(const std::string& s, const std::regex& re, std::smatch& m) {
  return std::regex_search(s, m, re, std::regex_constants::match_continuous);
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr(R"(\^$.|?*+()[]{}/-)", c)) out += '\\';
    out += c;
  }
  return out;
}

bool same_type(const DType& a, const DType& b) {
  return a.typestr == b.typestr && a.itemsize == b.itemsize && a.fields.size() == b.fields.size();
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

template <class T>
std::vector<T> cat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::vector<DetectorSources> find_detectors(const std::vector<std::string>& instrument_sources) {
  std::vector<DetectorSources> out;
  std::set<std::string> taken;
  for (const DetectorClass& dc : classes()) {
    // _find_detector_names: (?P<detname>PAT)/DET/... or (?P<detname>PAT)/CORR/...
    const std::regex raw_re(std::string("(") + dc.det_name_pat + ")/DET/" + dc.module_pat);
    const std::regex corr_re(std::string("(") + dc.det_name_pat + ")/CORR/" + dc.module_pat);
    std::set<std::string> names;
    for (const std::string& s : instrument_sources) {
      std::smatch m;
      if (match_start(s, raw_re, m) || match_start(s, corr_re, m)) names.insert(m[1].str());
    }
    for (const std::string& name : names) {
      if (!taken.insert(name).second) continue;  // one view per name (first class wins)
      DetectorSources d;
      d.name = name;
      d.cls = dc.cls;
      d.xtdf = dc.xtdf;
      d.main_key = dc.main_key;
      d.mask_key = dc.mask_key;
      d.modnos_start_at = dc.modnos_start_at;
      // _identify_sources(raw=None): corrected names preferred, else raw names.
      for (const char* kind : {"/CORR/", "/DET/"}) {
        const std::regex re(escape_regex(name) + kind + dc.module_pat);
        for (const std::string& s : instrument_sources) {
          std::smatch m;
          if (match_start(s, re, m)) d.modules.emplace_back(std::stoi(m[1].str()), s);
        }
        if (!d.modules.empty()) {
          d.corrected_names = std::string(kind) == "/CORR/";
          break;
        }
      }
      std::sort(d.modules.begin(), d.modules.end());
      int max_modno = 0;
      for (const auto& [n, s] : d.modules) max_modno = std::max(max_modno, n);
      // JUNGFRAU: n_modules = highest module number - first_modno + 1 (first_modno = 1)
      d.n_modules = dc.n_modules ? dc.n_modules : max_modno;
      out.push_back(std::move(d));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const DetectorSources& a, const DetectorSources& b) { return a.name < b.name; });
  return out;
}

// ---------------------------------------------------------------------------------------------

Detector::Detector(std::shared_ptr<Run> run, DetectorSources sources)
    : run_(std::move(run)), src_(std::move(sources)) {}

std::shared_ptr<Detector> Detector::open(std::shared_ptr<Run> run, DetectorSources sources) {
  std::shared_ptr<Detector> d(new Detector(std::move(run), std::move(sources)));
  d->init();
  return d;
}

namespace {

using ModuleKeys = std::vector<std::map<std::string, KeyInfo>>;  // each module's keys by name

// Why these module sources cannot make a detector: a module number from two sources, no module.
std::vector<std::string> module_clashes(const DetectorSources& src) {
  std::vector<std::string> why;
  const size_t M = src.modules.size();
  for (size_t i = 1; i < M; ++i)
    if (src.modules[i].first == src.modules[i - 1].first)
      why.push_back("module " + std::to_string(src.modules[i].first) + " comes from two sources (" +
                    src.modules[i - 1].second + ", " + src.modules[i].second + ")");
  if (M == 0) why.push_back("no module sources");
  return why;
}

// The keys of every module; `why` gets a line for each module without the main key.
ModuleKeys module_keys(Run& run, const DetectorSources& src, std::vector<std::string>& why) {
  const size_t M = src.modules.size();
  ModuleKeys mod_keys(M);
  for (size_t i = 0; i < M; ++i) {
    for (KeyInfo& k : run.keys(src.modules[i].second)) mod_keys[i][k.name] = std::move(k);
    if (!mod_keys[i].count(src.main_key))
      why.push_back(src.modules[i].second + " has no key " + src.main_key);
  }
  return mod_keys;
}

// mod_data_counts: counts of the main key per train and module (missing = 0).
std::map<uint64_t, std::vector<uint64_t>> module_counts(Run& run, const DetectorSources& src,
                                                        const std::string& main_group) {
  const size_t M = src.modules.size();
  std::map<uint64_t, std::vector<uint64_t>> counts;
  for (size_t i = 0; i < M; ++i) {
    auto gi = run.group_index(src.modules[i].second, main_group);
    for (const Block& b : gi->blocks)
      for (size_t k = 0; k < b.train_ids.size(); ++k) {
        auto& v = counts[b.train_ids[k]];
        v.resize(M, 0);
        v[i] += b.counts[k];
      }
  }
  return counts;
}

// Why key `name` (eg: as the first module has it) is not the same in every module: missing
// from one, or of another dtype or entry shape there; "" when it is.
std::string module_mismatch(const std::string& name, const KeyInfo& eg, const ModuleKeys& mod_keys,
                            const DetectorSources& src) {
  for (size_t i = 1; i < mod_keys.size(); ++i) {
    auto it = mod_keys[i].find(name);
    if (it == mod_keys[i].end() || !it->second.is_array)
      return "not in every module (" + src.modules[i].second + ")";
    if (!same_type(it->second.dtype, eg.dtype) || it->second.entry_shape != eg.entry_shape)
      return src.modules[i].second + " has dtype " + it->second.dtype.typestr + " entry " +
             shape_str(it->second.entry_shape) + ", module " + std::to_string(src.modules[0].first) + " " +
             eg.dtype.typestr + " " + shape_str(eg.entry_shape);
  }
  return "";
}

// Sets k's frames-first shape (virtual CXI layout) where it has one: XTDF per-frame keys;
// JUNGFRAU keys with one entry per train whose first axis is the memory cells.
void frames_first_layout(StackedKeyInfo& k, const DetectorSources& src, const std::string& main_group,
                         uint64_t cells, const Shape& inner) {
  bool slots_ok = true;
  for (const auto& [n, s] : src.modules)
    if (n < src.modnos_start_at || n - src.modnos_start_at >= src.n_modules) slots_ok = false;
  if (!k.error.empty() || !slots_ok) return;
  if (k.per_frame) {
    k.frames_first = true;
    k.frames_first_shape = cat(Shape{k.rows, uint64_t(src.n_modules)}, inner);
  } else if (!src.xtdf && k.group == main_group) {
    if (cells > 1 && !k.file_entry.empty() && k.file_entry[0] == cells) {
      k.frames_first = true;
      k.cells = cells;
      k.frames_first_shape = cat(Shape{k.rows * cells, uint64_t(src.n_modules)},
                                 Shape(k.file_entry.begin() + 1, k.file_entry.end()));
    } else if (cells == 1) {
      k.frames_first = true;
      bool sq = !k.file_entry.empty() && k.file_entry[0] == 1;
      k.frames_first_shape = cat(Shape{k.rows, uint64_t(src.n_modules)},
                                 sq ? Shape(k.file_entry.begin() + 1, k.file_entry.end()) : k.file_entry);
    }
  }
}

}  // namespace

void Detector::init() {
  const size_t M = src_.modules.size();
  auto refuse = [&](const std::string& why) {
    usable_ = false;
    errors_.push_back(why);
  };
  for (const std::string& why : module_clashes(src_)) refuse(why);
  if (!usable_) return;

  // Keys of every module; the main key must be in all of them.
  std::vector<std::string> why;
  const ModuleKeys mod_keys = module_keys(*run_, src_, why);
  for (const std::string& w : why) refuse(w);
  if (!usable_) return;

  const std::string main_group = src_.main_key.substr(0, src_.main_key.find('.'));
  for (const auto& [tid, v] : module_counts(*run_, src_, main_group)) {
    std::set<uint64_t> vals(v.begin(), v.end());
    vals.erase(0);
    if (vals.size() > 1) {
      std::string list;
      for (uint64_t c : vals) list += (list.empty() ? "" : ", ") + std::to_string(c);
      refuse("Inconsistent frame counts for train " + std::to_string(tid) + ": {" + list + "}");
      return;
    }
    if (!vals.empty()) {  // _select_trains(min_modules=1)
      train_ids_.push_back(tid);
      frame_counts_.push_back(*vals.begin());
    }
  }
  if (train_ids_.empty()) {
    refuse("No data found with >= 1 modules present");
    return;
  }
  uint64_t off = 0;
  for (size_t t = 0; t < train_ids_.size(); ++t) {
    frame_offset_.push_back(off);
    perframe_.insert(perframe_.end(), frame_counts_[t], train_ids_[t]);
    off += frame_counts_[t];
  }
  const KeyInfo& eg_main = mod_keys[0].at(src_.main_key);
  if (!src_.xtdf) cells_ = eg_main.entry_shape.empty() ? 1 : eg_main.entry_shape[0];

  // Keys in every module (MultimodDetectorBase.__contains__), described by the first module.
  for (const auto& [name, eg] : mod_keys[0]) {
    if (!eg.is_array) continue;
    StackedKeyInfo k;
    k.name = name;
    k.group = eg.group;
    k.per_frame = src_.xtdf && name.rfind("image.", 0) == 0;
    k.dtype = eg.dtype;
    k.file_entry = eg.entry_shape;
    k.error = module_mismatch(name, eg, mod_keys, src_);
    if (k.error.empty()) {
      auto gm = group_map(k.group, k.per_frame);
      if (!gm->error.empty()) k.error = gm->error;
    }
    k.squeeze = k.per_frame && !k.file_entry.empty() && k.file_entry[0] == 1;
    k.rows = k.per_frame ? perframe_.size() : train_ids_.size();
    Shape inner = k.squeeze ? Shape(k.file_entry.begin() + 1, k.file_entry.end()) : k.file_entry;
    k.shape = cat(Shape{uint64_t(M), k.rows}, inner);
    frames_first_layout(k, src_, main_group, cells_, inner);
    keys_.push_back(std::move(k));
  }
}

std::shared_ptr<const Detector::GroupMap> Detector::group_map(const std::string& group,
                                                              bool per_frame) {
  const std::string id = group + (per_frame ? "/frames" : "/trains");
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = groups_.find(id);
    if (it != groups_.end()) return it->second;
  }
  auto gm = std::make_shared<GroupMap>();
  const size_t M = src_.modules.size();
  gm->pieces.resize(M);
  for (size_t i = 0; i < M && gm->error.empty(); ++i) {
    const std::string& source = src_.modules[i].second;
    auto gi = run_->group_index(source, group);
    std::vector<StackArray::Piece>& P = gm->pieces[i];
    uint64_t r = 0;  // row in the module's key array (blocks in order, empty ones add nothing)
    for (const Block& b : gi->blocks) {
      for (size_t k = 0; k < b.train_ids.size() && gm->error.empty(); ++k) {
        const uint64_t c = b.counts[k], tid = b.train_ids[k];
        if (c == 0) continue;
        auto pos = std::lower_bound(train_ids_.begin(), train_ids_.end(), tid);
        if (pos == train_ids_.end() || *pos != tid) {  // not a detector train: not selected
          r += c;
          continue;
        }
        const size_t t = size_t(pos - train_ids_.begin());
        uint64_t out;
        if (per_frame) {
          if (c != frame_counts_[t]) {
            gm->error = source + " " + group + ": " + std::to_string(c) + " entries for train " +
                        std::to_string(tid) + " where the detector has " +
                        std::to_string(frame_counts_[t]) + " frames";
            break;
          }
          out = frame_offset_[t];
        } else {
          if (c != 1) {
            // _split_align_chunk aligns one entry per train: EXtra-data fails here.
            gm->error = source + " " + group + ": " + std::to_string(c) + " entries for train " +
                        std::to_string(tid) + " (one per train expected; EXtra-data cannot align)";
            break;
          }
          out = t;
        }
        if (!P.empty() && P.back().src_row + P.back().rows == r &&
            P.back().out_row + P.back().rows == out)
          P.back().rows += c;
        else
          P.push_back({r, out, c});
        r += c;
      }
    }
    // Blocks are sorted by first train; trains out of order within a file or the same train
    // twice (data errors) are put in order here, later duplicates left out.
    std::stable_sort(P.begin(), P.end(), [](const StackArray::Piece& a, const StackArray::Piece& b) {
      return a.out_row < b.out_row;
    });
    std::vector<StackArray::Piece> clean;
    for (StackArray::Piece p : P) {
      uint64_t end = clean.empty() ? 0 : clean.back().out_row + clean.back().rows;
      if (!clean.empty() && p.out_row < end) {
        uint64_t skip = std::min(p.rows, end - p.out_row);
        p.out_row += skip;
        p.src_row += skip;
        p.rows -= skip;
        if (p.rows == 0) continue;
      }
      clean.push_back(p);
    }
    P = std::move(clean);
  }
  std::lock_guard<std::mutex> lk(mu_);
  groups_[id] = gm;
  return gm;
}

const StackedKeyInfo& Detector::key(const std::string& name) const {
  for (const StackedKeyInfo& k : keys_)
    if (k.name == name) return k;
  fail(ENOENT, src_.name + ": no stacked key " + name);
}

std::vector<int> Detector::module_labels(StackOrder order) const {
  std::vector<int> out;
  if (order == StackOrder::ModulesFirst) {
    for (const auto& [n, s] : src_.modules) out.push_back(n);
  } else {
    for (int i = 0; i < src_.n_modules; ++i) out.push_back(src_.modnos_start_at + i);
  }
  return out;
}

std::vector<uint8_t> Detector::fill_value(const std::string& name, StackOrder order) const {
  const StackedKeyInfo& k = key(name);
  // write_cxi.py: mask 0xffffffff, data NaN (floats) / 0, everything else 0 (VDS default).
  if (order == StackOrder::FramesFirst && name == src_.mask_key) return all_ones_fill(k.dtype);
  return default_fill(k.dtype);
}

ArrayPtr Detector::array(const std::string& name, StackOrder order) {
  const StackedKeyInfo& k = key(name);
  if (!k.error.empty()) fail(EINVAL, src_.name + " " + name + ": " + k.error);
  if (order == StackOrder::FramesFirst && !k.frames_first)
    fail(EINVAL, src_.name + " " + name + ": no frames-first layout");
  const auto id = std::make_pair(name, order == StackOrder::ModulesFirst ? 0 : 1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = arrays_.find(id);
    if (it != arrays_.end()) return it->second;
  }
  auto gm = group_map(k.group, k.per_frame);
  std::vector<StackArray::Module> mods;
  StackArray::Layout layout;
  layout.entries = k.rows;
  if (order == StackOrder::ModulesFirst) {
    for (size_t i = 0; i < src_.modules.size(); ++i)
      mods.push_back({run_->key_array(src_.modules[i].second, name), gm->pieces[i]});
    layout.squeeze = k.squeeze;
  } else {
    mods.resize(static_cast<size_t>(src_.n_modules));
    for (size_t i = 0; i < src_.modules.size(); ++i)
      mods[static_cast<size_t>(src_.modules[i].first - src_.modnos_start_at)] = {
          run_->key_array(src_.modules[i].second, name), gm->pieces[i]};
    layout.frames_first = true;
    layout.cells = k.cells;
    layout.squeeze = k.per_frame ? k.squeeze
                                 : (k.cells == 1 && !k.file_entry.empty() && k.file_entry[0] == 1);
  }
  std::string what = run_->dir() + ": " + src_.name + " " + name +
                     (order == StackOrder::FramesFirst ? " (frames first)" : "");
  auto a = std::make_shared<StackArray>(std::move(mods), k.file_entry, k.dtype,
                                        fill_value(name, order), layout, what);
  std::lock_guard<std::mutex> lk(mu_);
  arrays_[id] = a;
  return a;
}

std::vector<uint64_t> Detector::row_train_ids(const std::string& name, StackOrder order) const {
  const StackedKeyInfo& k = key(name);
  if (k.per_frame) return perframe_;
  if (order == StackOrder::ModulesFirst || k.cells == 1) return train_ids_;
  std::vector<uint64_t> out;
  for (uint64_t t : train_ids_) out.insert(out.end(), k.cells, t);
  return out;
}

std::vector<uint8_t> Detector::filled(const std::string& name, StackOrder order) {
  const StackedKeyInfo& k = key(name);
  auto gm = group_map(k.group, k.per_frame);
  const uint64_t N = k.rows;
  if (order == StackOrder::ModulesFirst) {
    std::vector<uint8_t> out(src_.modules.size() * N, 1);
    for (size_t m = 0; m < src_.modules.size(); ++m)
      for (const auto& p : gm->pieces[m]) std::fill_n(out.data() + m * N + p.out_row, p.rows, 0);
    return out;
  }
  const uint64_t S = uint64_t(src_.n_modules), C = k.cells;
  std::vector<uint8_t> out(N * C * S, 1);
  for (size_t m = 0; m < src_.modules.size(); ++m) {
    const uint64_t slot = uint64_t(src_.modules[m].first - src_.modnos_start_at);
    for (const auto& p : gm->pieces[m])
      for (uint64_t f = p.out_row * C; f < (p.out_row + p.rows) * C; ++f) out[f * S + slot] = 0;
  }
  return out;
}

std::vector<uint64_t> Detector::inner_ids(const std::string& field) {
  const std::string name = "image." + field;
  if (!src_.xtdf) fail(ENOENT, src_.name + ": no " + field + " per frame (not an XTDF detector)");
  const StackedKeyInfo& k = key(name);
  ArrayPtr a = array(name, StackOrder::ModulesFirst);
  const Shape& s = a->shape();
  if (s.size() != 2)
    fail_data(src_.name + " " + name + ": " + shape_str(s) + " is not one ID per frame");
  const size_t M = s[0], F = s[1], E = k.dtype.itemsize;
  std::vector<uint8_t> bytes(a->nbytes());
  read_bytes(run_->engine(), *a, 0, bytes.size(), bytes.data());
  const bool is_signed = k.dtype.typestr.size() > 1 && k.dtype.typestr[1] == 'i';
  auto value = [&](size_t m, size_t f) -> uint64_t {
    const uint8_t* p = bytes.data() + (m * F + f) * E;
    uint64_t v = 0;
    if (k.dtype.typestr[0] == '>') {
      for (size_t b = 0; b < E; ++b) v = (v << 8) | p[b];
    } else {
      for (size_t b = E; b-- > 0;) v = (v << 8) | p[b];
    }
    if (is_signed && E < 8 && (v >> (8 * E - 1)) & 1) v |= ~0ull << (8 * E);  // sign-extend
    return v;
  };
  auto gm = group_map(k.group, true);
  std::vector<uint8_t> have(M * F, 0);
  for (size_t m = 0; m < M; ++m)
    for (const auto& p : gm->pieces[m]) std::fill_n(have.data() + m * F + p.out_row, p.rows, 1);
  // _collect_inner_ids: NO_PULSE_ID = 9999 where no module has data, min over modules; then
  // 9999 -> 0 and min must equal max.
  constexpr uint64_t NO_ID = 9999;
  std::vector<uint64_t> out(F);
  for (size_t f = 0; f < F; ++f) {
    uint64_t mn = NO_ID, mx = 0;  // module slots without data hold NO_ID (then 0)
    for (size_t m = 0; m < M; ++m) {
      if (!have[m * F + f]) continue;
      uint64_t v = value(m, f);
      mn = std::min(mn, v);
      mx = std::max(mx, v == NO_ID ? 0 : v);
    }
    if (mn == NO_ID) fail_data(src_.name + ": Failed to find " + field + " for some data");
    if (mn != mx)
      fail_data(src_.name + ": Inconsistent " + field + " for different modules (frame " +
                std::to_string(f) + " of train " + std::to_string(perframe_[f]) + ")");
    out[f] = mn;
  }
  return out;
}

}  // namespace h5d::euxfel
