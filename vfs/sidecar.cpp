#include "vfs/sidecar.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/array/region.h"
#include "core/filters/filters.h"

namespace h5d::vfs {
namespace {

using nlohmann::json;

constexpr uint64_t kUnlimited = ~0ull;

json dims_json(const Shape& s) {
  json j = json::array();
  for (auto d : s) j.push_back(d == kUnlimited ? json(nullptr) : json(d));
  return j;
}

json hyperslab_json(const Hyperslab& h) {
  if (h.is_all) return {{"all", true}};
  return {{"start", dims_json(h.start)}, {"stride", dims_json(h.stride)},
          {"count", dims_json(h.count)}, {"block", dims_json(h.block)}};
}

std::string hex(const std::vector<uint8_t>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

double half_to_double(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(mant + 1024, exp - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// One element of a simple numpy type as JSON; null when the type is not simple.
json scalar_json(const std::string& typestr, const uint8_t* p, size_t n) {
  if (typestr.size() < 3) return nullptr;
  const char order = typestr[0];
  const char kind = typestr[1];
  const size_t size = std::strtoul(typestr.c_str() + 2, nullptr, 10);
  if (size != n) return nullptr;
  if (kind == 'S') return std::string(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), n));
  if (kind == 'c') {
    if (n != 8 && n != 16) return nullptr;
    return json::array({scalar_json(std::string(1, order) + "f" + std::to_string(n / 2), p, n / 2),
                        scalar_json(std::string(1, order) + "f" + std::to_string(n / 2), p + n / 2, n / 2)});
  }
  if (n > 8) return nullptr;
  uint64_t u = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = order == '>' ? i : n - 1 - i;  // most significant byte first
    u = (u << 8) | p[k];
  }
  switch (kind) {
    case 'b': return u != 0;
    case 'u': return u;
    case 'i': {
      if (n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);
      return static_cast<int64_t>(u);
    }
    case 'f': {
      double d;
      if (n == 2) {
        d = half_to_double(static_cast<uint16_t>(u));
      } else if (n == 4) {
        uint32_t w = static_cast<uint32_t>(u);
        float f;
        std::memcpy(&f, &w, 4);
        d = f;
      } else if (n == 8) {
        std::memcpy(&d, &u, 8);
      } else {
        return nullptr;
      }
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return d;
    }
    default: return nullptr;
  }
}

}  // namespace

std::string json_text(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

json to_json(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Null: return nullptr;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i;
    case Value::Kind::UInt: return v.u;
    case Value::Kind::Float:
      if (std::isnan(v.f)) return "nan";
      if (std::isinf(v.f)) return v.f > 0 ? "inf" : "-inf";
      return v.f;
    case Value::Kind::String: {
      // nlohmann refuses invalid UTF-8 at dump time: replace such strings by their bytes.
      try {
        (void)json(v.s).dump();
        return v.s;
      } catch (const json::exception&) {
        return {{"bytes_hex", hex(std::vector<uint8_t>(v.s.begin(), v.s.end()))}};
      }
    }
    case Value::Kind::List: {
      json j = json::array();
      for (const auto& x : v.items) j.push_back(to_json(x));
      return j;
    }
    case Value::Kind::Object: {
      json j = json::object();
      for (const auto& [k, x] : v.members) j[k] = to_json(x);
      return j;
    }
  }
  return nullptr;
}

json dtype_descr_json(const DType& t) {
  if (!t.is_struct()) return t.typestr;
  std::vector<const Field*> fields;
  for (const auto& f : t.fields) fields.push_back(&f);
  std::sort(fields.begin(), fields.end(),
            [](const Field* a, const Field* b) { return a->offset < b->offset; });
  json out = json::array();
  size_t pos = 0;
  for (const Field* f : fields) {
    if (f->offset > pos) out.push_back({"", "|V" + std::to_string(f->offset - pos)});
    const DType& ft = f->type.at(0);
    json item = {f->name, dtype_descr_json(ft)};
    uint64_t n = 1;
    if (!f->subshape.empty()) {
      item.push_back(f->subshape);
      for (auto d : f->subshape) n *= d;
    }
    out.push_back(item);
    pos = f->offset + ft.itemsize * n;
  }
  if (t.itemsize > pos) out.push_back({"", "|V" + std::to_string(t.itemsize - pos)});
  return out;
}

namespace {

json attrs_json(const std::vector<std::pair<std::string, Value>>& attrs) {
  json out = json::object();
  for (const auto& [k, v] : attrs) out[k] = to_json(v);
  return out;
}

}  // namespace

json group_attrs_sidecar(const std::string& file, const std::string& group,
                         const std::vector<std::pair<std::string, Value>>& attrs) {
  json j;
  j["sidecar_version"] = kSidecarVersion;
  j["file"] = file;
  j["path"] = group;
  j["kind"] = group == "/" ? "file" : "group";
  j["attrs"] = attrs_json(attrs);
  return j;
}

json dataset_sidecar(const DatasetInfo& info, uint64_t npy_data_offset) {
  json j;
  j["sidecar_version"] = kSidecarVersion;
  j["file"] = info.file;
  j["path"] = info.path;
  j["is_array"] = info.is_array;
  j["shape"] = info.shape;
  j["maxshape"] = dims_json(info.maxshape);
  j["dtype"] = (info.dtype.itemsize && (info.dtype.is_struct() || !info.dtype.typestr.empty())) ? dtype_descr_json(info.dtype) : json(nullptr);
  j["itemsize"] = info.dtype.itemsize;
  j["hdf5_type"] = info.hdf5_type;
  if (info.is_array) {
    j["order"] = "C";
    j["nbytes"] = product(info.shape) * info.dtype.itemsize;
    j["npy_data_offset"] = npy_data_offset;
    j["raw_offset"] = 0;
  } else {
    j["why_not_array"] = info.why_not_array;
    j["value"] = to_json(info.small_value);
  }
  j["layout"] = info.layout;
  j["chunks"] = info.layout == "chunked" ? json(info.chunks) : json(nullptr);
  j["chunk_index"] = info.chunk_index.empty() ? json(nullptr) : json(info.chunk_index);
  json filters = json::array();
  for (const auto& f : info.filters) {
    filters.push_back({{"id", f.id},
                       {"name", f.name.empty() ? filters::filter_name(f.id) : f.name},
                       {"cd_values", f.cd_values},
                       {"flags", f.flags},
                       {"optional", (f.flags & 1) != 0}});
  }
  j["filters"] = filters;
  const size_t isz = info.dtype.itemsize;
  json fill = nullptr;
  if (!info.dtype.is_struct() && !info.fill_value.empty()) {
    fill = scalar_json(info.dtype.typestr, info.fill_value.data(), info.fill_value.size());
  }
  if (fill.is_null() && isz && info.fill_value.size() == isz) fill = hex(info.fill_value);
  j["fill_value"] = fill;
  j["fill_value_defined"] = info.fill_value_defined;
  j["fill_value_hex"] = hex(info.fill_value);
  j["attrs"] = attrs_json(info.attrs);
  const std::string lib = "library";
  const bool fallback = info.read_path.compare(0, lib.size(), lib) == 0;
  j["read_path"] = info.read_path.empty() ? "direct" : info.read_path;
  j["direct"] = info.read_path.empty() || info.read_path.compare(0, 6, "direct") == 0;
  if (fallback) {
    const auto colon = info.read_path.find(':');
    std::string reason = colon == std::string::npos ? "" : info.read_path.substr(colon + 1);
    reason.erase(0, reason.find_first_not_of(' ') == std::string::npos ? reason.size()
                                                                        : reason.find_first_not_of(' '));
    j["fallback_reason"] = reason;
  }
  if (info.layout == "virtual") {
    json maps = json::array();
    json files = json::array();
    json missing = json::array();
    for (const auto& m : info.vds) {
      maps.push_back({{"file", m.file_name},
                      {"dataset", m.dataset_name},
                      {"resolved_file", m.resolved_file.empty() ? json(nullptr) : json(m.resolved_file)},
                      {"vspace", hyperslab_json(m.vspace)},
                      {"srcspace", hyperslab_json(m.srcspace)},
                      {"src_shape", m.src_shape.empty() ? json(nullptr) : json(m.src_shape)}});
      if (!m.source_missing.empty()) maps.back()["source_missing"] = m.source_missing;
      const std::string name = m.resolved_file.empty() ? m.file_name : m.resolved_file;
      if (std::find(files.begin(), files.end(), json(name)) == files.end()) files.push_back(name);
      if (m.resolved_file.empty() &&
          std::find(missing.begin(), missing.end(), json(m.file_name)) == missing.end()) {
        missing.push_back(m.file_name);
      }
      // The file is there but not the source dataset (behind a dangling external link, say).
      const std::string gone = m.file_name + ":" + m.dataset_name;
      if (!m.source_missing.empty() && std::find(missing.begin(), missing.end(), json(gone)) == missing.end())
        missing.push_back(gone);
    }
    j["virtual"] = {{"source_files", files}, {"missing_files", missing}, {"mappings", maps}};
  }
  return j;
}

}  // namespace h5d::vfs
