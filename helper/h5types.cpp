#include "helper/h5types.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "helper/h5lib.h"
#include "helper/h5types_api.h"

namespace h5d::h5 {
namespace {

char order_char(hid_t t, size_t size) {
  if (size == 1) return '|';
  return type_order(t) == H5T_ORDER_BE ? '>' : '<';
}

bool is_h5py_bool(hid_t t) {
  if (type_nmembers(t) != 2) return false;
  if (type_size(type_super(t).get(), "enum base") != 1) return false;
  for (unsigned i = 0; i < 2; ++i) {
    const auto name = try_member_name(t, i);
    if (!name) return false;
    int8_t v = 0;
    member_value(t, i, &v);
    bool ok = (*name == "FALSE" && v == 0) || (*name == "TRUE" && v == 1);
    if (!ok) return false;
  }
  return true;
}

// Bit layout of IEEE binary16/32/64: sign, exponent and mantissa positions and sizes, bias.
struct FloatLayout {
  size_t spos, epos, esize, mpos, msize, ebias;
};
bool ieee_layout(size_t size, FloatLayout& l) {
  switch (size) {
    case 2: l = {15, 10, 5, 0, 10, 15}; return true;
    case 4: l = {31, 23, 8, 0, 23, 127}; return true;
    case 8: l = {63, 52, 11, 0, 52, 1023}; return true;
    default: return false;
  }
}

// The numpy float h5py gives for a float type (h5py's TypeFloatID.py_dtype): the smallest of
// float16/32/64/longdouble whose mantissa and exponent range hold the type's. 0 when none does.
size_t h5py_float_size(hid_t t) {
  const FloatFields fl = type_fields(t);
  const size_t esize = fl.esize;
  size_t msize = fl.msize;
  if (esize >= 63) return 0;
  const long long bias = static_cast<long long>(type_ebias(t));
  const long long maxexp = (1ll << esize) - bias - 1, minexp = 1 - bias;
  struct Finfo {
    size_t size, nmant;
    long long maxexp, minexp;
  };
  // An explicit leading mantissa bit (x87 extended precision, normalisation "none") is not
  // part of the fraction numpy counts.
  if (type_norm(t) == H5T_NORM_NONE && msize > 0) --msize;
  // numpy's finfo: nmant, maxexp, minexp of float16/32/64 and x86's longdouble.
  for (const Finfo& f : {Finfo{2, 10, 16, -14}, Finfo{4, 23, 128, -126}, Finfo{8, 52, 1024, -1022},
                         Finfo{16, 63, 16384, -16382}}) {
    if (msize <= f.nmant && maxexp <= f.maxexp && minexp >= f.minexp) return f.size;
  }
  return 0;
}

bool is_ieee(hid_t t, size_t size) {
  FloatLayout want{};
  if (!ieee_layout(size, want) || type_size(t, "float") != size) return false;
  const FloatFields got = type_fields(t);
  return got.spos == want.spos && got.epos == want.epos && got.esize == want.esize &&
         got.mpos == want.mpos && got.msize == want.msize && type_ebias(t) == want.ebias &&
         type_precision(t) == 8 * size && type_offset(t) == 0 && type_norm(t) == H5T_NORM_IMPLIED;
}

bool is_native_ldouble(hid_t t) { return type_size(t, "float") == 16 && type_equal(t, H5T_NATIVE_LDOUBLE); }

// The numpy size a float type is served as: its own when IEEE (or the native long double),
// else h5py's choice (bfloat16 -> float32, 12-byte long double -> longdouble); 0: none.
size_t served_float_size(hid_t t) {
  const size_t size = type_size(t, "float");
  if (is_ieee(t, size) || is_native_ldouble(t)) return size;
  const size_t s = h5py_float_size(t);
  if (s == 16 && type_order(t) != H5T_ORDER_LE) return 0;  // longdouble is little-endian here
  return s;
}

// numpy's dtype.str for the dtype string `d` of an h5py opaque tag, when it is one of the plain
// dtypes numpy spells so ("<i4", "|S21", ">f8", "<U2", "<M8[s]"...) and its itemsize is `size`
// (h5py cannot read one whose size differs). false otherwise (the type stays "|V<size>").
bool numpy_tag_dtype(const std::string& d, size_t size, std::string& out) {
  if (d.size() < 2 || d.size() > 32) return false;
  size_t i = 0;
  char order = '=';
  if (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=') order = d[i++];
  if (i >= d.size()) return false;
  const char kind = d[i++];
  std::string unit;  // datetime64 / timedelta64: "[s]"
  std::string digits;
  while (i < d.size() && std::isdigit(static_cast<unsigned char>(d[i]))) digits += d[i++];
  if (i < d.size()) {
    unit = d.substr(i);
    const bool ok = (kind == 'M' || kind == 'm') && unit.size() > 2 && unit.front() == '[' && unit.back() == ']' &&
                    std::all_of(unit.begin() + 1, unit.end() - 1, [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
    if (!ok) return false;
  }
  if (digits.empty() || digits.size() > 9 || digits[0] == '0') return false;
  const uint64_t n = std::stoull(digits);
  uint64_t itemsize = n;
  switch (kind) {
    case 'b': if (n != 1) return false; break;
    case 'i': case 'u': if (n != 1 && n != 2 && n != 4 && n != 8) return false; break;
    case 'f': if (n != 2 && n != 4 && n != 8 && n != 16) return false; break;
    case 'c': if (n != 8 && n != 16 && n != 32) return false; break;
    case 'M': case 'm': if (n != 8) return false; break;
    case 'S': case 'V': break;
    case 'U': itemsize = 4 * n; break;
    default: return false;
  }
  if (itemsize != size) return false;
  // numpy's spelling: no byte order for one-byte and byte-string kinds, the host's (little
  // endian here, as everywhere this runs) for '|' and '=' elsewhere.
  const bool no_order = kind == 'S' || kind == 'V' || kind == 'b' || n == 1;
  if (no_order) order = '|';
  else if (order == '|' || order == '=') order = '<';
  out = std::string(1, order) + kind + digits + unit;
  return true;
}

bool scalar_typestr(hid_t t, std::string& out, std::string& why) {
  const size_t size = type_size(t, "datatype");
  const H5T_class_t cls = type_class(t);
  switch (cls) {
    case H5T_INTEGER:
    case H5T_BITFIELD: {
      bool sign = cls == H5T_INTEGER && type_sign(t) == H5T_SGN_2;
      if (size != 1 && size != 2 && size != 4 && size != 8) {
        why = "integer of " + std::to_string(size) + " bytes";
        return false;
      }
      out = std::string(1, order_char(t, size)) + (sign ? "i" : "u") + std::to_string(size);
      return true;
    }
    case H5T_FLOAT: {
      const size_t served = served_float_size(t);
      if (served == 0) {
        why = "float of " + std::to_string(size) + " bytes";
        return false;
      }
      out = served == 16 ? "<f16" : std::string(1, order_char(t, served)) + "f" + std::to_string(served);
      return true;
    }
    case H5T_STRING:
      if (is_variable_str(t)) {
        why = "variable-length string";
        return false;
      }
      out = "|S" + std::to_string(size);
      return true;
    case H5T_OPAQUE: {
      out = "|V" + std::to_string(size);
      // h5py tags the opaque types it writes for numpy dtypes it has no HDF5 type for
      // ("NUMPY:<M8[s]", "NUMPY:|S21": h5py.opaque_dtype) and reads them back as that dtype
      // (np.dtype(tag[6:])): so do we, when the tag is such a dtype and its size is the type's.
      if (const auto tag = try_tag(t)) {
        const std::string& s = *tag;
        const std::string p = "NUMPY:";
        std::string d;
        if (s.compare(0, p.size(), p) == 0 && numpy_tag_dtype(s.substr(p.size()), size, d)) out = d;
      }
      return true;
    }
    case H5T_ENUM: {
      if (is_h5py_bool(t)) {
        out = "|b1";
        return true;
      }
      return scalar_typestr(type_super(t).get(), out, why);
    }
    case H5T_REFERENCE: why = "object or region reference"; return false;
    case H5T_VLEN: why = "variable-length sequence"; return false;
    case H5T_TIME: why = "time type"; return false;
    default: why = "unsupported type class"; return false;
  }
}

bool complex_typestr(hid_t t, std::string& out) {
  if (type_nmembers(t) != 2) return false;
  if (try_member_name(t, 0) != "r" || try_member_name(t, 1) != "i") return false;
  Handle t0 = member_type(t, 0), t1 = member_type(t, 1);
  if (type_class(t0.get()) != H5T_FLOAT || !type_equal(t0.get(), t1.get())) return false;
  size_t fs = type_size(t0.get(), "compound member");
  if ((fs != 4 && fs != 8) || member_offset(t, 0) != 0 || member_offset(t, 1) != fs ||
      type_size(t, "compound") != 2 * fs)
    return false;
  out = std::string(1, order_char(t0.get(), fs)) + "c" + std::to_string(2 * fs);
  return true;
}

bool convert(hid_t t, DType& out, Shape* subshape, std::string& why) {
  out = DType{};
  out.itemsize = type_size(t, "datatype");
  H5T_class_t cls = type_class(t);
  if (cls == H5T_ARRAY) {
    const std::vector<hsize_t> dims = array_dims(t);
    Handle super = type_super(t);
    Shape inner;
    if (!convert(super.get(), out, &inner, why)) return false;
    if (!subshape) {
      why = "nested array type";
      return false;
    }
    subshape->assign(dims.begin(), dims.end());
    subshape->insert(subshape->end(), inner.begin(), inner.end());
    return true;
  }
  if (cls == H5T_COMPOUND) {
    if (complex_typestr(t, out.typestr)) return true;
    int n = type_nmembers(t);
    for (int i = 0; i < n; ++i) {
      Field f;
      f.name = try_member_name(t, static_cast<unsigned>(i)).value_or("");
      f.offset = member_offset(t, static_cast<unsigned>(i));
      Handle mt = member_type(t, static_cast<unsigned>(i));
      DType ft;
      if (!convert(mt.get(), ft, &f.subshape, why)) {
        why = "member '" + f.name + "': " + why;
        return false;
      }
      if (ft.itemsize * std::max<uint64_t>(1, product(f.subshape)) != type_size(mt.get(), "compound member")) {
        why = "member '" + f.name + "': a float that h5py widens (" + ft.typestr + ")";
        return false;
      }
      f.type.push_back(std::move(ft));
      out.fields.push_back(std::move(f));
    }
    if (out.fields.empty()) {
      why = "compound type without members";
      return false;
    }
    return true;
  }
  if (!scalar_typestr(t, out.typestr, why)) return false;
  if (cls == H5T_FLOAT) out.itemsize = served_float_size(t);
  return true;
}

bool has_bitfield(hid_t m) {
  const H5T_class_t c = type_class(m);
  if (c == H5T_BITFIELD) return true;
  if (c == H5T_ARRAY) return has_bitfield(type_super(m).get());
  if (c != H5T_COMPOUND) return false;
  for (int i = 0, k = type_nmembers(m); i < k; ++i)
    if (has_bitfield(member_type(m, static_cast<unsigned>(i)).get())) return true;
  return false;
}

bool needs_conversion_impl(hid_t t, std::string& why) {
  const size_t size = type_size(t, "datatype");
  switch (type_class(t)) {
    case H5T_INTEGER:
    case H5T_BITFIELD: {
      const size_t prec = type_precision(t);
      const int off = type_offset(t);
      if (prec != 8 * size || off != 0) {
        why = "integer of " + std::to_string(prec) + " bits at bit offset " + std::to_string(off) +
              " in " + std::to_string(size) + " bytes";
        return true;
      }
      return false;
    }
    case H5T_FLOAT: {
      if (is_ieee(t, size) || is_native_ldouble(t)) return false;
      const FloatFields fl = type_fields(t);
      why = "float of " + std::to_string(size) + " bytes that is not IEEE (exponent bias " +
            std::to_string(type_ebias(t)) + ", " + std::to_string(fl.esize) + " exponent and " +
            std::to_string(fl.msize) + " mantissa bits), served as h5py's float" +
            std::to_string(8 * served_float_size(t));
      return true;
    }
    case H5T_STRING:
      if (!is_variable_str(t) && type_strpad(t) != H5T_STR_NULLPAD) {
        why = type_strpad(t) == H5T_STR_SPACEPAD ? "space-padded fixed strings"
                                                   : "NUL-terminated fixed strings";
        return true;
      }
      return false;
    case H5T_ENUM:
    case H5T_ARRAY: {  // the base (element) type decides
      return needs_conversion_impl(type_super(t).get(), why);
    }
    case H5T_COMPOUND: {
      const int n = type_nmembers(t);
      if (gaps_read_as_zeros(t)) {
        why = "compound of bitfields with bytes between its members (h5py converts it: they read as zeros)";
        return true;
      }
      for (int i = 0; i < n; ++i) {
        if (needs_conversion_impl(member_type(t, static_cast<unsigned>(i)).get(), why)) {
          why = "member '" + try_member_name(t, static_cast<unsigned>(i)).value_or("") + "': " + why;
          return true;
        }
      }
      return false;
    }
    default: return false;
  }
}

Handle standard_type_impl(hid_t t) {
  const size_t size = type_size(t, "datatype");
  // Asked only of the classes that have a byte order (libhdf5 1.8 refuses it for a compound).
  auto order = [&] { return type_order(t) == H5T_ORDER_BE ? H5T_ORDER_BE : H5T_ORDER_LE; };
  const H5T_class_t cls = type_class(t);
  switch (cls) {
    case H5T_INTEGER:
    case H5T_BITFIELD: {  // all bits used, none offset
      Handle s = copy_type(cls == H5T_BITFIELD          ? H5T_STD_B8LE
                           : type_sign(t) == H5T_SGN_2 ? H5T_STD_I8LE
                                                       : H5T_STD_U8LE);
      set_size(s.get(), size);
      set_precision(s.get(), 8 * size);
      set_order(s.get(), order());
      return s;
    }
    case H5T_FLOAT: {
      FloatLayout l{};
      const size_t served = served_float_size(t);
      if (served == 16) return copy_type(H5T_NATIVE_LDOUBLE);
      if (!ieee_layout(served, l)) return copy_type(t);
      Handle s = copy_type(served == 8 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE);
      if (served == 2) {  // binary16, built the way h5py builds its float16 type
        set_fields(s.get(), FloatFields{l.spos, l.epos, l.esize, l.mpos, l.msize});
        set_size(s.get(), 2);
        set_ebias(s.get(), l.ebias);
      }
      set_order(s.get(), order());
      return s;
    }
    case H5T_STRING: {
      Handle s = copy_type(t);
      if (!is_variable_str(t)) set_strpad(s.get(), H5T_STR_NULLPAD);
      return s;
    }
    case H5T_ENUM: {
      Handle fsuper = type_super(t);
      Handle ssuper = standard_type_impl(fsuper.get());
      Handle s = enum_type(ssuper.get());
      const size_t fs = type_size(fsuper.get(), "enum base");
      std::vector<uint8_t> v(std::max<size_t>(fs, 8) * 2);
      for (int i = 0, n = type_nmembers(t); i < n; ++i) {
        const std::string name = try_member_name(t, static_cast<unsigned>(i)).value_or("");
        std::fill(v.begin(), v.end(), 0);
        member_value(t, static_cast<unsigned>(i), v.data());
        convert_values(fsuper.get(), ssuper.get(), 1, v.data());
        enum_insert(s.get(), name, v.data());
      }
      return s;
    }
    case H5T_ARRAY: {
      Handle ssuper = standard_type_impl(type_super(t).get());
      return array_type(ssuper.get(), array_dims(t));
    }
    case H5T_COMPOUND: {
      Handle s = create_type(H5T_COMPOUND, size);
      for (int i = 0, n = type_nmembers(t); i < n; ++i) {
        const unsigned k = static_cast<unsigned>(i);
        const std::string name = try_member_name(t, k).value_or("");
        Handle smt = standard_type_impl(member_type(t, k).get());
        insert_member(s.get(), name, member_offset(t, k), smt.get());
      }
      return s;
    }
    default: return copy_type(t);
  }
}

}  // namespace

bool needs_conversion(hid_t type, std::string& why) { return needs_conversion_impl(type, why); }

bool gaps_read_as_zeros(hid_t t) {
  if (type_class(t) != H5T_COMPOUND) return false;
  // Bytes no member covers (the file may hold anything there).
  const size_t size = type_size(t, "compound");
  std::vector<bool> covered(size, false);
  for (int i = 0, n = type_nmembers(t); i < n; ++i) {
    const size_t off = member_offset(t, static_cast<unsigned>(i));
    const size_t ms = type_size(member_type(t, static_cast<unsigned>(i)).get(), "compound member");
    for (size_t k = off; k < std::min(size, off + ms); ++k) covered[k] = true;
  }
  // h5py converts bitfields (to unsigned integers) and then has zeros there; without that
  // conversion (other conversions included) they are the file's bytes, in h5py as here.
  return std::find(covered.begin(), covered.end(), false) != covered.end() && has_bitfield(t);
}

Handle standard_type(hid_t type) { return standard_type_impl(type); }

namespace {

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "vlen";
    case H5T_ARRAY: return "array";
    default: return "other";
  }
}

}  // namespace

bool dtype_from_h5(hid_t type, DType& out, Shape& folded, std::string& why, std::string& desc) {
  H5T_class_t cls = type_class(type);
  desc = class_name(cls);
  if (cls == H5T_STRING) desc = is_variable_str(type) ? "variable-length string" : "fixed-length string";
  if (cls == H5T_INTEGER || cls == H5T_FLOAT)
    desc += std::to_string(type_size(type, "datatype") * 8) + (type_order(type) == H5T_ORDER_BE ? " big-endian" : " little-endian");
  folded.clear();
  if (convert(type, out, &folded, why)) return true;
  out = DType{};  // no partial dtype (a compound converted up to its first vlen member)
  folded.clear();
  return false;
}

namespace {

Value nest(const std::vector<Value>& flat, const Shape& shape, size_t dim, uint64_t& pos) {
  if (dim == shape.size()) return flat[pos++];
  Value list = Value::list();
  for (uint64_t i = 0; i < shape[dim]; ++i) list.items.push_back(nest(flat, shape, dim + 1, pos));
  return list;
}

}  // namespace

Value read_value(hid_t obj, bool is_attr, uint64_t max_elements) {
  Handle type = is_attr ? try_attribute_type(obj) : try_dataset_type(obj);
  Handle space = is_attr ? try_attribute_space(obj) : try_dataset_space(obj);
  if (!type || !space) return Value::string("<unreadable>");
  H5S_class_t sc = extent_type(space.get(), "value");
  if (sc == H5S_NULL) return Value::null();
  const std::vector<hsize_t> dims = extent_dims(space.get(), "value");
  Shape shape(dims.begin(), dims.end());
  const uint64_t n = product(shape);
  if (n > max_elements) return Value::string("<" + std::to_string(n) + " elements, too many to show>");
  // Every size comes from the file: the buffers below (and libhdf5's conversion buffers) are
  // n x the type's size. A real value fits in its file (attributes live in object headers,
  // data in the file); 16 MiB more leaves room for fill values of unallocated small datasets.
  const size_t tsize = type_size(type.get(), "value");
  {
    const uint64_t fsize = file_size(file_of(obj).get());
    const unsigned __int128 bytes = static_cast<unsigned __int128>(n) * tsize;
    if (bytes > static_cast<unsigned __int128>(fsize) + (16u << 20))
      return Value::string("<" + std::to_string(n) + " elements of " + std::to_string(tsize) +
                           " bytes, more than the file holds: a damaged type or dataspace>");
  }
  // A read libhdf5 refuses is an answer: the value is unreadable (`why`: libhdf5's reason).
  std::string why;
  auto rd = [&](hid_t mtype, void* buf) {
    if (is_attr) return try_attribute_read(obj, mtype, buf, why);
    Handle xfer = transfer_for(type.get(), mtype, n);
    return try_read(obj, mtype, H5S_ALL, H5S_ALL, xfer.get(), buf, why);
  };
  std::vector<Value> flat;
  flat.reserve(n);
  H5T_class_t cls = type_class(type.get());
  if (cls == H5T_STRING) {
    if (is_variable_str(type.get())) {
      Handle mt = copy_type(H5T_C_S1);
      set_size(mt.get(), H5T_VARIABLE);
      set_cset(mt.get(), type_cset(type.get()));
      std::vector<char*> buf(n, nullptr);
      if (n && !rd(mt.get(), buf.data())) return Value::string("<unreadable: " + why + ">");
      for (auto* s : buf) flat.push_back(Value::string(s ? s : ""));
      if (n) {
        if (is_attr) {
          for (auto* s : buf) free_memory(s, "variable-length string");
        } else {
          vlen_reclaim(mt.get(), space.get(), buf.data(), "variable-length strings");
        }
      }
    } else {
      const bool spacepad = type_strpad(type.get()) == H5T_STR_SPACEPAD;
      std::vector<char> buf(n * tsize);
      if (n && !rd(type.get(), buf.data())) return Value::string("<unreadable: " + why + ">");
      for (uint64_t i = 0; i < n; ++i) {
        std::string s(&buf[i * tsize], tsize);
        auto end = s.find('\0');
        if (end != std::string::npos) s.resize(end);
        while (!s.empty() && s.back() == ' ' && spacepad) s.pop_back();
        flat.push_back(Value::string(s));
      }
    }
  } else if (cls == H5T_ENUM && is_h5py_bool(type.get())) {
    std::vector<int8_t> buf(n);
    if (n && !rd(type.get(), buf.data())) return Value::string("<unreadable>");
    for (auto v : buf) flat.push_back(Value::boolean(v != 0));
  } else if (cls == H5T_INTEGER || cls == H5T_ENUM || cls == H5T_BITFIELD) {
    bool sign = cls != H5T_BITFIELD && type_sign(cls == H5T_ENUM ? type_super(type.get()).get() : type.get()) == H5T_SGN_2;
    if (sign) {
      std::vector<int64_t> buf(n);
      if (n && !rd(H5T_NATIVE_INT64, buf.data())) return Value::string("<unreadable>");
      for (auto v : buf) flat.push_back(Value::integer(v));
    } else {
      std::vector<uint64_t> buf(n);
      if (n && !rd(H5T_NATIVE_UINT64, buf.data())) return Value::string("<unreadable>");
      for (auto v : buf) flat.push_back(Value::uinteger(v));
    }
  } else if (cls == H5T_FLOAT) {
    std::vector<double> buf(n);
    if (n && !rd(H5T_NATIVE_DOUBLE, buf.data())) return Value::string("<unreadable>");
    for (auto v : buf) flat.push_back(Value::number(v));
  } else {
    return Value::string(std::string("<") + class_name(cls) + " value>");
  }
  if (sc == H5S_SCALAR) return flat.empty() ? Value::null() : flat[0];
  uint64_t pos = 0;
  return nest(flat, shape, 0, pos);
}

}  // namespace h5d::h5
