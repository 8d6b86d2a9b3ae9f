#include "core/euxfel/live.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "core/fmt/chunk_index.h"
#include "core/log.h"

namespace h5d::euxfel {
namespace {

// File consistency flags of superblocks 2 and 3 (HDF5 file format spec, "Superblock"):
// bit 0 file open for write access, bit 2 file open for SWMR write access.
constexpr unsigned char kWriteAccess = 0x01, kSwmrWriteAccess = 0x04;

bool ends_with_h5(const std::string& n) { return n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0; }

}  // namespace

bool open_for_writing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool writing = false;
  if (::fstat(fd, &st) == 0) {
    uint64_t at = 0;
    unsigned char buf[12];  // signature, version, sizes, flags
    if (fmt::hdf5_signature(fd, static_cast<uint64_t>(st.st_size), &at) == 1 &&
        ::pread(fd, buf, sizeof buf, static_cast<off_t>(at)) == static_cast<ssize_t>(sizeof buf)) {
      const unsigned version = buf[8];
      writing = (version == 2 || version == 3) && (buf[11] & (kWriteAccess | kSwmrWriteAccess)) != 0;
    }
  }
  ::close(fd);
  return writing;
}

std::vector<uint8_t> open_for_writing(const std::vector<std::string>& paths) {
  std::vector<uint8_t> out(paths.size(), 0);
  const size_t threads = std::min<size_t>(16, paths.size());
  if (threads <= 1) {
    for (size_t i = 0; i < paths.size(); ++i) out[i] = open_for_writing(paths[i]);
    return out;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) out[i] = open_for_writing(paths[i]);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

void note_left_out_while_written(const std::string& path) {
  static std::mutex mu;  // lock level 5 (docs/architecture.md): only the log (level 6) under it
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lk(mu);
  if (!logged.insert(path).second) return;
  log::warn("euxfel: " + path + ": left out of its run while libhdf5 has it open for writing "
            "(superblock flags); it joins the run once closed");
}

RunDirState RunDirState::take(const std::string& dir, const RunDirState* prev) {
  RunDirState s;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return s;
  s.mtime_ = st.st_mtim;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return s;
  const int dfd = ::dirfd(d);
  std::vector<size_t> check;  // files whose superblock is read
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (!ends_with_h5(n)) continue;
    struct stat fst;
    if (::fstatat(dfd, n.c_str(), &fst, 0) != 0) continue;
    FileState f;
    f.name = n;
    f.id = identity_of(fst);
    const FileState* before = nullptr;
    if (prev) {
      auto it = std::lower_bound(prev->files_.begin(), prev->files_.end(), n,
                                 [](const FileState& a, const std::string& b) { return a.name < b; });
      if (it != prev->files_.end() && it->name == n) before = &*it;
    }
    if (!(before && !before->writing && before->id == f.id)) check.push_back(s.files_.size());
    s.files_.push_back(std::move(f));
  }
  ::closedir(d);
  // The superblocks of new or changed files (and of those being written before), at once.
  std::vector<std::string> paths;
  for (size_t i : check) paths.push_back(dir + "/" + s.files_[i].name);
  const std::vector<uint8_t> writing = open_for_writing(paths);
  for (size_t k = 0; k < check.size(); ++k) s.files_[check[k]].writing = writing[k] != 0;
  std::sort(s.files_.begin(), s.files_.end(),
            [](const FileState& a, const FileState& b) { return a.name < b.name; });
  s.ok_ = true;
  return s;
}

bool RunDirState::operator==(const RunDirState& o) const {
  if (ok_ != o.ok_ || mtime_.tv_sec != o.mtime_.tv_sec || mtime_.tv_nsec != o.mtime_.tv_nsec ||
      files_.size() != o.files_.size())
    return false;
  for (size_t i = 0; i < files_.size(); ++i) {
    const FileState& a = files_[i];
    const FileState& b = o.files_[i];
    if (a.name != b.name || a.writing != b.writing) return false;
    if (!a.writing && a.id != b.id) return false;
  }
  return true;
}

}  // namespace h5d::euxfel
