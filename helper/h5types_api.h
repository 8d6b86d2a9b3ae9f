// The libhdf5 datatype interface (H5T), each call wrapped once, as the rest of h5lib.h: a
// checked wrapper throws h5d::Error(EIO, "<call>" + libhdf5's error stack) and leaves the stack
// clear; ids come back as Handles. Where libhdf5's failure value is also a valid answer (0 of
// H5Tget_member_offset, H5Tget_ebias, ...), the error stack tells them apart (every API call
// clears it on entry). The caller holds the HDF5 lock. Only h5types_api.cpp calls H5T*
// (tools/check_h5_calls.py).
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

#include "helper/h5lib.h"

namespace h5d::h5 {

// Queries.
H5T_class_t type_class(hid_t t);                 // H5Tget_class
H5T_order_t type_order(hid_t t);                 // H5Tget_order
H5T_sign_t type_sign(hid_t t);                   // H5Tget_sign
size_t type_precision(hid_t t);                  // H5Tget_precision
int type_offset(hid_t t);                        // H5Tget_offset
H5T_norm_t type_norm(hid_t t);                   // H5Tget_norm
size_t type_ebias(hid_t t);                      // H5Tget_ebias
struct FloatFields {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
};
FloatFields type_fields(hid_t t);                // H5Tget_fields
bool type_equal(hid_t a, hid_t b);               // H5Tequal
bool is_variable_str(hid_t t);                   // H5Tis_variable_str
H5T_str_t type_strpad(hid_t t);                  // H5Tget_strpad
H5T_cset_t type_cset(hid_t t);                   // H5Tget_cset
Handle type_super(hid_t t);                      // H5Tget_super
int type_nmembers(hid_t t);                      // H5Tget_nmembers
Handle member_type(hid_t t, unsigned i);         // H5Tget_member_type
size_t member_offset(hid_t t, unsigned i);       // H5Tget_member_offset
void member_value(hid_t t, unsigned i, void* value);  // H5Tget_member_value
int array_ndims(hid_t t);                        // H5Tget_array_ndims
std::vector<hsize_t> array_dims(hid_t t);        // H5Tget_array_dims2 (of array_ndims dims)
// (type_size, try_member_name and try_tag: h5lib.h.)

// Building types.
Handle copy_type(hid_t t);                                        // H5Tcopy
Handle create_type(H5T_class_t cls, size_t size);                 // H5Tcreate
Handle array_type(hid_t base, const std::vector<hsize_t>& dims);  // H5Tarray_create2
Handle enum_type(hid_t base);                                     // H5Tenum_create
void enum_insert(hid_t t, const std::string& name, const void* value);              // H5Tenum_insert
void insert_member(hid_t t, const std::string& name, size_t offset, hid_t member);  // H5Tinsert
void set_size(hid_t t, size_t size);                              // H5Tset_size
void set_precision(hid_t t, size_t bits);                         // H5Tset_precision
void set_order(hid_t t, H5T_order_t order);                       // H5Tset_order
void set_fields(hid_t t, const FloatFields& f);                   // H5Tset_fields
void set_ebias(hid_t t, size_t bias);                             // H5Tset_ebias
void set_strpad(hid_t t, H5T_str_t pad);                          // H5Tset_strpad
void set_cset(hid_t t, H5T_cset_t cset);                          // H5Tset_cset
// H5Tconvert of n elements in place (buf holds n of the larger of the two types).
void convert_values(hid_t src, hid_t dst, size_t n, void* buf);

}  // namespace h5d::h5
