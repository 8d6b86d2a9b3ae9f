// What a user writes to create a dataset in a writable mount (a .npy header, or a JSON spec),
// turned into a core NewDataset. Both are untrusted input parsed in the daemon: malformed input
// is Error(EINVAL) (EFBIG when too large), never a crash; tests/fuzz/fuzz_dataset_spec.cpp
// holds them to that, together with core's plan_dataset, which checks what they give.
#pragma once
#include <cstddef>
#include <string>

#include "core/write/writer.h"
#include "vfs/npy.h"

namespace h5d::vfs {

// The most bytes a .npy header or a JSON spec may take before the dataset exists: they are kept
// in memory until complete. numpy's own headers for the scalar dtypes the writer takes are under
// 200 bytes plus padding (to 4096 here); numpy reads at most 10,000 by default.
constexpr size_t kMaxSpecBytes = size_t(1) << 20;

NewDataset spec_from_npy(const NpyHeader& h, const WriterOptions& o);
// {"shape": [...], "dtype": "<f4", "chunks": [...] | null, "compression": "gzip" | null,
//  "level" | "compression_opts": N, "shuffle": bool}; shape and dtype required, other keys refused.
NewDataset spec_from_json(const std::string& text, const WriterOptions& o);

}  // namespace h5d::vfs
