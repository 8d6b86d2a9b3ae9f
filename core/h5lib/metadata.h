// Metadata: every question the read side asks of libhdf5, as one interface (as the write side's
// WriteFile, core/write/writer.h). H5Files (h5files.h) holds one implementation, chosen once when
// it is made:
//
//   RemoteMetadata (remote_metadata.cpp, the daemon side): each call is a request to an HDF5
//     helper process (h5helper.h, h5proto.h). It alone knows how many helpers there are: its
//     batch calls (prefetch_infos, for_each_file) spread their work over them.
//   LocalMetadata (h5local.h, the helper side, links libhdf5): the calls run libhdf5 in this
//     process, under the HDF5 lock. The helper process itself, unit tests and tools use it.
//
// The daemon's library (h5direct_core) holds this interface, the remote implementation and the
// protocol, and no libhdf5 call; the helper-side library (h5direct_h5) holds every libhdf5 call
// and registers the local implementation (local_metadata_factory). A program without the
// helper-side library can only open files through helpers.
//
// H5File (h5file.h) is the cache in front of it: callers ask H5File and euxfel::meta (h5meta.h),
// which ask the files' Metadata.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/h5lib/run_meta.h"
#include "core/h5lib/h5file.h"
#include "core/vocab/value.h"

namespace h5d {

class Engine;
class H5Files;
class HelperPool;
struct HelperOptions;

class Metadata {
 public:
  virtual ~Metadata() = default;

  // H5File's questions (h5file.h says what each answers).
  virtual std::vector<LinkEntry> list_group(H5File& f, const std::string& group) = 0;
  virtual ObjectKind kind_of(H5File& f, const std::string& path) = 0;
  virtual std::vector<std::pair<std::string, Value>> attributes(H5File& f, const std::string& object) = 0;
  virtual std::vector<std::string> attribute_names(H5File& f, const std::string& object) = 0;
  virtual Value attribute(H5File& f, const std::string& object, const std::string& name) = 0;
  virtual Value read_value(H5File& f, const std::string& dset, uint64_t max_elements) = 0;
  // The value of a non-array shown in its sidecar: read_value, but a value that breaks a helper
  // is not blamed on the file (Error thrown; the caller leaves the value out).
  virtual Value small_value(H5File& f, const std::string& dset, uint64_t max_elements) = 0;
  // Not cached here (H5File caches): the dataset's metadata and storage.
  virtual std::shared_ptr<const DatasetInfo> dataset_info(H5File& f, const std::string& dset, StorageInfo& st) = 0;
  // dataset_details in one step where that saves round trips (remote: one request). false: ask
  // for it part by part (H5File::dataset_details does).
  virtual bool dataset_details(H5File& f, const std::string& dset, DatasetInfo& info, StorageInfo& st) = 0;
  // The same for several datasets of one file, in their order. false: one by one.
  virtual bool datasets_details(H5File& f, const std::string& group, const std::vector<std::string>& dsets,
                                std::vector<std::pair<DatasetInfo, StorageInfo>>& out) = 0;
  // H5Dread of region (start, count) of the dataspace (LibraryArray; h5file.h library_read_local).
  virtual std::vector<uint8_t> library_read(H5File& f, const std::string& dset, const std::vector<uint64_t>& start,
                                            const std::vector<uint64_t>& count) = 0;

  // Batches: many files at once, spread over the helpers (remote) or in turn (local).
  // H5File::prefetch_infos: fetches the dataset_info of (file, dataset) pairs ahead of their
  // dataset_info calls; a hint (what fails is left to dataset_info).
  virtual void prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) = 0;
  // Calls fn(i) once for each i in [0, files.size()), each call about files[i] (it asks the
  // metadata of that file): remote, the files of each helper on a thread of their own, so the
  // helpers work at once and each file's requests go where its file is open; local, in turn.
  virtual void for_each_file(const std::vector<std::string>& files, const std::function<void(size_t)>& fn) = 0;

  // euxfel::meta's questions (h5meta.h says what each answers).
  virtual bool exists(H5File& f, const std::string& path) = 0;
  virtual bool is_dataset(H5File& f, const std::string& path) = 0;
  virtual bool is_group(H5File& f, const std::string& path) = 0;
  virtual std::string soft_link_target(H5File& f, const std::string& path) = 0;
  virtual bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) = 0;
  virtual bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) = 0;
  virtual std::vector<euxfel::meta::IndexArrays> read_index(H5File& f, const std::string& base,
                                                            const std::vector<std::string>& groups, uint64_t n) = 0;
  virtual euxfel::meta::SequenceMeta read_sequence_file(H5File& f, bool with_metadata, bool with_index) = 0;
  virtual std::vector<std::string> read_strings(H5File& f, const std::string& path) = 0;
  virtual std::vector<std::string> list_datasets(H5File& f, const std::string& group) = 0;
  virtual std::vector<std::string> list_members(H5File& f, const std::string& group) = 0;

  // Starts what serves the requests ahead of the first one (a mount calls it once its loop can
  // start: the helpers' start overlaps the first requests). Local: nothing.
  virtual void start() {}
  // Counters for stats.json; zero in process.
  struct Counters {
    unsigned processes = 0;  // helper processes (when all run)
    uint64_t requests = 0, failures = 0, files_asked = 0;
    std::string sandbox;                           // what the helpers' sandbox holds (sandbox_plan.h describe())
    // files the daemon opened for them, paths it looked up, asks refused (broker.h)
    uint64_t broker_opens = 0, broker_lookups = 0, broker_refused = 0;
  };
  virtual Counters counters() const { return {}; }
  // Whether libhdf5 runs in other processes (the daemon) rather than in this one.
  virtual bool isolated() const = 0;
  // The helper pool of a remote implementation (nullptr in process): for the write path
  // (core/write/, which spawns its writer processes with the pool's options) and tests.
  virtual HelperPool* pool() { return nullptr; }
};

// The remote implementation (remote_metadata.cpp): `opts.path` names the helper executable.
std::unique_ptr<Metadata> make_remote_metadata(H5Files& files, const HelperOptions& opts);

// The local implementation's maker, registered by the helper-side library (h5local.cpp);
// nullptr in a program without it (mount.h5direct), where H5Files without helpers fails.
using LocalMetadataFactory = std::unique_ptr<Metadata> (*)(H5Files&);
LocalMetadataFactory& local_metadata_factory();

}  // namespace h5d
