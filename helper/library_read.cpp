// library_read_local (h5local.h): LibraryArray's H5Dread, in this process under the HDF5 lock
// (the helper side: a helper answers the daemon's LibraryRead with it).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/filters/filters.h"
#include "helper/h5lib.h"
#include "helper/h5local.h"
#include "helper/h5types.h"

namespace h5d {
namespace {

// Marks the bytes of one element of `t` (at `base`) that a field covers, compounds nested.
void cover(const DType& t, size_t base, std::vector<bool>& mask) {
  if (!t.is_struct()) {
    for (size_t k = base; k < std::min(mask.size(), base + t.itemsize); ++k) mask[k] = true;
    return;
  }
  for (const Field& f : t.fields) {
    if (f.type.empty()) continue;
    const uint64_t n = std::max<uint64_t>(1, product(f.subshape));
    for (uint64_t i = 0; i < n; ++i) cover(f.type[0], base + f.offset + i * f.type[0].itemsize, mask);
  }
}

// Bytes of compound elements that no field covers: zeros after a conversion, as h5py gives
// them (without one, libhdf5 and h5py copy them from the file, and so does h5direct).
void zero_gaps(const DType& t, std::vector<uint8_t>& buf) {
  if (!t.is_struct() || t.itemsize == 0) return;
  std::vector<bool> mask(t.itemsize, false);
  cover(t, 0, mask);
  if (std::find(mask.begin(), mask.end(), false) == mask.end()) return;
  for (size_t e = 0; e + t.itemsize <= buf.size(); e += t.itemsize)
    for (size_t k = 0; k < t.itemsize; ++k)
      if (!mask[k]) buf[e + k] = 0;
}

// libhdf5's scale-offset decoder trusts the chunk's minbits: a damaged one makes it unpack
// more bits than the chunk stores, reading past the chunk's buffer into whatever the process's
// heap holds next (bytes of another file read before). Before an H5Dread, every allocated chunk
// of the selection whose outermost active filter is scale-offset is checked: its 21-byte header
// (H5Zscaleoffset.c: minbits u32, then the minimum value) and minbits bits per element of the
// whole chunk must fit in the bytes it stores (for minbits up to the type's bits). A chunk
// that fails is EIO, naming it.
// (Scale-offset under a compressor is left to libhdf5: its header is then inside the compressed
// bytes.) Caller holds the HDF5 lock.
void check_scaleoffset_chunks(hid_t dset, hid_t ftype, const DatasetInfo& info, size_t ds_rank,
                              const std::vector<uint64_t>& start, const std::vector<uint64_t>& count,
                              const std::string& what) {
  constexpr uint64_t kHeader = 21;
  int so = -1;  // position of scale-offset if it is the last filter (undone first)
  if (!info.filters.empty() && info.filters.back().id == filters::kScaleOffset) so = static_cast<int>(info.filters.size()) - 1;
  if (so < 0 || info.layout != "chunked" || info.chunks.size() != ds_rank || ds_rank == 0) return;
  const uint64_t type_size = h5::type_size(ftype, what);
  uint64_t nelem = 1;
  for (auto c : info.chunks) nelem *= c;
  Shape c0(ds_rank), c1(ds_rank), cc;
  for (size_t k = 0; k < ds_rank; ++k) {
    if (count[k] == 0) return;
    c0[k] = start[k] / info.chunks[k];
    c1[k] = (start[k] + count[k] - 1) / info.chunks[k];
  }
  cc = c0;
  std::vector<hsize_t> off(ds_rank);
  std::vector<uint8_t> head;
  for (;;) {
    for (size_t k = 0; k < ds_rank; ++k) off[k] = cc[k] * info.chunks[k];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    // No chunk there (or an index libhdf5 cannot read, which its H5Dread reports): nothing to check.
    if (h5::try_chunk_info(dset, off, mask, addr, size) && addr != HADDR_UNDEF && !(mask & (1u << so))) {
      std::string why;
      head.assign(size, 0);
      uint32_t filters = 0;
      if (size < kHeader) {
        why = "holds " + std::to_string(size) + " bytes, less than its 21-byte header";
      } else if (h5::try_read_chunk(dset, off, filters, head.data())) {  // else H5Dread reports it
        const uint64_t minbits = uint64_t(head[0]) | uint64_t(head[1]) << 8 | uint64_t(head[2]) << 16 | uint64_t(head[3]) << 24;
        const unsigned __int128 need = kHeader + (static_cast<unsigned __int128>(nelem) * minbits + 7) / 8;
        // minbits above the type's bits: libhdf5 decodes no bits at all then (every element the
        // minimum; HDF5's own tmisc38a.h5 has such a chunk), reading nothing past the header.
        if (minbits <= 8 * type_size && need > size)
          why = "minbits " + std::to_string(minbits) + " needs " + std::to_string(static_cast<uint64_t>(need)) +
                " bytes for its " + std::to_string(nelem) + " elements, the chunk stores " + std::to_string(size);
      }
      if (!why.empty()) {
        std::string c = "(";
        for (size_t k = 0; k < ds_rank; ++k) c += (k ? "," : "") + std::to_string(cc[k]);
        fail(EIO, what + ": chunk " + c + ") at file offset " + std::to_string(addr) + ": damaged scale-offset chunk: " + why);
      }
    }
    size_t k = ds_rank;
    while (k > 0 && ++cc[k - 1] > c1[k - 1]) {
      cc[k - 1] = c0[k - 1];
      --k;
    }
    if (k == 0) return;
  }
}

}  // namespace

std::vector<uint8_t> library_read_local(H5File& file, const std::string& dset_path,
                                        const std::vector<uint64_t>& start,
                                        const std::vector<uint64_t>& count) {
  auto info = file.dataset_info(dset_path);
  const StorageInfo st = file.storage_info(dset_path);
  if (!info->is_array) fail(EINVAL, file.path() + ":" + dset_path + ": not an array");
  if (start.size() != st.ds_rank || count.size() != st.ds_rank)
    fail(EINVAL, file.path() + ":" + dset_path + ": library read of rank " + std::to_string(start.size()));
  Shape buf_shape(count.begin(), count.end());
  for (size_t k = 0; k < info->shape.size() - st.ds_rank; ++k) buf_shape.push_back(info->shape[st.ds_rank + k]);
  for (size_t k = 0; k < st.ds_rank; ++k)
    if (start[k] > info->shape[k] || count[k] > info->shape[k] - start[k])
      fail(EINVAL, file.path() + ":" + dset_path + ": library read outside the dataset");
  std::vector<uint8_t> buf(product(buf_shape) * info->dtype.itemsize);
  h5::Lock lk = h5::lock();
  const std::string what = file.path() + ":" + dset_path;
  h5::Handle dset = h5::open_dataset(local_handle(file), dset_path, what + ": H5Dopen", EIO);
  h5::Handle ftype = h5::dataset_type(dset.get(), what);
  h5::Handle fspace = h5::dataset_space(dset.get(), what);
  check_scaleoffset_chunks(dset.get(), ftype.get(), *info, st.ds_rank, start, count, what);
  h5::Handle mspace;
  if (st.ds_rank == 0) {
    mspace = h5::create_scalar_space();
  } else {
    std::vector<hsize_t> s(start.begin(), start.end()), c(count.begin(), count.end());
    h5::select_hyperslab(fspace.get(), s, c, what);
    mspace = h5::create_simple_space(c);
  }
  // The file type itself, unless its bytes are not numpy's: then the standard type.
  h5::Handle mtype = info->convert_type ? h5::standard_type(ftype.get()) : h5::Handle();
  const hid_t read_type = mtype ? mtype.get() : ftype.get();
  h5::Handle xfer = h5::transfer_for(ftype.get(), read_type, product(count));
  h5::read(dset.get(), read_type, mspace.get(), fspace.get(), xfer.get(), buf.data(), "H5Dread");
  const bool zeros = h5::gaps_read_as_zeros(ftype.get());
  lk.unlock();
  if (zeros) zero_gaps(info->dtype, buf);
  return buf;
}

}  // namespace h5d
