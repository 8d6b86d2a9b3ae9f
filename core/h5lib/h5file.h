// One HDF5 file: its groups, datasets and their metadata, read through libhdf5 under the one
// global lock (h5lib.h), and the Array through which a dataset's bytes are read directly.
// In a process with HDF5 helpers (Engine::helpers(), the daemon) every method that needs
// libhdf5 asks a helper instead (h5helper.h); the helper runs these same methods in process.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <string>
#include <vector>

#include "core/array/array.h"
#include "core/array/storage_info.h"
#include "core/engine/fd_cache.h"
#include "core/filters/filters.h"
#include "core/fmt/chunk_index.h"
#include "core/vocab/dataset_info.h"

namespace h5d {

class Engine;
class HelperPool;
namespace proto {
enum class Op : uint16_t;
}

enum class ObjectKind { Group, Dataset, Other };

struct LinkEntry {
  std::string name;
  ObjectKind kind = ObjectKind::Other;
  // Soft links: the target path inside the file ("/a/b"); empty for hard links. External links
  // are followed like soft links; their target is "file.h5:/path".
  std::string soft_target;
  // External links: the file the member is in, as libhdf5 resolved and opened it (absolute
  // when the link's file name resolves to one); empty for members of this file. Reading the
  // member needs read access to that file too (vfs, check_access).
  std::string file;
  // A link back to a group on the way to the listed one (the listed group included: a group
  // holding a link to itself): that group's path. The tree shows it as a symbolic link up to
  // that group's directory (an endless tree otherwise). Empty for every other member.
  std::string ancestor;
};

class H5File : public std::enable_shared_from_this<H5File> {
 public:
  // Use Engine::open_file.
  H5File(Engine& engine, std::string path);
  ~H5File();
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  const std::string& path() const { return path_; }
  Engine& engine() const { return engine_; }
  // The file (device, inode, size, mtime) this object's metadata comes from, taken when it was
  // created: Engine::open_file replaces an H5File whose file changed, and data reads through
  // its arrays fail with ESTALE once the file is no longer this one.
  const FileIdentity& identity() const { return identity_; }

  // Members of a group, sorted by name; soft and external links followed, dangling ones left
  // out; links back to a group on the way there named as such (LinkEntry::ancestor). Throws Error(ENOENT) when group_path is not a group.
  std::vector<LinkEntry> list_group(const std::string& group_path);
  ObjectKind kind_of(const std::string& path);  // Other when missing
  // The object's attributes, by name. One that cannot be read is there with the value
  // "unreadable: <why>" (with HDF5 helpers: also one that crashes or hangs the helper; the
  // others are then asked for one by one), and the object stays readable.
  std::vector<std::pair<std::string, Value>> attributes(const std::string& object_path);
  // The names of the object's attributes, sorted, read from its object header without decoding
  // any attribute (libhdf5's list where they are stored elsewhere: dense or shared storage).
  std::vector<std::string> attribute_names(const std::string& object_path);
  // One attribute's value ("unreadable: <why>" when libhdf5 cannot open it).
  Value attribute(const std::string& object_path, const std::string& name);
  // Test hook (the helper's H5DIRECT_HELPER_FAULT_FILE, h5helper.cpp): called with
  // "FILE@ATTRIBUTE" before each attribute is read in this process. Set once, before requests.
  static void set_attribute_hook(std::function<void(const std::string&)> hook);

  // Metadata of a dataset (cached). Throws Error(ENOENT) when it is not a dataset.
  std::shared_ptr<const DatasetInfo> dataset_info(const std::string& dset_path);
  // dataset_info plus what listing does not need: attribute values (attrs) and, for a
  // non-array, its value when small (small_value). Not cached; for sidecars.
  std::shared_ptr<const DatasetInfo> dataset_details(const std::string& dset_path);
  // dataset_details of several datasets (in `group`, for messages), in their order: with HDF5
  // helpers one round trip for all (the run view's keys of a source: one request, not one per
  // key). Throws for the first that fails, as dataset_details would.
  std::vector<std::shared_ptr<const DatasetInfo>> datasets_details(const std::string& group,
                                                                   const std::vector<std::string>& dset_paths);
  // Fetches the dataset_info of `items` ((file, dataset) pairs: the parts of a concatenation,
  // the sources of a VDS; repeated pairs asked once) ahead of their dataset_info calls. With HDF5 helpers that is one
  // request per helper, each helper answering the files it is preferred for, all helpers at
  // once, instead of one round trip per file. A hint: what is cached already, in a file marked
  // bad, or fails (or a batch that breaks its helper) is left to dataset_info, which asks again
  // on its own and reports. Without helpers it does nothing.
  static void prefetch_infos(Engine& engine, const std::vector<std::pair<std::string, std::string>>& items);
  // The dataset's bytes as an Array (cached). Throws Error(EINVAL) when it is not an array.
  ArrayPtr dataset_array(const std::string& dset_path);
  // Reads a whole small dataset as a Value (strings included); used for run metadata.
  Value read_value(const std::string& dset_path, uint64_t max_elements = 100000);

  // Library handle of the open file (hid_t), opened on first use; only for code holding the
  // HDF5 lock. The handle may be closed again (bounded open files) once the lock is released.
  int64_t handle();

  // How the dataset is stored (for the direct readers).
  StorageInfo storage_info(const std::string& dset_path);

 private:
  // The file through the truncated-file driver (h5lib.h) when that is allowed in this process
  // and the file is shorter than its stored end; -1 otherwise (`why`: what libhdf5 said then,
  // when it refused that too). Caller holds the HDF5 lock.
  int64_t open_truncated(std::string& why);
  std::shared_ptr<const DatasetInfo> load_info(const std::string& dset_path, StorageInfo& st);
  // A helper's answer to op (DatasetInfo or DatasetDetails), validated.
  std::shared_ptr<const DatasetInfo> remote_info(HelperPool& hp, proto::Op op, const std::string& dset_path,
                                                 StorageInfo& st);
  // Whether a helper's answer about dset_path is about it (or, through an external link, about
  // its target in another file): anything else is a helper out of step.
  bool answers_for(const DatasetInfo& info, const std::string& dset_path) const;
  // Caches info and st (the first one kept when two threads race); returns the cached info.
  // Keeps what listing needs of a helper's dataset_details answer (its attributes and small
  // value are not cached: dataset_details).
  void remember_listed(const std::string& dset_path, const DatasetInfo& details, const StorageInfo& st);
  std::shared_ptr<const DatasetInfo> remember(const std::string& dset_path, std::shared_ptr<const DatasetInfo> info,
                                              const StorageInfo& st);

  Engine& engine_;
  std::string path_;
  FileIdentity identity_;  // zero when the file could not be stat'ed
  int64_t fid_ = -1;
  bool truncation_logged_ = false;
  std::mutex mu_;  // lock level 4 (docs/architecture.md): after the HDF5 lock; guards infos_, arrays_, storage_
  std::map<std::string, std::shared_ptr<const DatasetInfo>> infos_;
  std::map<std::string, ArrayPtr> arrays_;
  std::map<std::string, StorageInfo> storage_;
};

// H5Dread of region (start, count) of the dataspace of `dset_path` (folded array dims whole),
// in this process: the bytes in C order, in the dataset's dtype (converted by libhdf5 where
// DatasetInfo::convert_type). Used by LibraryArray, directly or in a helper.
std::vector<uint8_t> library_read_local(H5File& file, const std::string& dset_path,
                                        const std::vector<uint64_t>& start,
                                        const std::vector<uint64_t>& count);

}  // namespace h5d
