// The H5T wrappers (h5types_api.h): the only file that calls libhdf5's H5T functions.
#include "helper/h5types_api.h"

#include <cerrno>

namespace h5d::h5 {
namespace {

// A result whose failure value is also a valid answer: failed when libhdf5 left an error on the
// stack (every API call clears it on entry).
template <class T>
T checked_by_stack(T value, const std::string& call) {
  return checked(value, failed(), call);
}

}  // namespace

H5T_class_t type_class(hid_t t) { return check_not(H5Tget_class(t), H5T_NO_CLASS, "H5Tget_class"); }

H5T_order_t type_order(hid_t t) { return check_not(H5Tget_order(t), H5T_ORDER_ERROR, "H5Tget_order"); }

H5T_sign_t type_sign(hid_t t) { return check_not(H5Tget_sign(t), H5T_SGN_ERROR, "H5Tget_sign"); }

size_t type_precision(hid_t t) { return check_not<size_t>(H5Tget_precision(t), 0, "H5Tget_precision"); }

int type_offset(hid_t t) { return check_nonneg(H5Tget_offset(t), "H5Tget_offset"); }

H5T_norm_t type_norm(hid_t t) { return check_not(H5Tget_norm(t), H5T_NORM_ERROR, "H5Tget_norm"); }

size_t type_ebias(hid_t t) { return checked_by_stack(H5Tget_ebias(t), "H5Tget_ebias"); }

FloatFields type_fields(hid_t t) {
  FloatFields f;
  check(H5Tget_fields(t, &f.spos, &f.epos, &f.esize, &f.mpos, &f.msize), "H5Tget_fields");
  return f;
}

bool type_equal(hid_t a, hid_t b) { return check_nonneg(H5Tequal(a, b), "H5Tequal") > 0; }

bool is_variable_str(hid_t t) { return check_nonneg(H5Tis_variable_str(t), "H5Tis_variable_str") > 0; }

H5T_str_t type_strpad(hid_t t) { return check_not(H5Tget_strpad(t), H5T_STR_ERROR, "H5Tget_strpad"); }

H5T_cset_t type_cset(hid_t t) { return check_not(H5Tget_cset(t), H5T_CSET_ERROR, "H5Tget_cset"); }

Handle type_super(hid_t t) { return check(H5Tget_super(t), "H5Tget_super"); }

int type_nmembers(hid_t t) { return check_nonneg(H5Tget_nmembers(t), "H5Tget_nmembers"); }

Handle member_type(hid_t t, unsigned i) { return check(H5Tget_member_type(t, i), "H5Tget_member_type"); }

size_t member_offset(hid_t t, unsigned i) {
  return checked_by_stack(H5Tget_member_offset(t, i), "H5Tget_member_offset");
}

void member_value(hid_t t, unsigned i, void* value) {
  check(H5Tget_member_value(t, i, value), "H5Tget_member_value");
}

int array_ndims(hid_t t) { return check_nonneg(H5Tget_array_ndims(t), "H5Tget_array_ndims"); }

std::vector<hsize_t> array_dims(hid_t t) {
  std::vector<hsize_t> dims(static_cast<size_t>(array_ndims(t)));
  if (!dims.empty()) {
    check_nonneg(H5Tget_array_dims2(t, dims.data()), "H5Tget_array_dims2");
  }
  return dims;
}

Handle copy_type(hid_t t) { return check(H5Tcopy(t), "H5Tcopy"); }

Handle create_type(H5T_class_t cls, size_t size) { return check(H5Tcreate(cls, size), "H5Tcreate"); }

Handle array_type(hid_t base, const std::vector<hsize_t>& dims) {
  return check(H5Tarray_create2(base, static_cast<unsigned>(dims.size()), dims.data()), "H5Tarray_create2");
}

Handle enum_type(hid_t base) { return check(H5Tenum_create(base), "H5Tenum_create"); }

void enum_insert(hid_t t, const std::string& name, const void* value) {
  check(H5Tenum_insert(t, name.c_str(), value), "H5Tenum_insert");
}

void insert_member(hid_t t, const std::string& name, size_t offset, hid_t member) {
  check(H5Tinsert(t, name.c_str(), offset, member), "H5Tinsert");
}

void set_size(hid_t t, size_t size) { check(H5Tset_size(t, size), "H5Tset_size"); }

void set_precision(hid_t t, size_t bits) { check(H5Tset_precision(t, bits), "H5Tset_precision"); }

void set_order(hid_t t, H5T_order_t order) { check(H5Tset_order(t, order), "H5Tset_order"); }

void set_fields(hid_t t, const FloatFields& f) {
  check(H5Tset_fields(t, f.spos, f.epos, f.esize, f.mpos, f.msize), "H5Tset_fields");
}

void set_ebias(hid_t t, size_t bias) { check(H5Tset_ebias(t, bias), "H5Tset_ebias"); }

void set_strpad(hid_t t, H5T_str_t pad) { check(H5Tset_strpad(t, pad), "H5Tset_strpad"); }

void set_cset(hid_t t, H5T_cset_t cset) { check(H5Tset_cset(t, cset), "H5Tset_cset"); }

void convert_values(hid_t src, hid_t dst, size_t n, void* buf) {
  check(H5Tconvert(src, dst, n, buf, nullptr, H5P_DEFAULT), "H5Tconvert");
}

}  // namespace h5d::h5
