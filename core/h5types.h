// HDF5 datatypes as numpy dtypes, and small HDF5 objects as Values. Callers hold the HDF5 lock.
#pragma once
#include <hdf5.h>

#include <string>

#include "core/dtype.h"
#include "core/region.h"
#include "core/value.h"

namespace h5d::h5 {

// Maps an HDF5 file type to the numpy dtype h5py gives for it (byte order kept). Top-level
// array types fold their dims into `folded`. Returns false with `why` for types that are not
// plain arrays (variable-length, references, ...). `desc` gets a short description.
bool dtype_from_h5(hid_t type, DType& out, Shape& folded, std::string& why, std::string& desc);

// Reads an attribute (is_attr) or a dataset whole as a Value: scalars as numbers/strings/bools,
// arrays as nested lists. Larger than max_elements: a string saying so.
Value read_value(hid_t obj, bool is_attr, uint64_t max_elements);

}  // namespace h5d::h5
