// A small tree of plain values (attributes, run-start values, small string datasets) that the
// layers above render as JSON. core itself never speaks JSON.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace h5d {

struct Value {
  enum class Kind { Null, Bool, Int, UInt, Float, String, List, Object };
  Kind kind = Kind::Null;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<Value> items;                            // List
  std::vector<std::pair<std::string, Value>> members;  // Object, in order

  static Value null() { return Value{}; }
  static Value boolean(bool v) { Value x; x.kind = Kind::Bool; x.b = v; return x; }
  static Value integer(int64_t v) { Value x; x.kind = Kind::Int; x.i = v; return x; }
  static Value uinteger(uint64_t v) { Value x; x.kind = Kind::UInt; x.u = v; return x; }
  static Value number(double v) { Value x; x.kind = Kind::Float; x.f = v; return x; }
  static Value string(std::string v) { Value x; x.kind = Kind::String; x.s = std::move(v); return x; }
  static Value list(std::vector<Value> v = {}) { Value x; x.kind = Kind::List; x.items = std::move(v); return x; }
  static Value object() { Value x; x.kind = Kind::Object; return x; }
  Value& set(std::string key, Value v) { members.emplace_back(std::move(key), std::move(v)); return *this; }
};

}  // namespace h5d
