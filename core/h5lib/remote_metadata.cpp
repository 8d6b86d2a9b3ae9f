// RemoteMetadata (metadata.h): every question is a request to an HDF5 helper process
// (h5helper.h, h5proto.h). The one place on the daemon side that knows the helpers: how many
// there are, which one a file goes to, and how a batch is spread over them.
#include <algorithm>
#include <set>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/error.h"
#include "core/h5lib/h5helper.h"
#include "core/h5lib/h5proto.h"
#include "core/h5lib/metadata.h"
#include "core/log.h"

namespace h5d {
namespace {

namespace meta = euxfel::meta;
using proto::Op;

class RemoteMetadata final : public Metadata {
 public:
  RemoteMetadata(H5Files& files, const HelperOptions& opts) : files_(files), engine_(files.engine()), pool_(opts) {}

  std::vector<LinkEntry> list_group(H5File& f, const std::string& group) override {
    return helper::call<std::vector<LinkEntry>>(pool_, Op::ListGroup, f.path(), group, group);
  }
  ObjectKind kind_of(H5File& f, const std::string& path) override {
    return helper::call<ObjectKind>(pool_, Op::KindOf, f.path(), path, path);
  }
  std::vector<std::pair<std::string, Value>> attributes(H5File& f, const std::string& object) override;
  std::vector<std::string> attribute_names(H5File& f, const std::string& object) override {
    return helper::call<std::vector<std::string>>(pool_, Op::AttributeNames, f.path(), object, object);
  }
  Value attribute(H5File& f, const std::string& object, const std::string& name) override {
    return helper::call<Value>(pool_, Op::Attribute, f.path(), object, object, name);
  }
  Value read_value(H5File& f, const std::string& dset, uint64_t max_elements) override {
    return helper::call<Value>(pool_, Op::ReadValue, f.path(), dset, dset, max_elements);
  }
  Value small_value(H5File& f, const std::string& dset, uint64_t max_elements) override {
    return helper::call_tentative<Value>(pool_, Op::ReadValue, f.path(), dset, dset, max_elements);
  }
  std::shared_ptr<const DatasetInfo> dataset_info(H5File& f, const std::string& dset, StorageInfo& st) override {
    auto got = helper::call<std::pair<DatasetInfo, StorageInfo>>(pool_, Op::DatasetInfo, f.path(), dset, dset);
    proto::validate(got.first, got.second);
    st = got.second;
    return std::make_shared<const DatasetInfo>(std::move(got.first));
  }
  bool dataset_details(H5File& f, const std::string& dset, DatasetInfo& info, StorageInfo& st) override {
    try {
      auto got = helper::call_tentative<std::pair<DatasetInfo, StorageInfo>>(pool_, Op::DatasetDetails, f.path(),
                                                                             dset, dset);
      proto::validate(got.first, got.second);
      info = std::move(got.first);
      st = std::move(got.second);
      return true;
    } catch (const HelperFailure& e) {
      // An attribute that breaks the helper (tattr2.h5 /dset), or the value: each part on its
      // own (H5File::dataset_details), the metadata first (blamed and logged should that be
      // what breaks it).
      log::debug(std::string(e.what()) + "; the details are read part by part");
      return false;
    }
  }
  bool datasets_details(H5File& f, const std::string& group, const std::vector<std::string>& dsets,
                        std::vector<std::pair<DatasetInfo, StorageInfo>>& out) override {
    try {
      out = helper::call_tentative<std::vector<std::pair<DatasetInfo, StorageInfo>>>(pool_, Op::DatasetsDetails,
                                                                                     f.path(), group, group, dsets);
    } catch (const HelperFailure& e) {  // one of them breaks the helper: each on its own
      log::debug(std::string(e.what()) + "; the datasets are asked one by one");
      return false;
    }
    for (auto& [info, st] : out) proto::validate(info, st);
    return true;
  }
  std::vector<uint8_t> library_read(H5File& f, const std::string& dset, const std::vector<uint64_t>& start,
                                    const std::vector<uint64_t>& count) override {
    return helper::call<std::vector<uint8_t>>(pool_, Op::LibraryRead, f.path(), dset, dset, start, count);
  }

  void prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) override;
  void for_each_file(const std::vector<std::string>& files, const std::function<void(size_t)>& fn) override;

  bool exists(H5File& f, const std::string& path) override { return ask<bool>(f, Op::MetaExists, path); }
  bool is_dataset(H5File& f, const std::string& path) override { return ask<bool>(f, Op::MetaIsDataset, path); }
  bool is_group(H5File& f, const std::string& path) override { return ask<bool>(f, Op::MetaIsGroup, path); }
  std::string soft_link_target(H5File& f, const std::string& path) override {
    return ask<std::string>(f, Op::MetaSoftLink, path);
  }
  bool try_read_u64(H5File& f, const std::string& path, std::vector<uint64_t>& out, uint64_t n) override {
    return try_read(f, Op::MetaReadU64, path, out, n);
  }
  bool try_read_i64(H5File& f, const std::string& path, std::vector<int64_t>& out, uint64_t n) override {
    return try_read(f, Op::MetaReadI64, path, out, n);
  }
  std::vector<meta::IndexArrays> read_index(H5File& f, const std::string& base, const std::vector<std::string>& groups,
                                            uint64_t n) override {
    auto r = ask<std::vector<std::pair<std::vector<uint64_t>, std::pair<std::vector<uint64_t>, std::string>>>>(
        f, Op::MetaReadIndex, base, groups, n);
    std::vector<meta::IndexArrays> out(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      out[i].firsts = std::move(r[i].first);
      out[i].counts = std::move(r[i].second.first);
      out[i].error = std::move(r[i].second.second);
    }
    return out;
  }
  meta::SequenceMeta read_sequence_file(H5File& f, bool with_metadata, bool with_index) override {
    auto m = helper::call<meta::SequenceMeta>(pool_, Op::MetaSequenceFile, f.path(), "/", with_metadata, with_index);
    if (m.valid.size() != m.train_ids.size())
      fail(EIO, f.path() + ": sequence file metadata from the HDF5 helper: " + std::to_string(m.valid.size()) +
                    " validity flags for " + std::to_string(m.train_ids.size()) + " trains");
    return m;
  }
  std::vector<std::string> read_strings(H5File& f, const std::string& path) override {
    return ask<std::vector<std::string>>(f, Op::MetaReadStrings, path);
  }
  std::vector<std::string> list_datasets(H5File& f, const std::string& group) override {
    return ask<std::vector<std::string>>(f, Op::MetaListDatasets, group);
  }
  std::vector<std::string> list_members(H5File& f, const std::string& group) override {
    return ask<std::vector<std::string>>(f, Op::MetaListMembers, group);
  }

  void start() override { pool_.start_idle(); }
  Counters counters() const override {
    return {std::max(1u, pool_.options().count), pool_.requests(), pool_.failures(), pool_.files_asked(),
            pool_.sandbox(), pool_.broker().opened(), pool_.broker().looked_up(), pool_.broker().refused()};
  }
  bool isolated() const override { return true; }
  HelperPool* pool() override { return &pool_; }

 private:
  template <class R, class... A>
  R ask(H5File& f, Op op, const std::string& path, const A&... args) {
    return helper::call<R>(pool_, op, f.path(), path, path, args...);
  }
  template <class T>
  bool try_read(H5File& f, Op op, const std::string& path, std::vector<T>& out, uint64_t n) {
    auto r = ask<std::pair<bool, std::vector<T>>>(f, op, path, n);
    if (r.first) out = std::move(r.second);
    return r.first;
  }
  // Runs lane(i) for every i in [0, lanes): lane 0 on this thread, the others on the engine's
  // pool, all at once (each waits on its helper).
  void each_lane(size_t lanes, const std::function<void(size_t)>& lane);

  H5Files& files_;
  Engine& engine_;
  HelperPool pool_;
};

std::vector<std::pair<std::string, Value>> RemoteMetadata::attributes(H5File& f, const std::string& object) {
  // One request, the common path. An attribute that breaks the helper (tattr2.h5: libhdf5
  // 1.10.8 crashes on its attribute table) costs only itself: the names are read without
  // decoding any attribute, and each is asked for on its own.
  const std::string& path = f.path();
  try {
    return helper::call_tentative<std::vector<std::pair<std::string, Value>>>(pool_, Op::Attributes, path, object,
                                                                              object);
  } catch (const HelperFailure& e) {
    log::debug(path + ":" + object + ": " + e.what() + "; its attributes are read one by one");
  }
  const auto names = attribute_names(f, object);
  std::vector<std::pair<std::string, Value>> out;
  std::vector<std::string> broke;
  for (const std::string& name : names) {
    Value v;
    try {
      v = helper::call_tentative<Value>(pool_, Op::Attribute, path, object, object, name);
    } catch (const HelperFailure& e) {
      v = Value::string("unreadable: the HDF5 helper " + e.how + " reading it");
      broke.push_back(name);
    } catch (const Error& e) {
      v = Value::string(std::string("unreadable: ") + e.what());
    }
    out.emplace_back(name, std::move(v));
  }
  if (!broke.empty()) {
    std::string list;
    for (const std::string& n : broke) list += (list.empty() ? "" : ", ") + n;
    log::warn(path + ":" + object + ": attributes that break the HDF5 helper, shown as unreadable: " + list);
  }
  return out;
}

void RemoteMetadata::each_lane(size_t lanes, const std::function<void(size_t)>& lane) {
  if (lanes <= 1) {
    if (lanes == 1) lane(0);
    return;
  }
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < lanes; ++i)
    tasks.push_back([&lane, i] {
      ThreadPool::Waiting waiting;  // on a helper: not a CPU slot
      lane(i);
    });
  engine_.pool().run_all(tasks);
}

void RemoteMetadata::for_each_file(const std::vector<std::string>& files, const std::function<void(size_t)>& fn) {
  // Each file's questions go to the helper it is preferred for (its open file is there): one
  // lane per helper, the helpers at once.
  const size_t lanes = std::min<size_t>(std::max(1u, pool_.options().count), files.size());
  each_lane(lanes, [&](size_t w) {
    for (size_t i = 0; i < files.size(); ++i)
      if (lanes <= 1 || pool_.preferred(files[i]) % lanes == w) fn(i);
  });
}

void RemoteMetadata::prefetch_infos(const std::vector<std::pair<std::string, std::string>>& items) {
  if (items.size() < 2) return;
  struct Todo {
    std::shared_ptr<H5File> file;
    std::string dset;
  };
  std::vector<std::vector<Todo>> lanes(std::max(1u, pool_.options().count));  // by preferred helper
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& [path, dset] : items) {
    if (!seen.insert({path, dset}).second) continue;
    std::shared_ptr<H5File> f;
    try {
      f = files_.open(path);
    } catch (const std::exception&) {
      continue;
    }
    if (f->info_cached(dset)) continue;
    if (pool_.marked_bad(path)) continue;
    lanes[pool_.preferred(path) % lanes.size()].push_back({std::move(f), dset});
  }
  auto fetch = [this](const std::vector<Todo>& lane) {
    if (lane.size() < 2) {  // one file: its own request
      for (const Todo& t : lane) {
        try {
          t.file->dataset_info(t.dset);
        } catch (const std::exception&) {
        }
      }
      return;
    }
    std::vector<std::pair<std::string, std::string>> asked;
    std::vector<std::string> files;
    for (const Todo& t : lane) {
      asked.emplace_back(t.file->path(), t.dset);
      files.push_back(t.file->path());
    }
    std::vector<proto::InfoAnswer> answers;
    try {
      proto::Out o;
      proto::put(o, asked.front().first);
      proto::put(o, asked.front().second);
      proto::put(o, asked);
      answers = proto::decode_all<std::vector<proto::InfoAnswer>>(
          pool_.call_batch(Op::DatasetInfos, files, o.data(), proto::kMaxMetaReply));
    } catch (const std::exception& e) {
      log::debug(asked.front().first + " and " + std::to_string(asked.size() - 1) +
                 " other files: dataset_infos failed (" + e.what() + "); each is asked on its own");
      return;
    }
    if (answers.size() != lane.size()) return;
    for (size_t i = 0; i < lane.size(); ++i) {
      proto::InfoAnswer& a = answers[i];
      if (!a.ok) continue;  // its dataset_info asks again and reports the error
      try {
        proto::validate(a.info, a.storage);
      } catch (const std::exception&) {
        continue;
      }
      const Todo& t = lane[i];
      if (!t.file->answers_for(a.info, t.dset)) continue;
      t.file->remember(t.dset, std::make_shared<const DatasetInfo>(std::move(a.info)), a.storage);
    }
  };
  std::vector<size_t> busy;  // lanes with work
  for (size_t i = 0; i < lanes.size(); ++i)
    if (!lanes[i].empty()) busy.push_back(i);
  each_lane(busy.size(), [&](size_t k) { fetch(lanes[busy[k]]); });
}

}  // namespace

std::unique_ptr<Metadata> make_remote_metadata(H5Files& files, const HelperOptions& opts) {
  return std::make_unique<RemoteMetadata>(files, opts);
}

LocalMetadataFactory& local_metadata_factory() {
  static LocalMetadataFactory factory = nullptr;
  return factory;
}

}  // namespace h5d
