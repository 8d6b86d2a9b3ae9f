#include "vfs/npy.h"

#include <cstdint>

namespace h5d::vfs {
namespace {

constexpr size_t kMagicLen = 8;   // "\x93NUMPY" + major + minor
constexpr size_t kAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS

std::string wrap(const std::string& dict, int major) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t hlen = dict.size() + 1;  // + '\n'
  const size_t padlen = kAlign - ((kMagicLen + len_bytes + hlen) % kAlign);
  const uint64_t total = hlen + padlen;
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(0);
  for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((total >> (8 * i)) & 0xff);
  out += dict;
  out.append(padlen, ' ');
  out += '\n';
  return out;
}

}  // namespace

std::string py_shape(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

std::string npy_dict(const DType& dtype, const Shape& shape) {
  return "{'descr': " + npy_descr_literal(dtype) + ", 'fortran_order': False, 'shape': " +
         py_shape(shape) + ", }";
}

std::string npy_header(const DType& dtype, const Shape& shape) {
  std::string dict = npy_dict(dtype, shape);
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  bool ascii = true;
  for (unsigned char c : dict) ascii = ascii && c < 0x80;
  if (!ascii) return wrap(dict, 3);  // UTF-8 field names
  const size_t hlen = dict.size() + 1;
  const size_t padlen = kAlign - ((kMagicLen + 2 + hlen) % kAlign);
  return wrap(dict, hlen + padlen <= 0xffff ? 1 : 2);
}

}  // namespace h5d::vfs
