// Element types as numpy sees them. Byte order is kept as stored ('<' or '>'), never converted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace h5d {

struct DType;

struct Field {
  std::string name;
  size_t offset = 0;
  std::vector<DType> type;  // exactly one element (vector breaks the recursive definition)
  std::vector<uint64_t> subshape;  // array-typed member: ('name', '<f4', (3,))
};

struct DType {
  // A scalar numpy typestr ("<u2", ">f4", "|b1", "|S16", "<c8", "|V8") when fields is empty,
  // otherwise a structured type whose members sit at their HDF5 offsets inside itemsize bytes.
  std::string typestr;
  size_t itemsize = 0;
  std::vector<Field> fields;

  bool is_struct() const { return !fields.empty(); }
};

// The descr as a Python literal for a .npy header: '<u2' or [('a', '<i4'), ('', '|V4'), ...].
// Gaps between members become ('', '|Vn') padding fields, as numpy itself writes them.
std::string npy_descr_literal(const DType& t);

// Same typestr, size and member count: arrays of the two types can be concatenated.
bool same_dtype(const DType& a, const DType& b);

}  // namespace h5d
