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
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "vfs/tree.h"

namespace h5d {
class Engine;
class H5Files;
}
namespace h5d::euxfel {
class Run;
}

namespace h5d::vfs {

// The factory for Vfs::add_provider_factory; empty when opts.run_view is Off. PerFile: every file
// of a run directory is also shown in its plain per-file view, beside the run view.
ProviderFactory make_run_view_factory(const VfsOptions& opts);

// Run directory `dir` opened as a run view opens it: the options that apply (inc_suspect_trains)
// and EXtra-data's files map (vfs/files_map.h: the files it describes are not opened to list the
// run). `h5direct info` opens a run directory the same way.
std::shared_ptr<euxfel::Run> open_run(H5Files& files, const std::string& dir, const VfsOptions& opts);

// run.json (docs/euxfel.md): Run::metadata() plus every source's keys (shape, entry shape,
// dtype, index group), trains with data per index group and per source, and the names of the
// train ID / timestamp / flag files. Reads every source's key list (one file each).
nlohmann::json run_summary_json(euxfel::Run& run);
// The text EXtra-data 1.24's DataCollection.info() prints (what `lsxfel RUN` prints after its
// first line), from a run_summary_json() (vfs/run_info.cpp): trains, XTDF detector modules,
// instrument and control sources with similar names grouped; `details`: every source on its
// own with its keys, as info(details_for_sources=['*']).
std::string run_info_text(const nlohmann::json& summary, bool details);
// lsxfel's line for a run in a folder of runs ("  r0001 : Run of   64 trains, with   2 detector
// files and   2 others"), followed by its sources and the size of its files, from its run.json.
std::string run_line_text(const nlohmann::json& summary, const std::string& name);

}  // namespace h5d::vfs
