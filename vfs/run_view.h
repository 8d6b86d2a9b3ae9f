// The EuXFEL run view: a directory recognised as a run (sequence files named
// <CLASS>-R####-<AGG>-S#####.h5) is shown as RUN/SOURCE/KEY.{npy,raw,json}, every key being the
// whole run's array (core/euxfel/run.h). Layout and JSON contents: docs/euxfel.md.
//
//   RUN/run.json                       run metadata, sources, files, data errors
//   RUN/trainId.npy                    the run's train IDs (sorted union)
//   RUN/<source path>/                 '/' in source names are directories
//       KEY.npy KEY.raw KEY.json       the key over the run (KEY.json only for non-arrays)
//       .train_ids/<group>.npy         train ID of every row of the keys of index group <group>
//                                      (CONTROL sources: .train_ids/control.npy)
//       .run_values.json               RUN section values (CONTROL sources)
//   legacy source names (corrected data's <det>/DET/<n>CH0:xtdf) are symbolic links to the
//   canonical source directory.
//   RUN/<detector>/                    a multi-module detector (AGIPD, LPD, DSSC, JUNGFRAU): its
//                                      stacked keys beside the module source directories
//                                      (vfs/detector_view.h)
//
// Nothing is opened at mount time: the run's files are opened when the run directory is first
// looked up or listed; a source's keys and INDEX when that source's directory is listed.
#pragma once
#include "vfs/tree.h"

namespace h5d::vfs {

// The factory for Vfs::add_provider_factory; empty when opts.run_view is Off or PerFile.
ProviderFactory make_run_view_factory(const VfsOptions& opts);

}  // namespace h5d::vfs
