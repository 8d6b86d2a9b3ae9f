// libFuzzer target for what a user writes to create a dataset in a writable mount: byte 0 picks
// the entry point, the rest is its input. 0: the bytes written to a new NAME.npy (a .npy header),
// 1: the text written to a new NAME.json (a JSON spec). Both go on to plan_dataset, which checks
// what the writer would create. Each step either succeeds or throws h5d::Error (the errno a user
// sees); any other exception aborts, sanitizers catch everything else. What succeeds must hold
// together: the plan's byte size is the shape's product (never wrapped) and below 2^63, chunks have
// one entry per dimension within the shape, and a parsed header, rendered again as h5direct
// renders headers, parses back to the same dtype and shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/write/writer.h"
#include "vfs/dataset_spec.h"
#include "vfs/npy.h"

// libFuzzer's entry point, declared as its FuzzerInterface.h does.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_plan(const h5d::NewDataset& spec) {
  const h5d::DatasetPlan p = h5d::plan_dataset(spec);
  unsigned __int128 n = p.itemsize;
  for (uint64_t x : spec.shape) {
    n *= x;
    if (n > INT64_MAX) n = uint64_t(INT64_MAX) + 1;  // stays above the limit
  }
  check(n == p.nbytes && p.nbytes <= uint64_t(INT64_MAX));
  if (!p.chunks.empty()) {
    check(p.chunks.size() == spec.shape.size());
    for (size_t k = 0; k < p.chunks.size(); ++k) check(p.chunks[k] >= 1 && p.chunks[k] <= spec.shape[k]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size - 1 > h5d::vfs::kMaxSpecBytes) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  const h5d::WriterOptions opts;
  try {
    if (data[0] % 2 == 0) {
      const size_t len = h5d::vfs::npy_header_length(body);
      if (len == 0 || len > body.size()) return 0;
      const h5d::vfs::NpyHeader h = h5d::vfs::parse_npy_header(body);
      check(h.header_len == len && !h.fortran_order);
      const h5d::NewDataset spec = h5d::vfs::spec_from_npy(h, opts);
      check_plan(spec);  // throws for dtypes the writer cannot make: nothing to render then
      h5d::DType t;
      t.typestr = h.descr[0] == '=' ? "<" + h.descr.substr(1) : h.descr;
      t.itemsize = h5d::plan_dataset(spec).itemsize;
      const h5d::vfs::NpyHeader again = h5d::vfs::parse_npy_header(h5d::vfs::npy_header(t, h.shape));
      check(again.descr == t.typestr && again.shape == h.shape);
    } else {
      check_plan(h5d::vfs::spec_from_json(body, opts));
    }
  } catch (const h5d::Error&) {
  }
  return 0;
}
