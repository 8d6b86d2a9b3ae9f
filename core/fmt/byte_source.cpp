#include "core/fmt/byte_source.h"

#include <cstring>

#include "core/error.h"

namespace h5d::fmt {

void MemorySource::read_at(uint64_t off, void* buf, size_t n) const {
  if (off > bytes_.size() || n > bytes_.size() - off)
    fail_data(name_ + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(off) +
              " is beyond the end of the file (" + std::to_string(bytes_.size()) + " bytes)");
  std::memcpy(buf, bytes_.data() + off, n);
}

}  // namespace h5d::fmt
