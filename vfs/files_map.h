// EXtra-data's run files map (extra_data/run_files_map.py, RunFilesMap): the JSON file
// EXtra-data writes the first time anyone opens a run, holding per sequence file its train IDs,
// sources, legacy names and suspect trains, with the file's size and mtime. A run view uses it
// as EXtra-data does, so that listing a run opens none of the files it describes
// (docs/euxfel.md, "Files map").
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/euxfel/run.h"

namespace h5d::vfs {

// Where EXtra-data looks for the map of run directory `dir`, in its order: `dir`/
// karabo_data_map.json, then for a run at `<proposal>/(raw|proc)/rNNNN`
// `<proposal>/scratch/.karabo_data_maps/<raw|proc>_rNNNN.json`, and for the Maxwell layout
// `.../(raw|proc|red|open)/<instrument>/<cycle>/<proposal>/rNNNN` the proposal's scratch folder
// below /gpfs/exfel/exp (as EXtra-data's SCRATCH_ROOT_DIR).
std::vector<std::string> files_map_candidates(const std::string& dir);

// The entries of the newest readable map (by mtime) that are valid now: every key EXtra-data's
// RunFilesMap.expected_cache_keys names present and well typed, and the file's size and mtime
// (st_mtime as Python computes it) equal to the entry's. Invalid entries are left out (their
// files are then read); a map that is not JSON, not a list, or larger than kMaxFilesMapBytes is
// ignored with one log line. nullptr when no map gives any valid entry. Never throws.
std::shared_ptr<const euxfel::KnownFiles> read_files_map(const std::string& dir, std::string* used = nullptr);

// Larger maps are not read (a map of 340 files of 3,000 trains each is about 20 MB).
constexpr size_t kMaxFilesMapBytes = size_t{64} << 20;

// Parses one map's text against the files of `dir` (the part of read_files_map after reading).
// `why`: why the whole map was ignored (empty when it was not); `left_out`: entries left out.
euxfel::KnownFiles parse_files_map(const std::string& dir, const std::string& text, std::string* why,
                                   size_t* left_out = nullptr);

}  // namespace h5d::vfs
