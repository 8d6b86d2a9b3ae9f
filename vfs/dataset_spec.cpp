#include "vfs/dataset_spec.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace h5d::vfs {
namespace {

// A list of non-negative integers (numbers like -1 or 2.5 are refused, not converted).
Shape shape_of(const nlohmann::json& v, const std::string& key) {
  if (!v.is_array()) fail(EINVAL, "dataset spec: '" + key + "' must be a list of integers");
  Shape s;
  for (const auto& x : v) {
    if (!x.is_number_unsigned()) fail(EINVAL, "dataset spec: '" + key + "' must be a list of integers >= 0");
    s.push_back(x.get<uint64_t>());
  }
  return s;
}

// An integer in [lo, hi] (numbers like 2.5 or 1e300 are refused: converting them to int is
// undefined behaviour, as the fuzzer found with a level of 4.4e117).
int int_of(const nlohmann::json& v, const std::string& key, int lo, int hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    fail(EINVAL, "dataset spec: '" + key + "' must be an integer from " + std::to_string(lo) + " to " +
                     std::to_string(hi));
  return static_cast<int>(v.get<int64_t>());
}

}  // namespace

NewDataset spec_from_npy(const NpyHeader& h, const WriterOptions& o) {
  NewDataset d;
  d.shape = h.shape;
  d.typestr = h.descr;
  d.compression = o.compression;
  d.level = o.level;
  return d;
}

NewDataset spec_from_json(const std::string& text, const WriterOptions& o) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(EINVAL, std::string("dataset spec is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(EINVAL, "dataset spec must be a JSON object");
  NewDataset d;
  d.compression = o.compression;
  d.level = o.level;
  try {
    for (const auto& [k, v] : j.items()) {
      if (k == "shape") {
        d.shape = shape_of(v, "shape");
      } else if (k == "dtype") {
        d.typestr = v.get<std::string>();
      } else if (k == "chunks") {
        if (!v.is_null()) d.chunks = shape_of(v, "chunks");
      } else if (k == "compression") {
        d.compression = v.is_null() ? "" : v.get<std::string>();
      } else if (k == "level" || k == "compression_opts") {
        d.level = int_of(v, k, -1, 22);  // -1: the filter's default; 22: zstd's highest
      } else if (k == "shuffle") {
        d.shuffle = v.get<bool>();
      } else {
        fail(EINVAL, "dataset spec: unknown key '" + k +
                         "' (shape, dtype, chunks, compression, level, shuffle)");
      }
    }
  } catch (const json::exception& e) {
    fail(EINVAL, std::string("dataset spec: ") + e.what());
  }
  if (!j.contains("shape") || !j.contains("dtype")) fail(EINVAL, "dataset spec needs shape and dtype");
  // Accept numpy's spellings of native byte order.
  if (!d.typestr.empty() && d.typestr[0] == '=') d.typestr[0] = '<';
  return d;
}

}  // namespace h5d::vfs
