// The write path: HDF5 files, groups and datasets created through libhdf5 (in the daemon in one
// writer process per file, WriteFile; metadata flushed at once so that a killed daemon leaves a
// valid file), then data written without the library where it can be:
//   contiguous (default): early allocation, fill never; bytes go straight to pwrite at the
//     dataset's file offset (H5Dget_offset), no lock: safe from many processes (and nodes).
//   chunked (and compressed): the bytes of each chunk are gathered in memory; a complete chunk
//     is compressed (on the pool when several complete at once) and written with H5Dwrite_chunk
//     (its bytes sent to the writer process); incomplete chunks are written padded with fill on flush() (and kept
//     in memory: more bytes may come), and the file's metadata flushed (H5Fflush).
//   existing contiguous datasets (option write_existing): pwrite in place.
// Knows nothing of FUSE, .npy or JSON. Byte offsets are those of the array's C-order bytes.
// Side: daemon (the public interface of the write path; no libhdf5). The files of core/write/:
//   assemble.cpp    (daemon) Writer, its files, the contiguous dataset writer
//   chunked_writer.cpp (daemon) the chunked dataset writer (dataset_writers.h: what the two share)
//   remote_file.cpp (daemon) the WriteFile of the daemon: requests to the file's writer process
//   helper/local_file.cpp    (helper side) the WriteFile that calls libhdf5 in process
//   helper/write_server.cpp  (helper side) the writer process's answers (helper::serve_write)
//   write_file.cpp  (both)   write_file_factory: which of the two WriteFiles
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/vocab/filter_info.h"
#include "core/vocab/shape.h"

namespace h5d {

class Engine;
class H5Files;
struct HelperOptions;
namespace proto {
class In;
enum class Op : uint16_t;
}  // namespace proto

struct WriterOptions {
  std::string compression;   // default for new datasets: "" (contiguous), gzip, blosc, lz4, zstd
  int level = -1;            // compression level; -1: the filter's default
  bool write_existing = false;  // allow in-place writes to existing contiguous datasets
  // Memory for chunks written in part (all datasets of the mount together): when a write needs
  // a chunk buffer beyond it, the writer's other partial chunks are spilled (written to the file
  // padded with fill, read back when more bytes come); when that is not enough, ENOSPC.
  uint64_t pending_budget = 512ull << 20;
};

// The bytes of partial chunk buffers held by every dataset writer of one Writer.
class WriteBudget {
 public:
  explicit WriteBudget(uint64_t limit) : limit_(limit) {}
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(); }
  bool try_take(uint64_t n);
  void give(uint64_t n) { used_.fetch_sub(n); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

struct NewDataset {
  Shape shape;
  std::string typestr;      // numpy typestr: "<u2", ">f8", "|b1", "<c8", "|S16"
  Shape chunks;             // empty: contiguous, or chosen (~1 MiB) when compressed
  std::string compression;  // "" / "none": none
  int level = -1;
  bool shuffle = true;
};

// What a NewDataset becomes, decided without libhdf5: the spec is user input (a .npy header or a
// JSON spec written to a writable mount). Error(EINVAL) for unsupported dtypes, more than 32
// dimensions, zero or mismatched chunk dimensions, chunks of 4 GiB or more, unknown compression;
// Error(EFBIG) when the array's bytes would exceed 2^63 (sizes never wrap).
struct DatasetPlan {
  size_t itemsize = 0;
  uint64_t nbytes = 0;
  Shape chunks;                      // empty: contiguous (scalars and empty arrays always are)
  uint64_t chunk_bytes = 0;          // bytes of one (uncompressed) chunk; 0 when contiguous
  std::string compression;           // "" for none
  std::vector<FilterInfo> pipeline;  // what chunks are encoded with
};
DatasetPlan plan_dataset(const NewDataset& spec);

// Who a new file belongs to: the user whose request created it.
struct NewFileOwner {
  uid_t uid;
  gid_t gid;
  mode_t mode;
};

// The libhdf5 side of one file the Writer created: every libhdf5 call of the write path. In
// the daemon (helper options set) it is the file's own writer process, an h5direct-helper
// that holds only this file open for writing (a libhdf5 handle open for writing cannot be
// shared between processes): a crash, abort or hang there costs this file only. In process
// (unit tests, and inside that helper) it calls libhdf5 under the HDF5 lock. Datasets are named
// by their path in the file. Not thread-safe: Writer::FileState serializes the calls.
class WriteFile {
 public:
  virtual ~WriteFile() = default;
  virtual pid_t pid() const = 0;  // the writer process; 0 in process
  virtual bool exists(const std::string& path) = 0;  // H5Lexists
  virtual void create_group(const std::string& path) = 0;  // then H5Fflush
  // H5Dcreate2 of `spec` (planned again where libhdf5 runs: plan_dataset), then H5Fflush.
  // Returns the file offset of contiguous data (H5Dget_offset; 0 when empty or chunked);
  // chunked datasets stay open for their chunks until close_dataset.
  virtual uint64_t create_dataset(const std::string& path, const NewDataset& spec) = 0;
  virtual void write_chunk(const std::string& path, const std::vector<uint64_t>& offset,
                           const std::vector<uint8_t>& bytes) = 0;  // H5Dwrite_chunk, no filter skipped
  // The stored bytes of a chunk, which must be `size` bytes (what was written there), else
  // Error(EIO); `mask`: the filters skipped.
  virtual std::vector<uint8_t> read_chunk(const std::string& path, const std::vector<uint64_t>& offset,
                                          uint64_t size, uint32_t& mask) = 0;
  virtual void close_dataset(const std::string& path) = 0;
  virtual void flush() = 0;  // H5Fflush
  virtual void close() = 0;  // H5Fflush, H5Fclose; every later call fails with Error(EIO)
};

// Creates the HDF5 file `path` (O_EXCL; Error(EEXIST) when it exists); `dev`, `ino`: the device
// and inode libhdf5 created.
using WriteFileFactory = std::function<std::unique_ptr<WriteFile>(const std::string& path, dev_t& dev, ino_t& ino)>;
// The WriteFile of this program, chosen once (as H5Files chooses its Metadata): a writer process
// per file with helper options (the daemon), libhdf5 in process without them (unit tests, tools;
// Error(EINVAL) at each create in a program without the helper-side library).
WriteFileFactory write_file_factory(const HelperOptions& helpers);

class DatasetWriter {
 public:
  virtual ~DatasetWriter() = default;
  virtual uint64_t nbytes() const = 0;
  virtual std::string describe() const = 0;  // "file.h5:/path (contiguous at 2048)"
  // Writes bytes [off, off+n) of the array's C-order bytes. Error(EFBIG) past the end.
  virtual void write(uint64_t off, const uint8_t* p, size_t n) = 0;
  // Reads back what was written (fill where nothing was).
  virtual void read(uint64_t off, size_t n, uint8_t* out) = 0;
  // Makes everything written so far reach the file (chunked: pending chunks, padded with fill,
  // then H5Fflush). `durable`: fdatasync as well.
  virtual void flush(bool durable) = 0;
};
using DatasetWriterPtr = std::shared_ptr<DatasetWriter>;

class Writer {
 public:
  // Files existing datasets are read from (write_existing) and where its writer processes come
  // from (their helper options: write_file_factory).
  Writer(H5Files& files, WriterOptions opts);
  ~Writer();  // close_all()
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  const WriterOptions& options() const { return opts_; }
  const WriteBudget& budget() const { return *budget_; }

  // Creates a new, empty HDF5 file (Error(EEXIST) when the path exists) and keeps it open.
  // `owner`: give it that owner (when the daemon runs as root) and mode (its rw bits).
  void create_file(const std::string& path, const NewFileOwner* owner = nullptr);
  // True for files created by this writer (only those take new groups and datasets).
  bool owns(const std::string& path);
  // The writer process of a file created here (its libhdf5 side), 0 when there is none (in
  // process, not ours, closed). Tests kill it; the log line of create_file names it too.
  pid_t writer_pid(const std::string& path);
  void create_group(const std::string& file, const std::string& group_path);
  // Creates a dataset and returns its writer; metadata is flushed before this returns.
  DatasetWriterPtr create_dataset(const std::string& file, const std::string& dset_path,
                                  const NewDataset& spec);
  // In-place writer for an existing dataset: contiguous, unfiltered, allocated, not external,
  // else Error(EPERM). Needs options().write_existing (else EPERM).
  DatasetWriterPtr open_existing(const std::string& file, const std::string& dset_path);

  // Flushes every dataset and file (fsync of the whole mount).
  void flush_all();
  // Flushes and closes everything (unmount); safe from any thread, and more than once.
  // - From its start, new files, groups and datasets fail with EIO.
  // - Writes that returned before it started are in the files, synced, when it returns.
  // - A write racing with it (another thread) either succeeds, and its bytes reach the file
  //   (synced when it finished before close_all synced that file), or fails with EIO; once one
  //   fails, every later write to that dataset fails. No write ever reaches another file.
  // - After it returns every write fails with EIO; reads of what was written still work.
  // Each file's descriptor is closed when its last dataset writer is released (FileState's
  // destructor), not here: a racing pwrite never hits a number reused by a later open.
  void close_all();

  struct FileState;

 private:
  std::shared_ptr<FileState> file_state(const std::string& path);  // Error(EPERM) when not ours
  // The live dataset writers and the files, copied under mu_ (flush_all, close_all).
  void snapshot(std::vector<DatasetWriterPtr>& ds, std::vector<std::shared_ptr<FileState>>& files);

  Engine& engine_;
  H5Files& h5files_;
  WriteFileFactory make_write_file_;  // chosen once
  WriterOptions opts_;
  std::shared_ptr<WriteBudget> budget_;
  // Level 4 of the lock hierarchy in docs/architecture.md: taken after the HDF5 lock, before the
  // leaf locks (log); never held while a file's WriteFile is called. Guards files_, datasets_,
  // existing_, closing_.
  std::mutex mu_;
  bool closing_ = false;  // close_all has started: no new files, groups or datasets
  std::map<std::string, std::shared_ptr<FileState>> files_;
  std::vector<std::weak_ptr<DatasetWriter>> datasets_;
  std::map<std::string, std::shared_ptr<DatasetWriter>> existing_;
};

}  // namespace h5d
