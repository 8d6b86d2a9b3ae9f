// A European XFEL run (EXDF) as EXtra-data combines it: every source / key across all sequence
// files as one Array, with the train ID of every row. The semantics follow EXtra-data
// (extra_data/reader.py, sourcedata.py, keydata.py, file_access.py, voview.py); docs/euxfel.md
// lists them and where h5direct differs (errors are reported instead of raised).
//
// Cost model: Run::open lists the directory and reads what listing the run needs of every
// sequence file: train IDs, validity flags, sources and legacy names. A file that
// RunOptions::known describes (EXtra-data's files map, vfs/files_map.h) is not opened at all;
// each other file is one request to an HDF5 helper (INDEX/trainId, INDEX/flag, METADATA
// version and source list), the helpers working at once. What only a source needs (its INDEX
// first/count arrays in each of its files) is read when the source is first used, from all its
// files at once; the format version and METADATA values of files the map described are read
// when run.json (metadata()) or format_version() asks. Per source the key list and dataset
// metadata are read from one file on first use; a key's per-file dataset arrays are opened on
// its first read. Nothing reads bulk data until a key is read.
//
// Thread safety: all public methods may be called concurrently; lazily built state is guarded
// by Run::mu_ (never held while reading bulk data; taken before the HDF5 lock, never after).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/array/array.h"
#include "core/vocab/dtype.h"
#include "core/vocab/value.h"

namespace h5d {
class Engine;
class H5Files;
class H5File;
}  // namespace h5d

namespace h5d::euxfel {

// True for names like RAW-R0338-AGIPD00-S00001.h5 / CORR-R0001-DA01-S00000.h5.
bool is_sequence_file_name(const std::string& basename);
// True when the file has the INDEX and METADATA groups of the EuXFEL format.
bool is_run_file(H5File& f);
// Cheap check on names only (no file opened): the directory holds at least one .h5 file named
// like a sequence file. Directories with other EuXFEL-like .h5 files are found by
// looks_like_run_dir_deep (opens one file's metadata).
bool looks_like_run_dir(const std::string& dir);
bool looks_like_run_dir_deep(H5Files& files, const std::string& dir);

// The virtual overview file that EXtra-data would use for `dir` (voview.find_file_valid):
// `dir/overview.h5` or `<proposal>/usr/.extra_data/{RAW,PROC}-R####-OVERVIEW.h5`, valid when its
// attribute virtual_overview_version <= 1 and `.source_files/{names,sizes}` equal the .h5 files
// now in `dir` (except overview.h5) and their sizes. "" when there is none.
std::string find_valid_overview(H5Files& files, const std::string& dir, std::string* why_not = nullptr);

// What EXtra-data's files map (karabo_data_map.json, RunFilesMap) says of one sequence file,
// already checked against the file on disk (size and mtime): the file need not be opened to
// list the run.
struct KnownFile {
  std::vector<uint64_t> train_ids;  // INDEX/trainId, zeros removed
  std::vector<uint8_t> valid;       // one per train (suspect_train_indices are 0)
  std::vector<std::string> control_sources, instrument_sources;  // instrument: legacy names too
  std::map<std::string, std::string> legacy;                      // legacy -> canonical source
};
// By file base name.
using KnownFiles = std::map<std::string, KnownFile>;

struct RunOptions {
  // EXtra-data's RunDirectory default (True since 1.x): trains flagged invalid in INDEX/flag
  // (or out of sequence in format 0.5 files) are kept.
  bool inc_suspect_trains = true;
  // Build the run from a valid virtual overview file when there is one (one file to open).
  bool use_overview = true;
  // Files described by a files map (nullptr: none): these are not opened by Run::open.
  std::shared_ptr<const KnownFiles> known;
};

enum class Section { Control, Instrument };

// One key of one source, as far as it is known without reading its data.
struct KeyInfo {
  std::string name;       // "image.data", "pulseEnergy.photonFlux.value"
  std::string dset_path;  // "/INSTRUMENT/<source>/image/data" (source = canonical name)
  std::string group;      // index group: first component for INSTRUMENT, "" for CONTROL
  bool is_array = true;   // false: strings, references, ... (why_not_array says what)
  std::string why_not_array;
  std::string hdf5_type;
  DType dtype;
  Shape entry_shape;                                  // shape of one row
  uint64_t rows = 0;                                  // rows over the whole run
  std::vector<std::pair<std::string, Value>> attrs;  // EXtra-data's KeyData.attributes()
  Value small_value;  // non-arrays: the first file's value when small (else Null)
};

// Where one block of rows comes from.
struct Block {
  size_t file = 0;        // index into Run::files()
  uint64_t first = 0;     // first row in that file's datasets
  uint64_t rows = 0;      // sum of counts
  uint64_t train0 = 0;    // first train ID of the block (sort key)
  std::vector<uint64_t> train_ids, counts;
};

struct GroupIndex {
  std::vector<Block> blocks;  // sorted by first train ID, empty blocks included (as EXtra-data)
  uint64_t rows = 0;
  ArrayPtr row_train_ids;     // uint64 per row: KeyData.train_id_coordinates()
  std::vector<uint64_t> counts_per_run_train;  // data count for each Run::train_ids() entry
  std::vector<std::string> errors;
};

// INDEX first/count of one (source, index group) in one file, cut to the file's train count
// (old first/last/status indexes already converted), or the error met reading it.
struct FileIndex {
  std::vector<uint64_t> firsts, counts;
  std::string error;  // non-empty: could not be read
};

struct SequenceFile {
  std::string path, name;   // absolute path, base name
  uint64_t size = 0;
  std::string format_version;  // "0.5" when METADATA/dataFormatVersion is absent
  std::vector<uint64_t> train_ids;  // INDEX/trainId, zeros removed
  std::vector<uint8_t> valid;       // validity flag per train (see RunOptions)
  std::vector<std::string> control_sources, instrument_sources;
  std::map<std::string, std::string> legacy;  // legacy source name -> canonical name
  // Index groups named in METADATA per canonical source ("" for CONTROL sources).
  std::map<std::string, std::vector<std::string>> source_groups;
  // INDEX arrays read while the file was open at Run::open, keyed by INDEX path
  // ("/INDEX/<source>[/<group>]"). Groups not found here are read on first use.
  // Filled on first use under Run::mu_ (Run::fetch_index_locked).
  std::map<std::string, std::shared_ptr<const FileIndex>> index;
  // True when described by the files map: format_version and source_groups are read from the
  // file only when asked (Run::load_details).
  bool from_map = false;
};

class Run;

class Source {
 public:
  const std::string& name() const { return name_; }
  Section section() const { return section_; }
  bool is_control() const { return section_ == Section::Control; }
  // Legacy name (corrected data's <det>/DET/<n>CH0:xtdf): the canonical source; else "".
  const std::string& alias_of() const { return alias_of_; }
  const std::vector<size_t>& files() const { return files_; }  // indexes into Run::files()
  // Train IDs that occur in more than one of this source's files (or twice in one file):
  // a data error EXtra-data refuses to open. The arrays keep every row, in EXtra-data's order.
  const std::vector<uint64_t>& duplicate_trains() const { return duplicates_; }

 private:
  friend class Run;
  std::string name_;
  Section section_ = Section::Control;
  std::string alias_of_;
  std::vector<size_t> files_;
  std::vector<uint64_t> duplicates_;
  // Lazily filled under Run::mu_:
  bool keys_loaded_ = false;
  std::vector<KeyInfo> keys_;  // sorted by name
  std::string keys_error_;
  std::map<std::string, std::shared_ptr<const GroupIndex>> groups_;
  std::map<std::string, ArrayPtr> arrays_;
  bool infos_asked_ = false;  // every key's dataset metadata in every file asked for (key_row_blocks)
};

class Run {
 public:
  // Opens the run in `dir`. Throws Error(ENOENT) when it holds no readable sequence file.
  static std::shared_ptr<Run> open(H5Files& files, const std::string& dir, RunOptions opts = {});

  const std::string& dir() const { return dir_; }
  const RunOptions& options() const { return opts_; }
  Engine& engine() const;
  H5Files& h5files() const { return h5files_; }
  // The overview file the run was built from ("" when built from the sequence files).
  const std::string& overview() const { return overview_; }
  const std::vector<SequenceFile>& files() const { return files_; }
  // Sorted union of the files' train IDs (valid ones only without inc_suspect_trains).
  const std::vector<uint64_t>& train_ids() const { return train_ids_; }
  ArrayPtr train_ids_array() const { return train_ids_array_; }
  // From the first file's METADATA (read then, for a run listed from a files map), file names
  // and the path. -1 when unknown.
  int64_t proposal() const;
  int64_t run_number() const;
  std::string format_version() const;
  // How many of files() the files map described (not opened to list the run).
  size_t files_from_map() const { return files_from_map_; }

  std::vector<std::string> source_names() const;  // sorted
  const Source& source(const std::string& name) const;  // throws Error(ENOENT)
  bool has_source(const std::string& name) const { return sources_.count(name) != 0; }

  // Keys of a source, sorted by name (reads one file's tree on first use). Throws on I/O errors.
  std::vector<KeyInfo> keys(const std::string& source);
  KeyInfo key(const std::string& source, const std::string& key);  // throws Error(ENOENT)
  // Index groups of a source (INSTRUMENT: the key prefixes; CONTROL: {""}).
  std::vector<std::string> index_groups(const std::string& source);
  // The row layout of (source, group) over the run.
  std::shared_ptr<const GroupIndex> group_index(const std::string& source, const std::string& group);
  // The whole key as one array (EXtra-data's run[source, key].ndarray()); the per-file datasets
  // are opened on its first read. Throws Error(EINVAL) for non-array keys.
  ArrayPtr key_array(const std::string& source, const std::string& key);
  // The train ID of every row of the key (KeyData.train_id_coordinates()).
  ArrayPtr key_train_ids(const std::string& source, const std::string& key);

  // How a key's rows are stored: in row order, each run of rows that is one run of rows of one
  // file's dataset (EXtra-data's blocks of a file, merged where they continue each other), with
  // its trains and the dataset's chunk extent along rows (the file's own dataset metadata:
  // asked of every file of the key at once, one HDF5 helper request per helper).
  struct RowBlock {
    size_t file = 0;                      // index into files()
    uint64_t row = 0, rows = 0;           // the key's rows [row, row + rows)
    uint64_t first = 0;                   // ... are the dataset's rows [first, first + rows)
    uint64_t first_train = 0, last_train = 0;
    uint64_t chunk_rows = 0;              // 0: not chunked
    std::string error;                    // the dataset's metadata could not be read (chunk_rows 0)
  };
  std::vector<RowBlock> key_row_blocks(const std::string& source, const std::string& key);

  // Per run train (train_ids()), as EXtra-data's run.train_timestamps(): INDEX/timestamp (ns
  // since the epoch, UTC) from the first file (name order) holding the train, NaT (INT64_MIN)
  // where none has one (format 0.5 files have none); dtype <M8[ns]. Reads every file's
  // INDEX/timestamp on the first call (one read each).
  ArrayPtr train_timestamps_array();
  // Per run train: 1 where some file holding it marks it valid (INDEX/flag as
  // FileAccess.validity_flag reads it: format 1.1 inverted, 0.5 guessed), 0 where every file
  // holding it marks it suspect; uint8.
  ArrayPtr train_flags_array() const;

  // A non-array key's values (variable-length strings, ...) as EXtra-data's
  // run[source, key].ndarray() gives them: the indexed rows of every sequence file, in train
  // order (padding rows outside the index never appear), as a list with one item per row; at
  // most `max_bytes` of values (strings counted by their length), `cut` saying why when not all
  // rows are there (else empty). Reads each of the key's files' dataset (libhdf5).
  struct KeyValues {
    Value rows = Value::list();
    uint64_t total_rows = 0;
    std::string cut;
  };
  KeyValues key_values(const std::string& source, const std::string& key, uint64_t max_bytes);

  // RUN section values of a CONTROL source (SourceData.run_values()): key -> first element.
  Value run_values(const std::string& source);
  // The RUN keys of a CONTROL source that are not CONTROL keys (EXtra-data's "additional run
  // keys": run_values(inc_timestamps=False) less keys(inc_timestamps=False)), by name without
  // `.value`, from the source's first file; `is_array` false for strings, as for keys.
  std::vector<KeyInfo> run_only_keys(const std::string& source);
  // run.json: proposal, run, format version, files, sources, trains, METADATA values, errors.
  Value metadata() const;
  // Data errors found so far (duplicated trains, unreadable files skipped, ...).
  std::vector<std::string> errors() const;

 private:
  Run(H5Files& files, std::string dir, RunOptions opts);
  void leave_out_files_being_written(std::vector<std::string>& paths);
  void load_files(const std::vector<std::string>& paths);
  void build_sources();
  void identify() const;
  // The files map's description of `path` (nullptr: none, or the run is read from an overview).
  const KnownFile* known(const std::string& path) const;
  // Runs fn(i) for every i < paths.size(), one thread per HDF5 helper, each taking the paths its
  // helper is preferred for (one thread in process).
  void for_each_file(const std::vector<std::string>& paths, const std::function<void(size_t)>& fn) const;
  // Format version, METADATA values (first file) and notes of files the map described.
  void load_details() const;
  // INDEX first/count of (source, groups) in every file of s that lacks one, all files at once.
  void fetch_index_locked(Source& s, const std::vector<std::string>& groups);
  void load_keys_locked(Source& s);
  std::shared_ptr<const GroupIndex> group_index_locked(Source& s, const std::string& group);
  Source& source_mut(const std::string& name);
  void note_error(const std::string& msg) const;

  H5Files& h5files_;
  std::string dir_;
  RunOptions opts_;
  std::string overview_;
  mutable std::vector<SequenceFile> files_;  // format_version of map files: load_details
  std::map<std::string, Source> sources_;
  std::vector<uint64_t> train_ids_;
  ArrayPtr train_ids_array_;
  size_t files_from_map_ = 0;
  // Lock level 2, taken before mu_ (never while holding it): held while load_details reads
  // files; guards what it fills (proposal_, run_number_, format_version_, metadata_values_ and
  // the files' format_version once details_loaded_).
  mutable std::mutex details_mu_;
  mutable bool details_loaded_ = false;
  mutable int64_t proposal_ = -1, run_number_ = -1;
  mutable std::string format_version_;
  mutable std::vector<std::pair<std::string, Value>> metadata_values_;
  // Lock level 2 (docs/architecture.md): after vfs nodes, before VirtualArray::mu_ and the HDF5
  // lock; held while a source's keys and index groups are read. Guards Source lazy state,
  // errors_, timestamps_.
  mutable std::mutex mu_;
  ArrayPtr timestamps_;
  mutable std::vector<std::string> errors_;
};

}  // namespace h5d::euxfel
