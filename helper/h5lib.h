// Every libhdf5 call goes through here: one process-wide lock (libhdf5 is either not thread-safe
// or thread-safe by one global lock anyway; our own lock also makes call sequences atomic),
// RAII handles, and the library's error stack turned into messages. The HDF5 lock is level 3 of
// the lock hierarchy in docs/architecture.md: taken after vfs nodes, Run::mu_ and VirtualArray::mu_,
// before H5File, Engine, Writer and the leaf mutexes.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace h5d::h5 {

std::recursive_mutex& mutex();  // lock level 3 (docs/architecture.md)
using Lock = std::unique_lock<std::recursive_mutex>;
inline Lock lock() { return Lock(mutex()); }

// Silences libhdf5's own printing of error stacks (once, at first use).
void init_library();
// Registers every filter plugin of libhdf5's plugin path (HDF5_PLUGIN_PATH, else the library's
// default) now, and turns libhdf5's own loading of plugins off: a sandboxed helper loads no code
// once it serves (helper/sandbox.h forbids executable mappings), so the plugins a library read
// may need are loaded before the sandbox. A plugin that does not load is logged and left out, as
// libhdf5 would leave it out. Returns how many filters were registered.
int load_filter_plugins();
// Hands the blocks on libhdf5's free lists back to malloc (H5garbage_collect): in a helper,
// between two requests, so that no block one file's request left behind is reused unwiped for
// another's (M_PERTURB wipes what malloc hands out). Once per request instead of no free lists
// at all: those made every libhdf5 allocation a malloc and a wipe, and listing a 340-file run
// took 2.4x the CPU (docs/benchmarks.md, "What each mechanism buys").
void release_free_lists();

// The current HDF5 error stack as one line (innermost message first).
std::string error_stack();

// Throws h5d::Error(code, what + ": " + error_stack()).
[[noreturn]] void fail_h5(int code, const std::string& what);

// A checked hid_t that closes itself with the right H5*close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = -1;
};

// Wraps a returned id; throws with the HDF5 error stack when it is negative.
Handle check(hid_t id, const std::string& what, int code = 5 /*EIO*/);
void check(herr_t rc, const std::string& what, int code = 5);
// A value whose libhdf5 call failed when `bad`: Error(EIO, what + ": " + libhdf5's error stack).
template <class T>
T checked(T value, bool bad, const std::string& what) {
  if (bad) fail_h5(5 /*EIO*/, what);
  return value;
}
// The two usual failure values: one that libhdf5 names (H5T_NO_CLASS, H5S_SEL_ERROR, ...), and
// any negative one.
template <class T>
T check_not(T value, T failure, const std::string& what) { return checked(value, value == failure, what); }
template <class T>
T check_nonneg(T value, const std::string& what) { return checked(value, value < 0, what); }
// Whether the last libhdf5 call failed: it left an error on the stack (every API call clears the
// stack on entry). For the calls whose failure value is also a valid answer.
bool failed();

// The libhdf5 calls, each wrapped once (HighFive style): checked (a failure throws Error(code)
// with `what` and libhdf5's error stack, the stack cleared), ids returned as Handles. A `try_`
// variant is for a call whose failure is a real answer (no such link, object or dataset): it
// gives an empty Handle, nullopt or false and clears the error stack (libhdf5 does not tell a
// missing link from one it cannot read, so either is "absent"). The caller holds the HDF5 lock.
Handle open_dataset(hid_t loc, const std::string& path, const std::string& what, int code = 2 /*ENOENT*/);
Handle try_open_dataset(hid_t loc, const std::string& path);                                    // H5Dopen2
Handle open_group(hid_t loc, const std::string& path, const std::string& what, int code = 2);
Handle try_open_group(hid_t loc, const std::string& path);                                      // H5Gopen2
Handle try_open_object(hid_t loc, const std::string& path);                                     // H5Oopen
Handle dataset_type(hid_t dset, const std::string& what);                                       // H5Dget_type
Handle dataset_space(hid_t dset, const std::string& what);                                      // H5Dget_space
Handle dataset_create_plist(hid_t dset, const std::string& what);                               // H5Dget_create_plist
// H5Oget_info_by_name2 / H5Oget_info2 (`fields`: H5O_INFO_BASIC, ...).
std::optional<H5O_info_t> try_object_info(hid_t loc, const std::string& path, unsigned fields);
std::optional<H5O_info_t> try_object_info(hid_t obj, unsigned fields);
std::optional<H5L_info_t> try_link_info(hid_t loc, const std::string& path);                    // H5Lget_info
// H5Lget_val of a link whose value is `size` bytes (H5L_info_t::u.val_size); nullopt on failure.
std::optional<std::vector<char>> try_link_value(hid_t loc, const std::string& path, size_t size);
bool try_link_exists(hid_t loc, const std::string& path);                                       // H5Lexists
bool try_object_exists(hid_t loc, const std::string& path);                                     // H5Oexists_by_name
int extent_ndims(hid_t space, const std::string& what);             // H5Sget_simple_extent_ndims
// H5Sget_simple_extent_dims (and the maximum dims when `maxdims` is given).
std::vector<hsize_t> extent_dims(hid_t space, const std::string& what, std::vector<hsize_t>* maxdims = nullptr);
hssize_t extent_npoints(hid_t space, const std::string& what);       // H5Sget_simple_extent_npoints
size_t type_size(hid_t type, const std::string& what);               // H5Tget_size (0 is its failure)
void read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer, void* buf,
          const std::string& what);                                  // H5Dread
// H5Dvlen_reclaim after the values were copied out: a failure leaves libhdf5's buffers behind but
// the values read are good, so it is logged (a warning naming `what`), not thrown.
void vlen_reclaim(hid_t type, hid_t space, void* buf, const std::string& what);
// try_ variants of the four above (H5Dget_type, H5Dget_space) and of H5Aget_type and H5Aget_space:
// an empty Handle when libhdf5 cannot decode them (a value that is unreadable, not an error).
Handle try_dataset_type(hid_t dset);
Handle try_dataset_space(hid_t dset);
Handle try_attribute_type(hid_t attr);
Handle try_attribute_space(hid_t attr);
// H5Dread / H5Aread of a value whose failure is an answer (the value is unreadable): false with
// libhdf5's reason in `why`.
bool try_read(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer, void* buf,
              std::string& why);
bool try_attribute_read(hid_t attr, hid_t mem_type, void* buf, std::string& why);
// H5free_memory of a string libhdf5 allocated; a failure is logged (naming `what`), not thrown.
void free_memory(void* p, const std::string& what);

// H5S: dataspaces.
H5S_class_t extent_type(hid_t space, const std::string& what);      // H5Sget_simple_extent_type
H5S_sel_type select_type(hid_t space, const std::string& what);     // H5Sget_select_type
bool is_regular_hyperslab(hid_t space, const std::string& what);    // H5Sis_regular_hyperslab
// H5Sget_regular_hyperslab of a space of `rank` dims.
void regular_hyperslab(hid_t space, size_t rank, std::vector<hsize_t>& start, std::vector<hsize_t>& stride,
                       std::vector<hsize_t>& count, std::vector<hsize_t>& block, const std::string& what);
// H5Sselect_hyperslab (H5S_SELECT_SET, no stride or block).
void select_hyperslab(hid_t space, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                      const std::string& what);
Handle create_scalar_space();                                        // H5Screate(H5S_SCALAR)
Handle create_simple_space(const std::vector<hsize_t>& dims);        // H5Screate_simple

// H5P: property lists.
Handle create_plist(hid_t cls);                                      // H5Pcreate
hsize_t userblock(hid_t fcpl);                                       // H5Pget_userblock
void sizes(hid_t fcpl, size_t& sizeof_offsets, size_t& sizeof_lengths);  // H5Pget_sizes
H5D_layout_t layout(hid_t dcpl, const std::string& what);            // H5Pget_layout
std::vector<hsize_t> chunk_dims(hid_t dcpl, size_t rank, const std::string& what);  // H5Pget_chunk
int nfilters(hid_t dcpl, const std::string& what);                   // H5Pget_nfilters
struct PipelineFilter {
  H5Z_filter_t id = H5Z_FILTER_ERROR;
  unsigned flags = 0;
  std::vector<unsigned> cd_values;
  std::string name;
};
PipelineFilter filter(hid_t dcpl, unsigned i, const std::string& what);  // H5Pget_filter2
H5D_fill_value_t fill_value_status(hid_t dcpl, const std::string& what);  // H5Pfill_value_defined
// H5Pget_fill_value converted to `type`: false when libhdf5 cannot convert it (no fill value to
// serve; the buffer then stays as it was).
bool try_fill_value(hid_t dcpl, hid_t type, void* buf);
int external_count(hid_t dcpl, const std::string& what);             // H5Pget_external_count
size_t virtual_count(hid_t dcpl, const std::string& what);           // H5Pget_virtual_count
Handle virtual_vspace(hid_t dcpl, size_t i);                         // H5Pget_virtual_vspace
Handle virtual_srcspace(hid_t dcpl, size_t i);                       // H5Pget_virtual_srcspace
void set_buffer(hid_t xfer, size_t size);                            // H5Pset_buffer
void set_file_locking(hid_t fapl, bool use, bool ignore_when_disabled);  // H5Pset_file_locking
void set_driver(hid_t fapl, hid_t driver);                           // H5Pset_driver
void set_chunk(hid_t dcpl, const std::vector<hsize_t>& dims, const std::string& what);  // H5Pset_chunk
void set_deflate(hid_t dcpl, unsigned level);                        // H5Pset_deflate
void set_shuffle(hid_t dcpl);                                        // H5Pset_shuffle
void set_filter(hid_t dcpl, H5Z_filter_t id, unsigned flags, const std::vector<unsigned>& cd_values,
                const std::string& what);                            // H5Pset_filter
void set_layout(hid_t dcpl, H5D_layout_t layout);                    // H5Pset_layout
void set_alloc_time(hid_t dcpl, H5D_alloc_time_t t);                 // H5Pset_alloc_time
void set_fill_time(hid_t dcpl, H5D_fill_time_t t);                   // H5Pset_fill_time

// H5D: datasets.
Handle create_dataset(hid_t loc, const std::string& path, hid_t type, hid_t space, hid_t dcpl,
                      const std::string& what);                      // H5Dcreate2
// H5Dget_offset: HADDR_UNDEF when the dataset has no contiguous storage or libhdf5 cannot say.
haddr_t try_dataset_offset(hid_t dset);
// H5Dget_storage_size: 0 when none is allocated or libhdf5 cannot say.
hsize_t try_storage_size(hid_t dset);
// H5Dget_space_status: H5D_SPACE_STATUS_ERROR when libhdf5 cannot say.
H5D_space_status_t try_space_status(hid_t dset);
// H5Dget_chunk_info_by_coord: false when libhdf5 finds no chunk there (or cannot read the index).
bool try_chunk_info(hid_t dset, const std::vector<hsize_t>& offset, unsigned& mask, haddr_t& addr, hsize_t& size);
hsize_t chunk_storage_size(hid_t dset, const std::vector<hsize_t>& offset, const std::string& what);  // H5Dget_chunk_storage_size
// H5Dread_chunk into buf (as large as the chunk's storage size).
void read_chunk(hid_t dset, const std::vector<hsize_t>& offset, uint32_t& filter_mask, void* buf, const std::string& what);
bool try_read_chunk(hid_t dset, const std::vector<hsize_t>& offset, uint32_t& filter_mask, void* buf);
void write_chunk(hid_t dset, const std::vector<hsize_t>& offset, const void* buf, size_t size,
                 const std::string& what);                           // H5Dwrite_chunk

// H5F: files.
// H5Fopen read-only: an empty Handle when libhdf5 cannot open it (`why`: its error stack).
Handle try_open_file(const std::string& path, hid_t fapl, std::string& why);
Handle create_file(const std::string& path, unsigned flags, hid_t fapl, const std::string& what);  // H5Fcreate
void flush(hid_t file, const std::string& what);                     // H5Fflush (H5F_SCOPE_LOCAL)
Handle file_create_plist(hid_t file);                                // H5Fget_create_plist
hsize_t file_size(hid_t file);                                       // H5Fget_filesize
int vfd_descriptor(hid_t file, const std::string& what);            // H5Fget_vfd_handle (sec2's fd)
// H5Fget_mdc_image_info: whether the file holds a metadata cache image; false when it has none
// or libhdf5 cannot say.
bool try_has_mdc_image(hid_t file);
Handle file_of(hid_t obj);                                           // H5Iget_file_id

// H5G, H5L, H5O: groups, links, objects.
Handle create_group(hid_t loc, const std::string& path, const std::string& what);  // H5Gcreate2
bool link_exists(hid_t loc, const std::string& path, const std::string& what);     // H5Lexists
// H5Lunpack_elink_val of an external link's value: its (file, object); nullopt when it is none.
std::optional<std::pair<std::string, std::string>> try_unpack_external_link(const std::vector<char>& value);
// H5Ovisit_by_name2 from `path`, in name order.
void visit(hid_t loc, const std::string& path, H5O_iterate_t cb, void* data, unsigned fields,
           const std::string& what);

// H5Fget_name of the file `obj` is in; "" when libhdf5 cannot say.
std::string try_file_name(hid_t obj);
// H5Aopen_by_name; an empty Handle when libhdf5 cannot open it (`why`: its error stack).
Handle try_open_attribute(hid_t obj, const std::string& name, std::string& why);
// H5Aiterate2 by name: the names of obj's attributes, in order. false when libhdf5 could not
// list them all (`names`: those listed before it failed; `why`: its error stack).
bool try_attribute_names(hid_t obj, std::vector<std::string>& names, std::string& why);
// H5Literate by name: the links of `group` with their types. Error(EIO) naming `what` when
// libhdf5 cannot list them.
std::vector<std::pair<std::string, H5L_type_t>> links(hid_t group, const std::string& what);
// H5Tget_member_name / H5Tget_tag, the string libhdf5 allocates freed (H5free_memory); nullopt
// when libhdf5 gives none.
std::optional<std::string> try_member_name(hid_t type, unsigned i);
std::optional<std::string> try_tag(hid_t type);
// H5Pget_virtual_filename / H5Pget_virtual_dsetname of mapping i; "" when libhdf5 cannot say.
std::string try_virtual_filename(hid_t dcpl, size_t i);
std::string try_virtual_dsetname(hid_t dcpl, size_t i);

// A dataset transfer property list for an H5Dread of `elements` elements between `file_type` and
// `mem_type`, whose conversion buffer is as large as that read needs (at most libhdf5's default,
// 1 MiB, above which it converts in pieces). libhdf5 1.10 allocates (and zeroes) the whole default
// buffer for every converting read, even of one string: a sequence file's few small string reads
// allocated 1 MiB each (listing a 340-file run, docs/benchmarks.md, "What each mechanism buys").
Handle transfer_for(hid_t file_type, hid_t mem_type, uint64_t elements);

// Truncated files (h5truncated.cpp). libhdf5 refuses a file shorter than the end of address
// space its superblock stores. The helper (and only it: allow_truncated_files) retries such a
// file with a read-only driver that accepts it and fails every read reaching past the real end.
void allow_truncated_files(bool on);
bool truncated_files_allowed();
// H5Fopen of `path` read-only through that driver; its real size and stored end of address
// space. An empty Handle when libhdf5 refuses it even so (`why`: its reason).
Handle open_truncated(const std::string& path, uint64_t* real_size, uint64_t* eoa, std::string* why);
// A read refused past the real end of a truncated file: the file, its real size and the end of
// address space its superblock stores.
struct ReadPastEnd {
  std::string path;
  uint64_t size = 0;
  uint64_t stored_end = 0;
};
// The reads refused past a file's real end since the last call.
std::vector<ReadPastEnd> take_reads_past_end();
// How many such refusals are pending; forget_reads_past_end(n) forgets those after the first n,
// for a caller that has dealt with them (list_group leaves out a member whose object header lies
// past the cut: libhdf5 kept nothing of it).
size_t pending_reads_past_end();
void forget_reads_past_end(size_t keep);

}  // namespace h5d::h5
