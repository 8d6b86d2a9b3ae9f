#include "core/vocab/dtype.h"

#include <algorithm>

namespace h5d {
namespace {

std::string py_str(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string shape_literal(const std::vector<uint64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += std::to_string(shape[i]);
    out += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) out += " ";
  }
  return out + ")";
}

}  // namespace

std::string npy_descr_literal(const DType& t) {
  if (!t.is_struct()) return py_str(t.typestr);
  std::vector<const Field*> fields;
  for (const auto& f : t.fields) fields.push_back(&f);
  std::sort(fields.begin(), fields.end(), [](const Field* a, const Field* b) { return a->offset < b->offset; });
  std::string out = "[";
  size_t pos = 0;
  bool first = true;
  auto add = [&](const std::string& item) {
    if (!first) out += ", ";
    first = false;
    out += item;
  };
  for (const Field* f : fields) {
    if (f->offset > pos) add("('', '|V" + std::to_string(f->offset - pos) + "')");
    const DType& ft = f->type.at(0);
    std::string item = "(" + py_str(f->name) + ", " + npy_descr_literal(ft);
    uint64_t n = 1;
    if (!f->subshape.empty()) {
      item += ", " + shape_literal(f->subshape);
      for (auto d : f->subshape) n *= d;
    }
    add(item + ")");
    pos = f->offset + ft.itemsize * n;
  }
  if (t.itemsize > pos) add("('', '|V" + std::to_string(t.itemsize - pos) + "')");
  return out + "]";
}

bool same_dtype(const DType& a, const DType& b) {
  return a.typestr == b.typestr && a.itemsize == b.itemsize && a.fields.size() == b.fields.size();
}

}  // namespace h5d
