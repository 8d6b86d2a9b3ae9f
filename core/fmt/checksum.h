// The Jenkins lookup3 checksum HDF5 puts at the end of every v2-era metadata block.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/fmt/cursor.h"

namespace h5d::fmt {

// Jenkins lookup3 hashlittle() with initval 0, as H5_checksum_lookup3 (H5checksum.c).
uint32_t checksum_lookup3(const uint8_t* data, size_t n, uint32_t initval = 0);

// Verifies the lookup3 checksum stored in the 4 bytes at buf[n-4..n) over buf[0..n-4).
void verify_checksum(const Where& w, const uint8_t* buf, size_t n);

}  // namespace h5d::fmt
