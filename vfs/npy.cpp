#include "vfs/npy.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "core/error.h"

namespace h5d::vfs {
namespace {

constexpr size_t kMagicLen = 8;   // "\x93NUMPY" + major + minor
constexpr size_t kNumpyAlign = 64;
constexpr size_t kNumpyMaxHeader = 10000;  // numpy.lib.format._MAX_HEADER_SIZE
constexpr size_t kGrowthAxisMaxDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS

size_t pad_for(size_t dict_size, size_t len_bytes, size_t align) {
  const size_t hlen = dict_size + 1;  // + '\n'
  return align - ((kMagicLen + len_bytes + hlen) % align);
}

std::string wrap(const std::string& dict, int major, size_t align) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t hlen = dict.size() + 1;  // + '\n'
  const size_t padlen = pad_for(dict.size(), len_bytes, align);
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

std::string npy_header(const DType& dtype, const Shape& shape, size_t align) {
  std::string dict = npy_dict(dtype, shape);
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  bool ascii = true;
  for (char c : dict) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (align == 0 || align % kNumpyAlign != 0) align = kNumpyAlign;
  // No elements: numpy's 64 (np.load(mmap_mode=...) maps from the page holding the data offset,
  // and a page-sized header with nothing after it leaves no such page).
  if (!shape.empty() && std::find(shape.begin(), shape.end(), 0) != shape.end()) align = kNumpyAlign;
  const size_t len_bytes = ascii ? 2 : 4;
  if (dict.size() + 1 + pad_for(dict.size(), len_bytes, align) > kNumpyMaxHeader) align = kNumpyAlign;
  if (!ascii) return wrap(dict, 3, align);  // UTF-8 field names
  const size_t hlen = dict.size() + 1;
  const size_t padlen = pad_for(dict.size(), 2, align);
  return wrap(dict, hlen + padlen <= 0xffff ? 1 : 2, align);
}

size_t npy_header_length(const std::string& p) {
  static const char kMagic[] = "\x93NUMPY";
  const size_t known = std::min<size_t>(p.size(), 6);
  if (p.compare(0, known, kMagic, known) != 0) fail(EINVAL, "not a .npy header (bad magic)");
  if (p.size() < 12) return 0;
  const int major = static_cast<unsigned char>(p[6]);
  auto b = [&](size_t i) { return static_cast<uint64_t>(static_cast<unsigned char>(p[i])); };
  if (major == 1) return 10 + (b(8) | b(9) << 8);
  if (major == 2 || major == 3) return 12 + (b(8) | b(9) << 8 | b(10) << 16 | b(11) << 24);
  fail(EINVAL, "unsupported .npy version " + std::to_string(major));
}

NpyHeader parse_npy_header(const std::string& bytes) {
  NpyHeader h;
  h.header_len = npy_header_length(bytes);
  if (h.header_len == 0 || bytes.size() < h.header_len) fail(EINVAL, "incomplete .npy header");
  const size_t start = static_cast<unsigned char>(bytes[6]) == 1 ? 10 : 12;
  const std::string d = bytes.substr(start, h.header_len - start);
  auto value_of = [&](const std::string& key) -> size_t {
    for (const char* q : {"'", "\""}) {
      const std::string k = q + key + q;
      const size_t at = d.find(k);
      if (at == std::string::npos) continue;
      size_t i = d.find(':', at + k.size());
      if (i == std::string::npos) break;
      ++i;
      while (i < d.size() && std::isspace(static_cast<unsigned char>(d[i]))) ++i;
      return i;
    }
    fail(EINVAL, ".npy header without '" + key + "'");
  };
  size_t i = value_of("descr");
  if (i >= d.size() || (d[i] != '\'' && d[i] != '"')) {
    fail(EINVAL, ".npy header: structured dtypes cannot be written (only scalar types)");
  }
  const size_t e = d.find(d[i], i + 1);
  if (e == std::string::npos) fail(EINVAL, ".npy header: bad descr");
  h.descr = d.substr(i + 1, e - i - 1);
  i = value_of("fortran_order");
  if (d.compare(i, 4, "True") == 0) h.fortran_order = true;
  else if (d.compare(i, 5, "False") != 0) fail(EINVAL, ".npy header: bad fortran_order");
  if (h.fortran_order) fail(EINVAL, ".npy header: Fortran-order arrays cannot be written (C order only)");
  i = value_of("shape");
  if (i >= d.size() || d[i] != '(') fail(EINVAL, ".npy header: bad shape");
  const size_t close = d.find(')', i);
  if (close == std::string::npos) fail(EINVAL, ".npy header: bad shape");
  std::string num;
  for (size_t k = i + 1; k <= close; ++k) {
    const char c = d[k];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      num += c;
    } else if (c == ',' || c == ')') {
      if (!num.empty()) {
        uint64_t v = 0;
        for (char digit : num) {
          if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, uint64_t(digit - '0'), &v)) {
            fail(EFBIG, ".npy header: a dimension beyond 2^64");
          }
        }
        h.shape.push_back(v);
      } else if (c == ',') {
        fail(EINVAL, ".npy header: bad shape");
      }
      num.clear();
    } else if (c == 'L') {
      // Python 2 longs
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      fail(EINVAL, ".npy header: bad shape");
    }
  }
  return h;
}

HeadSplit split_at_header(uint64_t header, uint64_t off, uint64_t n) {
  HeadSplit h;
  h.head = off < header ? std::min(n, header - off) : 0;
  h.data_off = off + h.head - std::min(off + h.head, header);
  h.data_len = n - h.head;
  return h;
}

}  // namespace h5d::vfs
