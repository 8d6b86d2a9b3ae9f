// Side: daemon. What the daemon-side files of the write path share only among themselves: the
// Writer's files (Writer::FileState) and the chunked dataset writer (chunked_writer.cpp), which
// the Writer (assemble.cpp) makes and closes. No libhdf5 here.
#pragma once
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/vocab/filter_info.h"
#include "core/vocab/shape.h"
#include "core/write/writer.h"

namespace h5d {


// One file the writer writes into, shared by the Writer and its dataset writers. It owns its
// descriptor and (files created here) its WriteFile: the destructor closes both, when the last
// of them lets go. close() (close_all) finishes the file before that: flushed, its libhdf5 file
// closed (its writer process ends), its bytes synced, `closed` set; the descriptor stays open
// until the destructor, so a write racing with close_all never lands in another file that took
// over the number.
struct Writer::FileState {
  FileState(std::string p, std::unique_ptr<WriteFile> file, int descriptor)
      : path(std::move(p)), created(bool(file)), fd(descriptor), h5(std::move(file)) {}
  ~FileState() {
    try {
      close();
    } catch (const std::exception& e) {
      log::error(path + ": closing: " + e.what());
    }
    if (fd >= 0) ::close(fd);
  }
  FileState(const FileState&) = delete;
  FileState& operator=(const FileState&) = delete;

  // Flushes and closes the libhdf5 file, syncs the bytes, sets `closed` (idempotent). Logs the
  // error (once: a writer process that died logged it already) and returns it, "" when none.
  std::string close() {
    std::lock_guard<std::mutex> g(mu);
    if (closed.exchange(true)) return "";
    std::string err;
    bool logged = false;
    if (h5) {
      try {
        h5->close();
      } catch (const std::exception& e) {
        err = path + ": closing: " + e.what();
        logged = already_logged(e);
      }
      h5.reset();  // ends the writer process (after its H5Fclose)
    }
    if (fd >= 0 && ::fdatasync(fd) != 0 && err.empty()) err = path + ": fdatasync: " + std::strerror(errno);
    if (!err.empty() && !logged) log::error(err);
    return err;
  }

  // Runs fn(WriteFile&) under mu; Error(EIO) once the file is closed.
  template <class Fn>
  auto with_file(const std::string& what, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu);
    if (closed || !h5) fail(EIO, what + ": closed");
    return fn(*h5);
  }

  const std::string path;
  const bool created;  // by this writer (takes new groups and datasets); else pwrite in place only
  const int fd;        // O_RDWR, for pwrite/pread/fdatasync; open until the destructor
  // Level 2 of the lock hierarchy (docs/architecture.md), before the HDF5 lock (an in-process
  // WriteFile takes it): serializes the calls of h5, and its closing. Held while the writer
  // process answers (at most hdf5_timeout): only this file's calls wait for it.
  std::mutex mu;
  std::unique_ptr<WriteFile> h5;    // empty for pwrite-only files and once closed
  std::atomic<bool> closed{false};  // set under mu; read from any thread
};

namespace detail {

// The writer of a new chunked dataset `dpath` of f (chunked_writer.cpp): chunks gathered in memory,
// complete ones compressed on the engine's pool; partial chunk buffers held in `budget`.
DatasetWriterPtr make_chunked_writer(Engine& engine, std::shared_ptr<Writer::FileState> f, std::string what,
                                     std::string dpath, const Shape& shape, const Shape& chunks, size_t itemsize,
                                     std::vector<FilterInfo> pipeline, std::shared_ptr<WriteBudget> budget);
// Closes w when it is a chunked dataset writer (its chunks written, its dataset closed in the
// file: close_all); false, and nothing done, for any other.
bool close_if_chunked(DatasetWriter& w);

}  // namespace detail
}  // namespace h5d
