// Reading on-disk structures (see cursor.h): bounds-checked block reads, checked addresses and
// error construction.
#include "core/fmt/cursor.h"

namespace h5d::fmt {

void fail_at(const Where& w, const std::string& what) {
  fail_data((w.src ? w.src->name() : std::string("<file>")) + ": " + w.structure + " at " +
            std::to_string(w.addr) + ": " + what);
}

std::vector<uint8_t> read_block(const Where& w, uint64_t n) {
  const uint64_t size = w.src->size();
  if (w.addr == kUndefAddr) fail_at(w, "undefined address");
  if (w.addr > size || n > size - w.addr)
    fail_at(w, std::to_string(n) + " bytes would extend beyond the end of the file (" +
                   std::to_string(size) + " bytes)");
  std::vector<uint8_t> buf(static_cast<size_t>(n));
  if (n) w.src->read_at(w.addr, buf.data(), buf.size());
  return buf;
}

uint64_t to_absolute(const Where& w, const FileGeometry& geo, uint64_t rel) {
  if (rel == kUndefAddr) return kUndefAddr;
  const uint64_t size = w.src->size();
  if (rel >= size || geo.base > size - rel - 1)
    fail_at(w, "address " + std::to_string(rel) + " (+ base " + std::to_string(geo.base) +
                   ") is beyond the end of the file (" + std::to_string(size) + " bytes)");
  return rel + geo.base;
}

void check_geometry(const ByteSource& src, const FileGeometry& geo) {
  auto ok = [](uint8_t s) { return s == 2 || s == 4 || s == 8; };
  if (!ok(geo.sizeof_offsets) || !ok(geo.sizeof_lengths))
    fail_data(src.name() + ": unsupported sizes of offsets/lengths (" +
              std::to_string(geo.sizeof_offsets) + "/" + std::to_string(geo.sizeof_lengths) + ")");
  if (geo.base > src.size())
    fail_data(src.name() + ": base address " + std::to_string(geo.base) + " is beyond the end of the file");
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace h5d::fmt
