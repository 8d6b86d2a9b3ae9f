// Side: daemon. What the run model reads of a sequence file, as the helpers' protocol carries
// it (h5proto.h) and the Metadata interface answers it (metadata.h); the questions themselves
// are euxfel::meta's (core/euxfel/h5meta.h), the run model above this layer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/vocab/value.h"

namespace h5d::euxfel::meta {

// The EuXFEL INDEX arrays of several index groups below one INDEX group (`base`, e.g.
// "/INDEX/<source>"; group "" = base itself), `base` opened once: <group>/first and
// <group>/count, or format 0.1's first/last/status converted to count = (last-first+1)*status,
// each cut to n entries. Per group: the arrays, or an error (missing datasets, read errors).
struct IndexArrays {
  std::vector<uint64_t> firsts, counts;
  std::string error;
};

// Everything Run::open reads from one sequence file (sequence_file.cpp, read_sequence_file): in the
// daemon one HDF5 helper request per file instead of one per item.
struct SequenceMeta {
  std::string format_version;              // "0.5" when METADATA/dataFormatVersion is absent
  std::vector<uint64_t> train_ids;         // INDEX/trainId, zeros removed
  std::vector<uint8_t> valid;              // one per train
  std::vector<std::string> control_sources, instrument_sources;
  std::map<std::string, std::string> legacy;                     // legacy -> canonical source
  std::map<std::string, std::vector<std::string>> source_groups;  // index groups per source
  std::map<std::string, IndexArrays> index;                        // by INDEX path
  std::vector<std::string> notes;          // for Run::errors
  std::vector<std::pair<std::string, Value>> metadata_values;  // METADATA (with_metadata only)
};

}  // namespace h5d::euxfel::meta
