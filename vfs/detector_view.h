// Detector views inside a run view: every multi-module detector EXtra-data recognises in the
// run (core/euxfel/detector.h) gets its stacked keys in the directory named after it, beside the
// module sources (which keep their own directories below it):
//
//   RUN/<detector>/detector.json              class, modules, sources, trains, frames, keys, errors
//   RUN/<detector>/KEY.npy|.raw|.json          DETECTOR(run)[KEY].ndarray(): (modules, rows, ...)
//   RUN/<detector>/.train_ids/<group>.npy      train ID of every row
//   RUN/<detector>/.filled/<group>.npy         bool (modules, rows): True where filled
//   RUN/<detector>/.pulse_ids/image.npy        XTDF: pulse ID of every frame (pulse_id_coordinates)
//   RUN/<detector>/.cell_ids/image.npy         XTDF: memory cell of every frame
//   RUN/<detector>/frames_first/...            the same for the virtual CXI layout
//                                              (frames, module slots, ...)
// Layout and JSON contents: docs/euxfel.md ("Detector views").
#pragma once
#include <memory>
#include <vector>

#include "core/euxfel/detector.h"
#include "vfs/tree.h"

namespace h5d::vfs {

// The directory node of one detector; `subdirs` are the entries of the source-name tree below it
// (DET/, CORR/, ...), listed first. The detector is opened when the directory is listed.
NodePtr make_detector_dir(const TreeContext& ctx, std::shared_ptr<euxfel::Run> run,
                          euxfel::DetectorSources det, std::vector<ChildEntry> subdirs,
                          const NodeMeta& dir_meta, const NodeMeta& file_meta);

}  // namespace h5d::vfs
