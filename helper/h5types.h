// HDF5 datatypes as numpy dtypes, and small HDF5 objects as Values. Callers hold the HDF5 lock.
#pragma once
#include <hdf5.h>

#include <string>

#include "core/vocab/dtype.h"
#include "helper/h5lib.h"
#include "core/array/region.h"
#include "core/vocab/value.h"

namespace h5d::h5 {

// Maps an HDF5 file type to the numpy dtype h5py gives for it (byte order kept). Top-level
// array types fold their dims into `folded`. Returns false with `why` for types that are not
// plain arrays (variable-length, references, ...). `desc` gets a short description.
bool dtype_from_h5(hid_t type, DType& out, Shape& folded, std::string& why, std::string& desc);

// True when the bytes of file type `type` differ from those of the standard type of its numpy
// dtype (what h5py reads into): integers with padding bits (precision below the size, or a bit
// offset), floats other than IEEE binary16/32/64, fixed strings padded with spaces or
// terminated by a NUL, and compounds and arrays of any of these. Such data cannot be served as
// stored; `why` says what differs.
bool needs_conversion(hid_t type, std::string& why);
// True for a compound with bytes no member covers and bitfield members: h5py converts it and
// reads those bytes as zeros (else they are the file's bytes, in h5py too).
bool gaps_read_as_zeros(hid_t type);
// The standard type of the numpy dtype of file type `type` (same size and member offsets): the
// memory type to read such data into with H5Dread. Throws Error(EIO) when it cannot be built.
Handle standard_type(hid_t type);

// Reads an attribute (is_attr) or a dataset whole as a Value: scalars as numbers/strings/bools,
// arrays as nested lists. Larger than max_elements: a string saying so.
Value read_value(hid_t obj, bool is_attr, uint64_t max_elements);

}  // namespace h5d::h5
