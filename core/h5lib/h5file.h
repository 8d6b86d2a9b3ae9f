// One HDF5 file: its groups, datasets and their metadata, and the Array through which a
// dataset's bytes are read directly. What libhdf5 knows is asked of the Metadata of the files it
// belongs to (h5files.h, metadata.h: a helper process in the daemon, libhdf5 in process
// elsewhere); this class keeps what it was told (dataset metadata, arrays) and no libhdf5 call.
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
class H5Files;

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
  // Use H5Files::open.
  H5File(H5Files& files, std::string path);
  ~H5File();
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  const std::string& path() const { return path_; }
  Engine& engine() const;
  H5Files& files() const { return files_; }
  // The file (device, inode, size, mtime) this object's metadata comes from, taken when it was
  // created: H5Files::open replaces an H5File whose file changed, and data reads through its
  // arrays fail with ESTALE once the file is no longer this one.
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
  // The dataset's bytes as an Array (cached). Throws Error(EINVAL) when it is not an array.
  ArrayPtr dataset_array(const std::string& dset_path);
  // Reads a whole small dataset as a Value (strings included); used for run metadata.
  Value read_value(const std::string& dset_path, uint64_t max_elements = 100000);

  // How the dataset is stored (for the direct readers).
  StorageInfo storage_info(const std::string& dset_path);

  // For the Metadata implementations (metadata.h).
  // Whether dataset_info of dset_path is cached.
  bool info_cached(const std::string& dset_path);
  // Whether a helper's answer about dset_path is about it (or, through an external link, about
  // its target in another file): anything else is a helper out of step.
  bool answers_for(const DatasetInfo& info, const std::string& dset_path) const;
  // Caches info and st (the first one kept when two threads race); returns the cached info.
  std::shared_ptr<const DatasetInfo> remember(const std::string& dset_path, std::shared_ptr<const DatasetInfo> info,
                                              const StorageInfo& st);
  // What the local implementation keeps of this file (its libhdf5 handle, h5local.cpp), guarded
  // by the HDF5 lock; destroyed with the file.
  struct LocalState {
    virtual ~LocalState() = default;
  };
  std::unique_ptr<LocalState>& local_state() { return local_; }

 private:
  // Keeps what listing needs of a dataset_details answer (its attributes and small value are
  // not cached: dataset_details).
  void remember_listed(const std::string& dset_path, const DatasetInfo& details, const StorageInfo& st);

  H5Files& files_;
  std::string path_;
  FileIdentity identity_;  // zero when the file could not be stat'ed
  std::unique_ptr<LocalState> local_;
  std::mutex mu_;  // lock level 4 (docs/architecture.md): after the HDF5 lock; guards infos_, arrays_, storage_
  std::map<std::string, std::shared_ptr<const DatasetInfo>> infos_;
  std::map<std::string, ArrayPtr> arrays_;
  std::map<std::string, StorageInfo> storage_;
};

}  // namespace h5d
