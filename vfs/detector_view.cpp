#include "vfs/detector_view.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "vfs/npy.h"
#include "vfs/sidecar.h"

namespace h5d::vfs {
namespace {

using euxfel::Detector;
using euxfel::StackedKeyInfo;
using euxfel::StackOrder;
using nlohmann::json;

constexpr const char* kFramesFirst = "frames_first";

DType u64_dtype() {
  DType t;
  t.typestr = "<u8";
  t.itemsize = 8;
  return t;
}

DType bool_dtype() {
  DType t;
  t.typestr = "|b1";
  t.itemsize = 1;
  return t;
}

// A small computed array (train IDs, fill masks, pulse IDs): computed when the file is opened.
NodePtr computed_file(const TreeContext& ctx, Shape shape, DType dtype, std::string what,
                      std::function<std::vector<uint8_t>()> compute, const NodeMeta& meta) {
  ArraySpec spec;
  spec.shape = shape;
  spec.dtype = dtype;
  spec.what = what;
  spec.read_path = "memory";
  spec.loader = [shape, dtype, what, compute]() -> ArrayPtr {
    return std::make_shared<MemoryArray>(shape, dtype, compute(), what);
  };
  return make_array_file(ctx, ArrayFormat::Npy, std::move(spec), meta);
}

std::vector<uint8_t> u64_bytes(const std::vector<uint64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());  // little-endian host
  return b;
}

json fill_json(const std::vector<uint8_t>& fill, const DType& t) {
  bool ones = !fill.empty(), zeros = true;
  for (uint8_t b : fill) {
    ones = ones && b == 0xff;
    zeros = zeros && b == 0;
  }
  if (zeros) return 0;
  if (t.typestr.size() > 1 && t.typestr[1] == 'f') return "NaN";
  if (ones && t.itemsize <= 8)
    return t.itemsize == 8 ? json(~0ull) : json((1ull << (8 * t.itemsize)) - 1);
  return nullptr;
}

std::string group_file(const std::string& group) { return group + ".npy"; }

class DetectorDirProvider final : public DirProvider {
 public:
  DetectorDirProvider(const TreeContext& ctx, std::shared_ptr<euxfel::Run> run,
                      euxfel::DetectorSources det, std::vector<ChildEntry> subdirs,
                      NodeMeta dmeta, NodeMeta fmeta)
      : ctx_(ctx), run_(std::move(run)), src_(std::move(det)), subdirs_(std::move(subdirs)),
        dmeta_(dmeta), fmeta_(fmeta) {}

  // The module directories (DET/, CORR/) are known without opening the detector.
  NodePtr find_unlisted(const std::string& name) override {
    for (const ChildEntry& c : subdirs_)
      if (c.name == name) return c.node;
    return nullptr;
  }

  std::vector<ChildEntry> list() override {
    std::vector<ChildEntry> out = subdirs_;
    std::shared_ptr<Detector> det;
    std::string open_error;
    try {
      det = Detector::open(run_, src_);
    } catch (const std::exception& e) {
      open_error = e.what();
      log::warn("detector view: " + run_->dir() + ": " + src_.name + ": " + open_error);
    }
    euxfel::DetectorSources src = src_;
    out.push_back({"detector.json", make_text_file(
                                        [src, det, open_error] {
                                          return json_text(detector_json(src, det.get(), open_error));
                                        },
                                        fmeta_)});
    if (!det || !det->usable()) return out;
    add_layout(out, det, StackOrder::ModulesFirst);
    std::vector<ChildEntry> ff;
    add_layout(ff, det, StackOrder::FramesFirst);
    if (!ff.empty()) out.push_back({kFramesFirst, make_dir_node(dmeta_, std::move(ff))});
    return out;
  }

 private:
  static json detector_json(const euxfel::DetectorSources& src_, const Detector* det,
                            const std::string& open_error) {
    json j;
    j["detector"] = src_.name;
    j["detector_class"] = src_.cls;
    j["extra_data"] = src_.cls + "(run, detector_name='" + src_.name + "')";
    j["n_modules"] = src_.n_modules;
    j["source_kind"] = src_.corrected_names ? "CORR" : "DET";
    json mods = json::array();
    for (const auto& [n, s] : src_.modules) mods.push_back({{"module", n}, {"source", s}});
    j["modules"] = mods;
    json errors = json::array();
    if (!open_error.empty()) errors.push_back(open_error);
    if (det) {
      for (const std::string& e : det->errors()) errors.push_back(e);
      j["usable"] = det->usable();
      j["train_count"] = det->train_ids().size();
      j["frame_count"] = det->train_ids_perframe().size();
      if (!det->train_ids().empty()) {
        j["first_train"] = det->train_ids().front();
        j["last_train"] = det->train_ids().back();
      }
      std::map<uint64_t, uint64_t> hist;
      for (uint64_t c : det->frame_counts()) ++hist[c];
      json fc = json::object();
      for (const auto& [c, n] : hist) fc[std::to_string(c)] = n;
      j["frames_per_train"] = fc;  // frames per train -> number of trains
      if (!src_.xtdf) j["frames_per_entry"] = det->frames_per_entry();
      json keys = json::object(), skipped = json::object();
      for (const StackedKeyInfo& k : det->keys()) {
        if (!k.error.empty()) {
          skipped[k.name] = k.error;
          continue;
        }
        json kj;
        kj["shape"] = k.shape;
        if (k.frames_first) kj["frames_first_shape"] = k.frames_first_shape;
        keys[k.name] = kj;
      }
      j["keys"] = keys;
      j["keys_not_stacked"] = skipped;
    } else {
      j["usable"] = false;
    }
    j["errors"] = errors;
    return j;
  }

  json key_json(const Detector& det, const StackedKeyInfo& k, StackOrder order) const {
    const bool ff = order == StackOrder::FramesFirst;
    json j;
    j["detector"] = src_.name;
    j["detector_class"] = src_.cls;
    j["key"] = k.name;
    j["layout"] = ff ? "frames_first" : "modules_first";
    j["extra_data"] = ff ? src_.cls + "(run).write_virtual_cxi() layout (frames, module slots, ...)"
                         : src_.cls + "(run)['" + k.name + "'].ndarray()";
    Shape shape = ff ? k.frames_first_shape : k.shape;
    j["shape"] = shape;
    j["dtype"] = dtype_descr_json(k.dtype);
    j["npy_data_offset"] = npy_header(k.dtype, shape).size();
    std::vector<std::string> axes;
    std::string row_axis = k.per_frame ? "train_pulse" : "trainId";
    if (ff) {
      axes = {"frame", "module"};
    } else {
      axes = {"module", row_axis};
    }
    for (size_t i = 2; i < shape.size(); ++i) axes.push_back("dim_" + std::to_string(i - 2));
    j["axes"] = axes;
    j["fill_value"] = fill_json(det.fill_value(k.name, order), k.dtype);
    j["modules"] = det.module_labels(order);
    json sources = json::array();
    std::map<int, std::string> by_mod(src_.modules.begin(), src_.modules.end());
    for (int m : det.module_labels(order))
      sources.push_back(by_mod.count(m) ? json(by_mod[m]) : json(nullptr));
    j["sources"] = sources;
    j["index_group"] = k.group;
    j["entry_shape_in_files"] = k.file_entry;
    j["length_1_axis_dropped"] =
        ff && !k.per_frame ? (k.cells == 1 && !k.file_entry.empty() && k.file_entry[0] == 1)
                           : k.squeeze;
    if (ff && k.cells > 1) j["cells_per_entry"] = k.cells;
    j["rows"] = shape[ff ? 0 : 1];
    j["train_ids"] = std::string(".train_ids/") + group_file(k.group);
    j["filled"] = std::string(".filled/") + group_file(k.group);
    if (k.per_frame) {
      j["pulse_ids"] = ".pulse_ids/image.npy";
      j["cell_ids"] = ".cell_ids/image.npy";
    }
    j["frames_first"] = ff ? json(nullptr)
                           : k.frames_first ? json(std::string(kFramesFirst) + "/" + k.name + ".npy")
                                            : json(nullptr);
    return j;
  }

  void add_layout(std::vector<ChildEntry>& out, const std::shared_ptr<Detector>& det,
                  StackOrder order) const {
    const bool ff = order == StackOrder::FramesFirst;
    std::map<std::string, const StackedKeyInfo*> groups;
    bool any = false;
    for (const StackedKeyInfo& k0 : det->keys()) {
      if (!k0.error.empty() || (ff && !k0.frames_first)) continue;
      any = true;
      groups.emplace(k0.group, &k0);
      const std::string text = json_text(key_json(*det, k0, order));
      ArraySpec spec;
      spec.shape = ff ? k0.frames_first_shape : k0.shape;
      spec.dtype = k0.dtype;
      spec.what = run_->dir() + ": " + src_.name + " " + k0.name + (ff ? " (frames first)" : "");
      spec.read_path = "direct (stacked modules)";
      std::string key = k0.name;
      spec.loader = [det, key, order] { return det->array(key, order); };
      out.push_back({k0.name + ".npy", make_array_file(ctx_, ArrayFormat::Npy, spec, fmeta_)});
      out.push_back({k0.name + ".raw", make_array_file(ctx_, ArrayFormat::Raw, std::move(spec), fmeta_)});
      out.push_back({k0.name + ".json", make_text_file([text] { return text; }, fmeta_)});
    }
    if (!any) return;
    std::vector<ChildEntry> tids, filled, pulses, cells;
    const std::string base = run_->dir() + ": " + src_.name + (ff ? " frames first " : " ");
    for (const auto& [g, kp] : groups) {
      const std::string key = kp->name;
      std::vector<uint64_t> rt = det->row_train_ids(key, order);
      const uint64_t rows = rt.size();
      tids.push_back({group_file(g), computed_file(ctx_, Shape{rows}, u64_dtype(),
                                                   base + g + " train IDs",
                                                   [det, key, order] {
                                                     return u64_bytes(det->row_train_ids(key, order));
                                                   },
                                                   fmeta_)});
      const uint64_t slots = ff ? uint64_t(src_.n_modules) : uint64_t(src_.modules.size());
      Shape fshape = ff ? Shape{rows, slots} : Shape{slots, rows};
      filled.push_back({group_file(g), computed_file(ctx_, fshape, bool_dtype(),
                                                     base + g + " filled entries",
                                                     [det, key, order] { return det->filled(key, order); },
                                                     fmeta_)});
      if (kp->per_frame) {
        for (auto [field, list] : {std::make_pair("pulseId", &pulses), std::make_pair("cellId", &cells)}) {
          bool have = false;
          for (const StackedKeyInfo& x : det->keys())
            have = have || (x.name == std::string("image.") + field && x.error.empty());
          if (!have) continue;
          std::string f = field;
          list->push_back({group_file(g), computed_file(ctx_, Shape{rows}, u64_dtype(),
                                                        base + g + " " + f + " per frame",
                                                        [det, f] { return u64_bytes(det->inner_ids(f)); },
                                                        fmeta_)});
        }
      }
    }
    out.push_back({".train_ids", make_dir_node(dmeta_, std::move(tids))});
    out.push_back({".filled", make_dir_node(dmeta_, std::move(filled))});
    if (!pulses.empty()) out.push_back({".pulse_ids", make_dir_node(dmeta_, std::move(pulses))});
    if (!cells.empty()) out.push_back({".cell_ids", make_dir_node(dmeta_, std::move(cells))});
  }

  const TreeContext& ctx_;
  std::shared_ptr<euxfel::Run> run_;
  euxfel::DetectorSources src_;
  std::vector<ChildEntry> subdirs_;
  NodeMeta dmeta_, fmeta_;
};

}  // namespace

NodePtr make_detector_dir(const TreeContext& ctx, std::shared_ptr<euxfel::Run> run,
                          euxfel::DetectorSources det, std::vector<ChildEntry> subdirs,
                          const NodeMeta& dir_meta, const NodeMeta& file_meta) {
  return std::make_shared<DirNode>(
      dir_meta, std::make_unique<DetectorDirProvider>(ctx, std::move(run), std::move(det),
                                                      std::move(subdirs), dir_meta, file_meta));
}

}  // namespace h5d::vfs
