// The thin libfuse3 low-level adapter: each handler decodes its request, calls the Vfs and
// replies; every failure goes through one function that maps it to an errno, counts it and logs
// it once. Nothing here knows about HDF5 or arrays.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <exception>
#include <string>

#include "fusefs/options.h"
#include "vfs/vfs.h"

namespace h5d::fusefs {

// The session's userdata. `vfs` is set before the session loop starts (after daemonizing).
struct Context {
  vfs::Vfs* vfs = nullptr;
  FuseOptions opts;
  std::atomic<bool> initialized{false};  // set when the kernel's INIT request has been handled
};

const fuse_lowlevel_ops& operations();

// The errno for an exception (h5d::Error's code; ENOMEM; EIO for anything else).
int errno_of(std::exception_ptr e, std::string* message);

}  // namespace h5d::fusefs
