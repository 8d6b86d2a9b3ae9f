#include "core/h5lib/h5proto.h"

#include <cstring>

#include "core/vocab/shape.h"

namespace h5d::proto {

const char* op_name(Op op) {
  switch (op) {
    case Op::ListGroup: return "list_group";
    case Op::KindOf: return "kind_of";
    case Op::Attributes: return "attributes";
    case Op::DatasetInfo: return "dataset_info";
    case Op::ReadValue: return "read_value";
    case Op::LibraryRead: return "library_read (H5Dread)";
    case Op::MetaExists: return "exists";
    case Op::MetaIsDataset: return "is_dataset";
    case Op::MetaIsGroup: return "is_group";
    case Op::MetaSoftLink: return "soft_link_target";
    case Op::MetaReadU64: return "read_u64";
    case Op::MetaReadI64: return "read_i64";
    case Op::MetaReadIndex: return "read_index";
    case Op::MetaReadStrings: return "read_strings";
    case Op::MetaListDatasets: return "list_datasets";
    case Op::MetaListMembers: return "list_members";
    case Op::DatasetDetails: return "dataset_details";
    case Op::MetaSequenceFile: return "read_sequence_file";
    case Op::DatasetsDetails: return "datasets_details";
    case Op::WriteCreateFile: return "create_file (H5Fcreate)";
    case Op::WriteExists: return "exists (H5Lexists)";
    case Op::WriteCreateGroup: return "create_group (H5Gcreate2)";
    case Op::WriteCreateDataset: return "create_dataset (H5Dcreate2)";
    case Op::WriteChunk: return "write_chunk (H5Dwrite_chunk)";
    case Op::ReadChunk: return "read_chunk (H5Dread_chunk)";
    case Op::WriteCloseDataset: return "close_dataset (H5Dclose)";
    case Op::WriteFlush: return "flush (H5Fflush)";
    case Op::WriteCloseFile: return "close_file (H5Fclose)";
    case Op::DatasetInfos: return "dataset_infos";
    case Op::AttributeNames: return "attribute_names";
    case Op::Attribute: return "attribute";
  }
  return "?";
}

void encode_header(const Header& h, uint8_t out[kHeaderSize]) {
  const uint32_t magic = kMagic;
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &h.version, 2);
  std::memcpy(out + 6, &h.kind, 2);
  std::memcpy(out + 8, &h.seq, 4);
  std::memcpy(out + 12, &h.length, 4);
}

Header decode_header(const uint8_t in[kHeaderSize], uint32_t max_length) {
  uint32_t magic;
  Header h;
  std::memcpy(&magic, in, 4);
  std::memcpy(&h.version, in + 4, 2);
  std::memcpy(&h.kind, in + 6, 2);
  std::memcpy(&h.seq, in + 8, 4);
  std::memcpy(&h.length, in + 12, 4);
  if (magic != kMagic) fail(EIO, "malformed message: bad magic");
  if (h.version != kVersion)
    fail(EIO, "malformed message: version " + std::to_string(h.version) + ", expected " +
                  std::to_string(kVersion));
  if (h.length > max_length)
    fail(EIO, "malformed message: " + std::to_string(h.length) + " bytes, limit " +
                  std::to_string(max_length));
  return h;
}

void In::bad(const std::string& why) const { fail(EIO, "malformed reply: " + why); }

void In::raw(void* out, size_t n) {
  if (n > left()) bad("truncated (" + std::to_string(n) + " bytes wanted, " + std::to_string(left()) + " left)");
  if (n) std::memcpy(out, p_, n);
  p_ += n;
}

template <class T>
T In::scalar() {
  T v;
  raw(&v, sizeof v);
  return v;
}
uint8_t In::u8() { return scalar<uint8_t>(); }
uint32_t In::u32() { return scalar<uint32_t>(); }
uint64_t In::u64() { return scalar<uint64_t>(); }
double In::f64() { return scalar<double>(); }

size_t In::count(size_t min_bytes) {
  const uint64_t n = u64();
  if (min_bytes == 0) min_bytes = 1;
  if (n > left() / min_bytes) bad("count " + std::to_string(n) + " exceeds the message");
  return static_cast<size_t>(n);
}

std::string In::str() {
  const size_t n = count(1);
  std::string s(n, '\0');
  raw(s.data(), n);
  return s;
}

void In::end() const {
  if (left()) bad(std::to_string(left()) + " bytes left over");
}

namespace {

struct Nest {
  explicit Nest(In& in) : in_(in) {
    if (++in_.depth > kMaxDepth) in_.bad("nested deeper than " + std::to_string(kMaxDepth));
  }
  ~Nest() { --in_.depth; }
  In& in_;
};

void put_shape(Out& o, const Shape& s) {
  o.u64(s.size());
  for (auto x : s) o.u64(x);
}

void get_shape(In& in, Shape& s) {
  const size_t n = in.count(8);
  if (n > kMaxRank) in.bad("rank " + std::to_string(n));
  s.resize(n);
  for (auto& x : s) x = in.u64();
}

}  // namespace

void put(Out& o, bool v) { o.u8(v ? 1 : 0); }
void put(Out& o, uint32_t v) { o.u32(v); }
void put(Out& o, uint64_t v) { o.u64(v); }
void put(Out& o, int64_t v) { o.u64(static_cast<uint64_t>(v)); }
void put(Out& o, const std::string& v) { o.str(v); }
void put(Out& o, const std::vector<uint8_t>& v) { o.bytes(v.data(), v.size()); }

void get(In& in, bool& v) {
  const uint8_t b = in.u8();
  if (b > 1) in.bad("bool " + std::to_string(b));
  v = b != 0;
}
void get(In& in, uint32_t& v) { v = in.u32(); }
void get(In& in, uint64_t& v) { v = in.u64(); }
void get(In& in, int64_t& v) { v = static_cast<int64_t>(in.u64()); }
void get(In& in, std::string& v) { v = in.str(); }
void get(In& in, std::vector<uint8_t>& v) {
  v.resize(in.count(1));
  in.raw(v.data(), v.size());
}

void put(Out& o, const Value& v) {
  o.u8(static_cast<uint8_t>(v.kind));
  switch (v.kind) {
    case Value::Kind::Null: break;
    case Value::Kind::Bool: o.u8(v.b); break;
    case Value::Kind::Int: o.u64(static_cast<uint64_t>(v.i)); break;
    case Value::Kind::UInt: o.u64(v.u); break;
    case Value::Kind::Float: o.f64(v.f); break;
    case Value::Kind::String: o.str(v.s); break;
    case Value::Kind::List: put(o, v.items); break;
    case Value::Kind::Object: put(o, v.members); break;
  }
}

void get(In& in, Value& v) {
  Nest nest(in);
  const uint8_t k = in.u8();
  if (k > static_cast<uint8_t>(Value::Kind::Object)) in.bad("value kind " + std::to_string(k));
  v = Value{};
  v.kind = static_cast<Value::Kind>(k);
  switch (v.kind) {
    case Value::Kind::Null: break;
    case Value::Kind::Bool: get(in, v.b); break;
    case Value::Kind::Int: v.i = static_cast<int64_t>(in.u64()); break;
    case Value::Kind::UInt: v.u = in.u64(); break;
    case Value::Kind::Float: v.f = in.f64(); break;
    case Value::Kind::String: v.s = in.str(); break;
    case Value::Kind::List: get(in, v.items); break;
    case Value::Kind::Object: get(in, v.members); break;
  }
}

void put(Out& o, const DType& t) {
  o.str(t.typestr);
  o.u64(t.itemsize);
  o.u64(t.fields.size());
  for (const Field& f : t.fields) {
    o.str(f.name);
    o.u64(f.offset);
    put(o, f.type.empty() ? DType{} : f.type[0]);
    put_shape(o, f.subshape);
  }
}

void get(In& in, DType& t) {
  Nest nest(in);
  t = DType{};
  t.typestr = in.str();
  t.itemsize = in.u64();
  if (t.itemsize > kMaxItemsize) in.bad("itemsize " + std::to_string(t.itemsize));
  t.fields.resize(in.count(8 * 4));
  for (Field& f : t.fields) {
    f.name = in.str();
    f.offset = in.u64();
    f.type.resize(1);
    get(in, f.type[0]);
    get_shape(in, f.subshape);
    uint64_t n = 1;
    for (auto d : f.subshape) {
      if (d && n > kMaxItemsize / d) in.bad("field " + f.name + " too large");
      n *= d;
    }
    const uint64_t fsize = f.type[0].itemsize;
    if (n && fsize > kMaxItemsize / n) in.bad("field " + f.name + " too large");
    if (f.offset > t.itemsize || fsize * n > t.itemsize - f.offset)
      in.bad("field " + f.name + " beyond its compound (offset " + std::to_string(f.offset) + ")");
  }
}

void put(Out& o, const FilterInfo& f) {
  o.u64(static_cast<uint64_t>(static_cast<int64_t>(f.id)));
  o.str(f.name);
  o.u32(f.flags);
  o.u64(f.cd_values.size());
  for (auto c : f.cd_values) o.u32(c);
}

void get(In& in, FilterInfo& f) {
  f.id = static_cast<int>(static_cast<int64_t>(in.u64()));
  f.name = in.str();
  f.flags = in.u32();
  f.cd_values.resize(in.count(4));
  for (auto& c : f.cd_values) c = in.u32();
}

void put(Out& o, const Hyperslab& h) {
  put(o, h.is_all);
  put_shape(o, h.start);
  put_shape(o, h.stride);
  put_shape(o, h.count);
  put_shape(o, h.block);
}

void get(In& in, Hyperslab& h) {
  get(in, h.is_all);
  get_shape(in, h.start);
  get_shape(in, h.stride);
  get_shape(in, h.count);
  get_shape(in, h.block);
  const size_t r = h.start.size();
  if (h.stride.size() != r || h.count.size() != r || h.block.size() != r) in.bad("hyperslab ranks differ");
}

void put(Out& o, const VdsMapping& m) {
  o.str(m.file_name);
  o.str(m.dataset_name);
  o.str(m.resolved_file);
  put(o, m.vspace);
  put(o, m.srcspace);
  put_shape(o, m.src_shape);
  o.str(m.source_missing);
}

void get(In& in, VdsMapping& m) {
  m.file_name = in.str();
  m.dataset_name = in.str();
  m.resolved_file = in.str();
  get(in, m.vspace);
  get(in, m.srcspace);
  get_shape(in, m.src_shape);
  m.source_missing = in.str();
}

void put(Out& o, ObjectKind k) { o.u8(static_cast<uint8_t>(k)); }
void get(In& in, ObjectKind& k) {
  const uint8_t v = in.u8();
  if (v > static_cast<uint8_t>(ObjectKind::Other)) in.bad("object kind " + std::to_string(v));
  k = static_cast<ObjectKind>(v);
}

void put(Out& o, const LinkEntry& e) {
  o.str(e.name);
  put(o, e.kind);
  o.str(e.soft_target);
  o.str(e.file);
  o.str(e.ancestor);
}

void get(In& in, LinkEntry& e) {
  e.name = in.str();
  get(in, e.kind);
  e.soft_target = in.str();
  e.file = in.str();
  e.ancestor = in.str();
}

void put(Out& o, const DatasetInfo& d) {
  o.str(d.file);
  o.str(d.path);
  put_shape(o, d.shape);
  put_shape(o, d.maxshape);
  put(o, d.dtype);
  put(o, d.is_array);
  o.str(d.why_not_array);
  o.str(d.hdf5_type);
  o.str(d.layout);
  put_shape(o, d.chunks);
  o.str(d.chunk_index);
  put(o, d.filters);
  put(o, d.fill_value);
  put(o, d.fill_value_defined);
  put(o, d.attrs);
  put(o, d.vds);
  o.str(d.read_path);
  put(o, d.convert_type);
  put(o, d.small_value);
}

void get(In& in, DatasetInfo& d) {
  d.file = in.str();
  d.path = in.str();
  get_shape(in, d.shape);
  get_shape(in, d.maxshape);
  get(in, d.dtype);
  get(in, d.is_array);
  d.why_not_array = in.str();
  d.hdf5_type = in.str();
  d.layout = in.str();
  get_shape(in, d.chunks);
  d.chunk_index = in.str();
  get(in, d.filters);
  get(in, d.fill_value);
  get(in, d.fill_value_defined);
  get(in, d.attrs);
  get(in, d.vds);
  d.read_path = in.str();
  get(in, d.convert_type);
  get(in, d.small_value);
}

void put(Out& o, const StorageInfo& s) {
  o.u64(s.ds_rank);
  o.u64(s.ohdr_addr);
  o.u64(s.geo.base);
  o.u8(s.geo.sizeof_offsets);
  o.u8(s.geo.sizeof_lengths);
  o.u64(s.contiguous_addr);
  o.u64(s.storage_size);
  put(o, s.external);
  put(o, s.library_only);
  o.str(s.library_reason);
  o.str(s.damaged);
  o.u64(static_cast<uint64_t>(s.file_id.dev));
  o.u64(static_cast<uint64_t>(s.file_id.ino));
  o.u64(static_cast<uint64_t>(s.file_id.size));
  o.u64(static_cast<uint64_t>(s.file_id.mtime_ns));
}

void get(In& in, StorageInfo& s) {
  s.ds_rank = in.u64();
  s.ohdr_addr = in.u64();
  s.geo.base = in.u64();
  s.geo.sizeof_offsets = in.u8();
  s.geo.sizeof_lengths = in.u8();
  s.contiguous_addr = in.u64();
  s.storage_size = in.u64();
  get(in, s.external);
  get(in, s.library_only);
  s.library_reason = in.str();
  s.damaged = in.str();
  s.file_id.dev = static_cast<dev_t>(in.u64());
  s.file_id.ino = static_cast<ino_t>(in.u64());
  s.file_id.size = static_cast<int64_t>(in.u64());
  s.file_id.mtime_ns = static_cast<int64_t>(in.u64());
}

void put(Out& o, const InfoAnswer& a) {
  put(o, a.ok);
  if (a.ok) {
    put(o, a.info);
    put(o, a.storage);
  } else {
    o.u32(a.code);
    o.str(a.error);
  }
}

void get(In& in, InfoAnswer& a) {
  get(in, a.ok);
  if (a.ok) {
    get(in, a.info);
    get(in, a.storage);
  } else {
    a.code = in.u32();
    a.error = in.str();
  }
}

void validate(DatasetInfo& d, const StorageInfo& st) {
  const std::string what = d.file + ":" + d.path + ": metadata from the HDF5 helper: ";
  auto bad = [&](const std::string& why) { fail(EIO, what + why); };
  const size_t rank = d.shape.size();
  if (!d.maxshape.empty() && d.maxshape.size() != rank) bad("maxshape rank differs from the shape's");
  if (st.ds_rank > rank) bad("dataspace rank above the shape's");
  auto size_ok = [](uint8_t s) { return s == 2 || s == 4 || s == 8 || s == 16; };
  if (!size_ok(st.geo.sizeof_offsets) || !size_ok(st.geo.sizeof_lengths)) bad("bad offset/length sizes");
  if (d.layout == "chunked" && d.is_array) {
    if (d.chunks.size() != st.ds_rank && d.chunks.size() != rank) bad("chunk rank differs from the dataspace's");
    for (auto c : d.chunks)
      if (c == 0) bad("zero chunk dimension");
  }
  if (!d.is_array) return;
  if (d.dtype.itemsize == 0) bad("array of zero-size elements");
  if (d.fill_value.size() > kMaxItemsize) bad("fill value too large");
  // As the helper itself decides (read_type_and_shape): an element larger than the file cannot
  // be stored in it; its type size is damaged, and nothing may be sized from it. (Contiguous
  // storage is what the daemon can see allocated; fill-only datasets may have such elements.)
  if (st.file_id.size > 0 && d.dtype.itemsize > static_cast<uint64_t>(st.file_id.size) &&
      st.contiguous_addr != fmt::kUndefAddr) {
    d.is_array = false;
    d.why_not_array = "element of " + std::to_string(d.dtype.itemsize) + " bytes, larger than the file (" +
                      std::to_string(st.file_id.size) + " bytes): a damaged datatype";
    d.read_path = "none: " + d.why_not_array;
    d.fill_value.clear();
    return;
  }
  // Bytes of the whole array: at most 2^63 (file offsets and .npy sizes are signed 64-bit).
  unsigned __int128 n = d.dtype.itemsize;
  for (auto x : d.shape) {
    n *= x;
    if (n > (static_cast<unsigned __int128>(1) << 63)) {
      d.is_array = false;
      d.why_not_array = "more than 2^63 bytes: no .npy or .raw can hold it";
      d.read_path = "none: " + d.why_not_array;
      return;
    }
  }
}

void put(Out& o, const euxfel::meta::IndexArrays& v) {
  put(o, v.firsts);
  put(o, v.counts);
  put(o, v.error);
}

void get(In& in, euxfel::meta::IndexArrays& v) {
  get(in, v.firsts);
  get(in, v.counts);
  get(in, v.error);
  if (v.firsts.size() != v.counts.size()) in.bad("INDEX first and count of different lengths");
}

void put(Out& o, const euxfel::meta::SequenceMeta& v) {
  put(o, v.format_version);
  put(o, v.train_ids);
  put(o, v.valid);
  put(o, v.control_sources);
  put(o, v.instrument_sources);
  put(o, v.legacy);
  put(o, v.source_groups);
  put(o, v.index);
  put(o, v.notes);
  put(o, v.metadata_values);
}

void get(In& in, euxfel::meta::SequenceMeta& v) {
  get(in, v.format_version);
  get(in, v.train_ids);
  get(in, v.valid);
  get(in, v.control_sources);
  get(in, v.instrument_sources);
  get(in, v.legacy);
  get(in, v.source_groups);
  get(in, v.index);
  get(in, v.notes);
  get(in, v.metadata_values);
}

}  // namespace h5d::proto
