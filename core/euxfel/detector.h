// Multi-module detectors of a run (AGIPD-1M, AGIPD-500K, DSSC-1M, LPD-1M, JUNGFRAU) as EXtra-data's
// extra_data/components.py sees them: the detectors found by their source names, their modules,
// the trains and frames they share, and every key of all modules as one StackArray:
//
//   modules first   DETECTOR(run)[key].ndarray()  (default arguments: all pulses, no module
//                   gaps, fill NaN for floats and 0 otherwise): XTDF image.* keys are
//                   (modules, frames) + entry (a leading length-1 entry axis dropped), other keys
//                   (modules, trains) + entry
//   frames first    the layout of DETECTOR(run).write_virtual_cxi(): (frames, n_modules) + entry,
//                   every module slot of the detector (missing ones filled), JUNGFRAU memory
//                   cells folded into the frame axis
//
// Semantics followed (components.py): MultimodDetectorBase._find_detector_names /
// _identify_sources (CORR names preferred, else DET; module number from the name), __init__
// (counts of the main key per module and train, one common non-zero count per train or the
// detector is refused), _select_trains (min_modules=1: trains where any module has data),
// train_ids_perframe, _split_align_chunk (a module's rows go to its train's rows in the output),
// MultimodKeyData / XtdfImageMultimodKeyData.ndarray (_out_array fill), _collect_inner_ids
// (pulse / cell IDs per frame), JUNGFRAU (modules from 1, n_modules from the highest module
// number, frames per entry from data.adc), write_cxi.py (VirtualCXIWriterBase._map_chunk,
// fill values: data NaN/0, mask 0xffffffff, others 0).
//
// No JSON here; the view is vfs/detector_view.cpp. Thread safety: all methods may be called
// concurrently (lazy state under mu_; never held while reading bulk data).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/array/array.h"
#include "core/euxfel/run.h"
#include "core/array/stack_array.h"

namespace h5d::euxfel {

// One detector found in a run by its source names (no I/O).
struct DetectorSources {
  std::string name;         // "SPB_DET_AGIPD1M-1"
  std::string cls;          // "AGIPD1M", "AGIPD500K", "DSSC1M", "LPD1M", "JUNGFRAU"
  bool xtdf = true;         // AGIPD, DSSC, LPD: pulses along the first axis of image.*
  std::string main_key;     // "image.data" / "data.adc"
  std::string mask_key;     // "image.mask" / "data.mask"
  int n_modules = 0;        // module slots (16, 8; JUNGFRAU: highest module number)
  int modnos_start_at = 0;  // 0, JUNGFRAU 1
  bool corrected_names = false;  // <det>/CORR/... sources (preferred by EXtra-data)
  std::vector<std::pair<int, std::string>> modules;  // (module number, source), sorted
};

// EXtra-data's identify_multimod_detectors() over the run's instrument sources (legacy names
// left out), with each detector's sources as _identify_sources(raw=None) picks them.
std::vector<DetectorSources> find_detectors(const std::vector<std::string>& instrument_sources);

enum class StackOrder { ModulesFirst, FramesFirst };

struct StackedKeyInfo {
  std::string name, group;
  bool per_frame = false;     // XTDF image.*: rows are frames (train_ids_perframe)
  DType dtype;                // of the lowest-numbered module (_eg_keydata)
  Shape file_entry;           // one row's shape in the files
  bool squeeze = false;       // leading length-1 entry axis dropped (XtdfImage _extraneous_dim)
  uint64_t rows = 0;          // frames or trains
  Shape shape;                // modules first
  bool frames_first = false;  // a frames-first (CXI) variant exists
  Shape frames_first_shape;
  uint64_t cells = 1;         // JUNGFRAU frames per entry folded into the frames-first frame axis
  std::string error;          // non-empty: EXtra-data could not give this array; not offered
};

class Detector {
 public:
  // Reads the main key's INDEX of every module (Run::group_index) and every module's key list.
  static std::shared_ptr<Detector> open(std::shared_ptr<Run> run, DetectorSources sources);

  const DetectorSources& sources() const { return src_; }
  // False when EXtra-data refuses the detector (inconsistent frame counts, a module without the
  // main key, no data at all); errors() says why and no key is offered.
  bool usable() const { return usable_; }
  const std::vector<std::string>& errors() const { return errors_; }

  const std::vector<uint64_t>& train_ids() const { return train_ids_; }     // det.train_ids
  const std::vector<uint64_t>& frame_counts() const { return frame_counts_; }  // per train
  const std::vector<uint64_t>& train_ids_perframe() const { return perframe_; }
  uint64_t frames_per_entry() const { return cells_; }  // JUNGFRAU memory cells (else 1)

  const std::vector<StackedKeyInfo>& keys() const { return keys_; }  // sorted by name
  const StackedKeyInfo& key(const std::string& name) const;   // throws Error(ENOENT)

  // The stacked key (opened lazily: module datasets are opened on the first read touching them).
  ArrayPtr array(const std::string& key, StackOrder order);
  // Train ID of every row (frames first: every frame) of the key.
  std::vector<uint64_t> row_train_ids(const std::string& key, StackOrder order) const;
  // 1 where the entry is filled (no module data), as the array's first two axes.
  std::vector<uint8_t> filled(const std::string& key, StackOrder order);
  // Module labels of the module axis (modules first: modules with data; frames first: every slot).
  std::vector<int> module_labels(StackOrder order) const;
  // The fill value element (bytes) of the key in that layout.
  std::vector<uint8_t> fill_value(const std::string& key, StackOrder order) const;
  // XtdfImageMultimodKeyData.pulse_id_coordinates() / cell_id_coordinates() ("pulseId" /
  // "cellId"): one ID per frame, read from every module's image.<field>. Throws Error(EIO) as
  // EXtra-data raises (inconsistent IDs between modules, frames without IDs).
  std::vector<uint64_t> inner_ids(const std::string& field);

 private:
  Detector(std::shared_ptr<Run> run, DetectorSources sources);
  void init();
  // Pieces of every module (module-axis order of ModulesFirst) for the rows of `group`.
  struct GroupMap {
    std::vector<std::vector<StackArray::Piece>> pieces;  // per module
    std::string error;
  };
  std::shared_ptr<const GroupMap> group_map(const std::string& group, bool per_frame);

  std::shared_ptr<Run> run_;
  DetectorSources src_;
  bool usable_ = true;
  std::vector<std::string> errors_;
  std::vector<uint64_t> train_ids_, frame_counts_, perframe_, frame_offset_;
  uint64_t cells_ = 1;
  std::vector<StackedKeyInfo> keys_;
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf: guards groups_, arrays_
  std::map<std::string, std::shared_ptr<const GroupMap>> groups_;
  std::map<std::pair<std::string, int>, ArrayPtr> arrays_;
};

}  // namespace h5d::euxfel
