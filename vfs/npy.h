// The .npy header of an array as numpy (>= 1.24) writes it: magic, version, header length, then
// the dict `{'descr': ..., 'fortran_order': False, 'shape': (...), }` padded with spaces
// (including numpy's spare room for growing axis 0) and a newline. numpy pads so that the data
// start at a multiple of 64 bytes; h5direct pads further, to a multiple of 4096 (a page), so that
// the data and every chunk-aligned frame in them start on a page boundary: page-cache requests
// (and mmap faults) then line up with chunks instead of straddling two. That stays within the
// 10,000-byte header numpy accepts by default; headers that would not fall back to numpy's 64.
// Version 1.0 when the header fits a 16-bit length, else 2.0; 3.0 (UTF-8) when a field name is
// not ASCII.
#pragma once
#include <string>

#include "core/vocab/dtype.h"
#include "core/vocab/shape.h"

namespace h5d::vfs {

// The dict text alone, without padding: "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }".
std::string npy_dict(const DType& dtype, const Shape& shape);
// Python repr of a shape tuple: "()", "(5,)", "(3, 4)".
std::string py_shape(const Shape& shape);
// Complete header (magic to newline); its size is the data offset: a multiple of `align` (4096 by
// default, 64 where 4096 would exceed numpy's header limit or the array has no elements: numpy
// could not memory-map it). align = 64 gives numpy's bytes.
std::string npy_header(const DType& dtype, const Shape& shape, size_t align = 4096);

// ---- Reading a header being written (rw mounts) ------------------------------------------------
struct NpyHeader {
  std::string descr;  // a scalar typestr ("<f4")
  bool fortran_order = false;
  Shape shape;
  size_t header_len = 0;  // magic to newline: where the data start
};
// The header length from the bytes known so far; 0 when fewer than 12 are known. Error(EINVAL)
// when the bytes are not the start of a .npy header.
size_t npy_header_length(const std::string& prefix);

// Bytes [off, off + n) of a file made of a header (`header` bytes: a .npy header, or none for
// .raw) and then the data: the first `head` of them are the header's, from header offset `off`;
// the other `data_len` are data bytes from `data_off` on.
struct HeadSplit {
  uint64_t head = 0;
  uint64_t data_off = 0, data_len = 0;
};
HeadSplit split_at_header(uint64_t header, uint64_t off, uint64_t n);
// Parses a complete header (at least npy_header_length bytes). Error(EINVAL) for malformed
// headers and for what cannot become an HDF5 dataset here (structured dtypes, Fortran order).
NpyHeader parse_npy_header(const std::string& bytes);

}  // namespace h5d::vfs
