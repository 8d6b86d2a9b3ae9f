// Side: daemon. The broker: a sandboxed helper has no file system (its Landlock domain grants no
// path, its system call filter refuses opens), so every file libhdf5 or the helper's own code
// opens is opened by the daemon, after its own checks, and handed over as a descriptor (as
// Chromium's renderers and OpenSSH's privilege separation do). The helper asks while it serves
// a request (proto::kBrokerOpen); HelperProcess::exchange answers with what a Broker decides.
//
// What a read helper may get (SourceBroker), read-only and only regular files:
//   - any file below the mount's source (its resolved path: a symlink out of it counts where it
//     leads), the same files the daemon itself lists and reads;
//   - outside the source, an HDF5 file (its signature) that the current request names (the
//     daemon asked about it: a VDS source, an external link's target, a run file it resolved),
//     or that the owner of a file the request names may read (uid, primary and supplementary
//     groups, mode bits; for a file of root's, what anyone may read): libhdf5's own opens
//     (external links it follows, VDS sources of a library read), so a file reaches through its
//     links only what its writer could read.
// Nothing else: /etc/shadow, a user's private files, a directory, a device, a FIFO. A writer
// process (WriterBroker) gets its one file: created once (O_EXCL), then reopened read-write.
// A helper also asks for the status of paths (stat, lstat, access: whether a VDS source or a
// link's target exists; a file's identity), which the daemon looks up for the same files, and,
// outside the source, for paths the owner of a file the request names could look up: a helper
// running as an unprivileged uid could not pass private directories on its own, and the filter
// refuses it the calls.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace h5d {

struct BrokerAnswer {
  int fd = -1;          // the descriptor (the caller passes it on and closes its copy)
  int error = 0;        // when fd < 0 (or a stat failed): the errno the helper's call returns
  std::string refusal;  // a refusal by the policy (logged); empty for a plain failure (ENOENT...)
  struct stat st {};    // a stat's answer (error 0), or the status of the file opened
};

class Broker {
 public:
  virtual ~Broker() = default;
  // Opens `path` with `flags` (and `mode` when creating) for a helper serving a request about
  // `request_files` (the files the daemon named in it).
  virtual BrokerAnswer open(const std::string& path, int flags, unsigned mode,
                            const std::vector<std::string>& request_files) = 0;
  // The status of `path` (lstat when `follow` is false) for a helper serving such a request.
  virtual BrokerAnswer stat(const std::string& path, bool follow, const std::vector<std::string>& request_files) = 0;
  // Whether a refusal of `path` is logged (a path refused again and again is logged once).
  virtual bool should_log(const std::string& path) { return true; }
};

class SourceBroker final : public Broker {
 public:
  // `roots`: the mount's sources (resolved here); none in tools and tests without a mount.
  explicit SourceBroker(const std::vector<std::string>& roots);
  BrokerAnswer open(const std::string& path, int flags, unsigned mode,
                    const std::vector<std::string>& request_files) override;
  BrokerAnswer stat(const std::string& path, bool follow, const std::vector<std::string>& request_files) override;
  // Counters (stats.json): descriptors handed over, paths looked up, asks refused by the policy.
  uint64_t opened() const { return opened_.load(std::memory_order_relaxed); }
  uint64_t looked_up() const { return looked_up_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // True the first time `path` is refused (the log names a refused path once, not per request).
  bool should_log(const std::string& path) override;

 private:
  bool under_root(const std::string& real) const;
  // Whether the owner of `file` (by its current uid and gid) may reach `real` (search on every
  // directory of it) and, with `want` R_OK, read it, as the kernel would decide for that user.
  bool owner_may(const std::string& file, const std::string& real, int want);
  bool owner_may_as(uid_t uid, const std::vector<gid_t>& gids, const std::string& real, int want);
  std::vector<gid_t> groups_of(uid_t uid, gid_t gid);

  std::vector<std::string> roots_;
  std::atomic<uint64_t> opened_{0}, looked_up_{0}, refused_{0};
  std::mutex mu_;  // lock level 5 (docs/architecture.md), a leaf; guards groups_, refused_paths_
  std::map<uid_t, std::vector<gid_t>> groups_;
  std::set<std::string> refused_paths_;  // at most kMaxRefusedPaths
  static constexpr size_t kMaxRefusedPaths = 1024;
};

class WriterBroker final : public Broker {
 public:
  explicit WriterBroker(std::string path) : path_(std::move(path)) {}
  ~WriterBroker() override;
  WriterBroker(const WriterBroker&) = delete;
  WriterBroker& operator=(const WriterBroker&) = delete;
  BrokerAnswer open(const std::string& path, int flags, unsigned mode,
                    const std::vector<std::string>& request_files) override;
  // Its own file's status (libhdf5 asks nothing else of a file it creates).
  BrokerAnswer stat(const std::string& path, bool follow, const std::vector<std::string>& request_files) override;

 private:
  std::string path_;
  bool created_ = false;  // the one O_CREAT|O_EXCL open done; later opens must find that file
  int created_fd_ = -1;   // held open, so that its inode cannot be reused by another file
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace h5d
