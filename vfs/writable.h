// The write side of the tree (rw mounts): what mkdir and create make, and the state machine of a
// new dataset's files. Knows nothing of FUSE; the HDF5 side is core/write/.
//
//   mkdir SRCDIR/NAME.h5        -> a new HDF5 file (Writer::create_file); other names: a real directory
//   mkdir NEWFILE.h5/.../NAME   -> a group
//   create .../NAME.npy         -> header pending: writes collect the .npy header; once it is
//                                  complete the dataset is created (dtype, shape) and NAME.raw,
//                                  NAME.json appear; later writes are data (header bytes may be
//                                  rewritten unchanged: mmap write-back sends whole pages)
//   create .../NAME.json        -> spec pending: writes collect a JSON spec; close (flush) creates
//                                  the dataset (shape, dtype, chunks, compression, level,
//                                  shuffle) and NAME.npy, NAME.raw appear
//   open existing NAME.npy/.raw -> in-place writes when -o write_existing (see array_file.cpp)
#pragma once
#include <memory>
#include <string>

#include "core/write/writer.h"
#include "vfs/tree.h"

namespace h5d::vfs {

// True for names mkdir turns into new HDF5 files (.h5, .hdf5, .hdf, .nxs, .cxi, .nx).
bool is_hdf5_name(const std::string& name);

// mkdir in `parent` (whose write target says what it is). Returns the new node, added to parent.
NodePtr make_directory(const TreeContext& ctx, InodeTable& table, DirNode& parent,
                       const std::string& name, const NodeMeta& meta);
// create (open with O_CREAT of a missing name) in `parent`: NAME.npy or NAME.json.
std::pair<NodePtr, std::unique_ptr<OpenFile>> create_file(const TreeContext& ctx, InodeTable& table,
                                                          const std::shared_ptr<DirNode>& parent,
                                                          const std::string& name,
                                                          const NodeMeta& meta);
// An open file writing in place into an existing dataset: `header` (the .npy header, empty for
// .raw) is served and may be rewritten unchanged; data bytes go to `w`.
std::unique_ptr<OpenFile> make_inplace_open_file(std::string header, DatasetWriterPtr w);

}  // namespace h5d::vfs
