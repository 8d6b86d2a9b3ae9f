// The NAME.json sidecar of a dataset (schema: docs/sidecar.md) and the JSON forms of core values.
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/vocab/dtype.h"
#include "core/vocab/dataset_info.h"
#include "core/vocab/value.h"

namespace h5d::vfs {

inline constexpr int kSidecarVersion = 1;

nlohmann::json to_json(const Value& v);
// numpy's dtype.descr in JSON: "<u2", or [["a", "<i4"], ["", "|V4"], ["b", "<f8", [3]]].
nlohmann::json dtype_descr_json(const DType& t);
// The sidecar of a dataset; npy_data_offset is the size of the .npy header (0 when not an array).
nlohmann::json dataset_sidecar(const DatasetInfo& info, uint64_t npy_data_offset);
// The attributes file of a group (or, for "/", of the file): kGroupAttrsName in the group's
// directory (docs/sidecar.md, "Attributes of groups and files"). `attrs` follow the rules of a
// dataset sidecar's attrs.
inline constexpr const char* kGroupAttrsName = ".attrs.json";
nlohmann::json group_attrs_sidecar(const std::string& file, const std::string& group,
                                   const std::vector<std::pair<std::string, Value>>& attrs);
// The text of a JSON file the mount shows (indented, newline-terminated). Names that are not
// UTF-8 (HDF5 allows any bytes) have their invalid bytes replaced by U+FFFD instead of failing.
std::string json_text(const nlohmann::json& j);

}  // namespace h5d::vfs
