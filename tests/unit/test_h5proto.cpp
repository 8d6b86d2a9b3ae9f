// The daemon <-> HDF5 helper messages (core/h5lib/h5proto.h): what goes in comes out, and what a
// broken helper could send (truncated, oversized, deeply nested, inconsistent) is refused with
// Error(EIO) instead of being trusted.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <string>

#include "core/error.h"
#include "core/h5lib/h5proto.h"

using namespace h5d;

namespace {

DatasetInfo sample_info() {
  DatasetInfo d;
  d.file = "/data/a.h5";
  d.path = "/g/x";
  d.shape = {3, 4};
  d.maxshape = {~0ull, 4};
  d.dtype.typestr = "";
  d.dtype.itemsize = 12;
  Field a{"a", 0, {DType{"<f8", 8, {}}}, {}};
  Field b{"b", 8, {DType{"<u2", 2, {}}}, {2}};
  d.dtype.fields = {a, b};
  d.layout = "chunked";
  d.chunks = {1, 4};
  d.chunk_index = "btree-v1";
  d.filters = {FilterInfo{1, "deflate", 0, {4}}};
  d.fill_value.assign(12, 7);
  d.fill_value_defined = true;
  Value list = Value::list({Value::integer(-3), Value::string("s"), Value::number(0.5)});
  d.attrs = {{"n", list}, {"ok", Value::boolean(true)}};
  VdsMapping m;
  m.file_name = "src.h5";
  m.vspace.is_all = true;
  m.vspace.start = {0};
  m.vspace.stride = {1};
  m.vspace.count = {1};
  m.vspace.block = {3};
  m.srcspace = m.vspace;
  d.vds = {m};
  d.read_path = "direct";
  return d;
}

StorageInfo sample_storage() {
  StorageInfo s;
  s.ds_rank = 2;
  s.ohdr_addr = 800;
  s.geo.base = 512;
  s.contiguous_addr = 4096;
  s.file_id.ino = 42;
  s.file_id.size = 10000;
  return s;
}

std::string encode(const DatasetInfo& d, const StorageInfo& s) {
  proto::Out o;
  proto::put(o, d);
  proto::put(o, s);
  return o.take();
}

std::pair<DatasetInfo, StorageInfo> decode(const std::string& bytes) {
  proto::In in(bytes);
  std::pair<DatasetInfo, StorageInfo> r;
  proto::get(in, r);
  in.end();
  return r;
}

}  // namespace

TEST_CASE("h5proto: dataset metadata round-trips field by field", "[h5proto]") {
  const DatasetInfo d = sample_info();
  const StorageInfo s = sample_storage();
  auto [d2, s2] = decode(encode(d, s));
  CHECK(d2.file == d.file);
  CHECK(d2.shape == d.shape);
  CHECK(d2.maxshape == d.maxshape);
  CHECK(d2.dtype.itemsize == 12);
  REQUIRE(d2.dtype.fields.size() == 2);
  CHECK(d2.dtype.fields[1].name == "b");
  CHECK(d2.dtype.fields[1].offset == 8);
  CHECK(d2.dtype.fields[1].type[0].typestr == "<u2");
  CHECK(d2.dtype.fields[1].subshape == std::vector<uint64_t>{2});
  CHECK(d2.filters.at(0).cd_values == std::vector<unsigned>{4});
  CHECK(d2.fill_value == d.fill_value);
  REQUIRE(d2.attrs.size() == 2);
  CHECK(d2.attrs[0].second.items.at(0).i == -3);
  CHECK(d2.attrs[0].second.items.at(1).s == "s");
  CHECK(d2.attrs[1].second.b);
  CHECK(d2.vds.at(0).file_name == "src.h5");
  CHECK(s2.ohdr_addr == 800);
  CHECK(s2.geo.base == 512);
  CHECK(s2.file_id.ino == 42);
  CHECK_NOTHROW(proto::validate(d2, s2));
}

TEST_CASE("h5proto: every truncation of a reply is refused", "[h5proto]") {
  const std::string full = encode(sample_info(), sample_storage());
  for (size_t n = 0; n < full.size(); ++n) {
    INFO(n);
    CHECK_THROWS_AS(decode(full.substr(0, n)), Error);
  }
  CHECK_THROWS_AS(decode(full + "x"), Error);  // bytes left over
}

TEST_CASE("h5proto: counts larger than the message and deep nesting are refused", "[h5proto]") {
  proto::Out o;
  o.u64(~0ull);  // a string of 2^64-1 bytes
  proto::In in(o.data());
  CHECK_THROWS_AS(in.str(), Error);

  proto::Out v;  // 100 nested lists
  for (int i = 0; i < 100; ++i) {
    v.u8(static_cast<uint8_t>(Value::Kind::List));
    v.u64(1);
  }
  v.u8(static_cast<uint8_t>(Value::Kind::Null));
  proto::In vin(v.data());
  Value out;
  CHECK_THROWS_AS(proto::get(vin, out), Error);

  proto::Out k;  // unknown value kind
  k.u8(99);
  proto::In kin(k.data());
  CHECK_THROWS_AS(proto::get(kin, out), Error);
}

TEST_CASE("h5proto: a compound field beyond its compound is refused", "[h5proto]") {
  DatasetInfo d = sample_info();
  d.dtype.fields[1].offset = 11;  // 11 + 2*2 > 12
  CHECK_THROWS_AS(decode(encode(d, sample_storage())), Error);
}

TEST_CASE("h5proto: headers check magic, version and length", "[h5proto]") {
  uint8_t hb[proto::kHeaderSize];
  proto::Header h;
  h.kind = 3;
  h.seq = 9;
  h.length = 100;
  proto::encode_header(h, hb);
  auto back = proto::decode_header(hb, 1000);
  CHECK(back.kind == 3);
  CHECK(back.seq == 9);
  CHECK(back.length == 100);
  CHECK_THROWS_AS(proto::decode_header(hb, 99), Error);  // above the limit
  uint8_t bad[proto::kHeaderSize];
  std::memcpy(bad, hb, sizeof bad);
  bad[0] ^= 1;
  CHECK_THROWS_AS(proto::decode_header(bad, 1000), Error);
  std::memcpy(bad, hb, sizeof bad);
  bad[4] = static_cast<uint8_t>(proto::kVersion + 1);  // a version this build does not speak
  CHECK_THROWS_AS(proto::decode_header(bad, 1000), Error);
}

TEST_CASE("h5proto: validate refuses inconsistent metadata, demotes > 2^63 bytes", "[h5proto]") {
  DatasetInfo d = sample_info();
  StorageInfo s = sample_storage();
  d.chunks = {1, 2, 3};
  CHECK_THROWS_AS(proto::validate(d, s), Error);
  d = sample_info();
  d.maxshape = {1};
  CHECK_THROWS_AS(proto::validate(d, s), Error);
  d = sample_info();
  s.geo.sizeof_offsets = 3;
  CHECK_THROWS_AS(proto::validate(d, s), Error);
  s = sample_storage();
  d.shape = {1ull << 40, 1ull << 30};  // 12 * 2^70 bytes
  d.chunks = {1, 1};
  REQUIRE_NOTHROW(proto::validate(d, s));
  CHECK_FALSE(d.is_array);
  CHECK(d.why_not_array.find("2^63") != std::string::npos);
  // An element larger than the file (10000 bytes): a damaged type size, demoted, fill dropped.
  d = sample_info();
  d.dtype.itemsize = 10001;
  d.fill_value.assign(10001, 0);
  REQUIRE_NOTHROW(proto::validate(d, s));
  CHECK_FALSE(d.is_array);
  CHECK(d.why_not_array.find("larger than the file") != std::string::npos);
  CHECK(d.fill_value.empty());
  // Without storage (all fill) such an element is what it says (h5repack_objs.h5 /arrayd).
  d = sample_info();
  d.dtype.itemsize = 10001;
  s.contiguous_addr = fmt::kUndefAddr;
  REQUIRE_NOTHROW(proto::validate(d, s));
  CHECK(d.is_array);
  s = sample_storage();
  d = sample_info();
  d.dtype.itemsize = 10000;
  d.fill_value.assign(10000, 0);
  REQUIRE_NOTHROW(proto::validate(d, s));
  CHECK(d.is_array);
}

TEST_CASE("h5proto: a sequence file's metadata round-trips; truncations and bad INDEX are refused", "[h5proto]") {
  euxfel::meta::SequenceMeta m;
  m.format_version = "1.3";
  m.train_ids = {10000, 10001, 10003};
  m.valid = {1, 0, 1};
  m.control_sources = {"SA1_XTD2_XGM/DOOCS/MAIN"};
  m.instrument_sources = {"SPB_DET_AGIPD1M-1/DET/0CH0:xtdf"};
  m.legacy = {{"SPB_DET_AGIPD1M-1/DET/0CH0:xtdf", "SPB_DET_AGIPD1M-1/DET/0CH0:xtdf"}};
  m.source_groups = {{"SA1_XTD2_XGM/DOOCS/MAIN", {""}}, {"SPB_DET_AGIPD1M-1/DET/0CH0:xtdf", {"image", "header"}}};
  m.index["/INDEX/SA1_XTD2_XGM/DOOCS/MAIN"] = {{0, 1, 2}, {1, 1, 1}, ""};
  m.index["/INDEX/x/image"] = {{}, {}, "no such group"};
  m.notes = {"a note"};
  m.metadata_values = {{"runNumber", Value::string("338")}};
  proto::Out o;
  proto::put(o, m);
  const std::string full = o.take();
  {
    proto::In in(full);
    euxfel::meta::SequenceMeta b;
    proto::get(in, b);
    in.end();
    CHECK(b.format_version == m.format_version);
    CHECK(b.train_ids == m.train_ids);
    CHECK(b.valid == m.valid);
    CHECK(b.control_sources == m.control_sources);
    CHECK(b.instrument_sources == m.instrument_sources);
    CHECK(b.legacy == m.legacy);
    CHECK(b.source_groups == m.source_groups);
    REQUIRE(b.index.size() == 2);
    CHECK(b.index["/INDEX/SA1_XTD2_XGM/DOOCS/MAIN"].firsts == std::vector<uint64_t>{0, 1, 2});
    CHECK(b.index["/INDEX/x/image"].error == "no such group");
    CHECK(b.notes == m.notes);
    REQUIRE(b.metadata_values.size() == 1);
    CHECK(b.metadata_values[0].second.s == "338");
  }
  for (size_t n = 0; n < full.size(); n += 7) {
    INFO(n);
    proto::In in(full.data(), n);
    euxfel::meta::SequenceMeta b;
    CHECK_THROWS_AS((proto::get(in, b), in.end()), Error);
  }
  m.index["/INDEX/x/image"] = {{1, 2}, {1}, ""};  // first and count of different lengths
  proto::Out bad;
  proto::put(bad, m);
  proto::In in(bad.data());
  euxfel::meta::SequenceMeta b;
  CHECK_THROWS_AS(proto::get(in, b), Error);
}

TEST_CASE("h5proto: every request has a name; the Write* ops are the writer process's", "[h5proto]") {
  std::set<std::string> names;
  for (uint16_t k = 1; k <= static_cast<uint16_t>(proto::Op::Last); ++k) {
    const auto op = static_cast<proto::Op>(k);
    const std::string name = proto::op_name(op);
    INFO(k << " " << name);
    CHECK(name != "?");
    CHECK(names.insert(name).second);  // log lines name the call: no two alike
  }
  using proto::Op;
  for (Op op : {Op::WriteCreateFile, Op::WriteExists, Op::WriteCreateGroup, Op::WriteCreateDataset, Op::WriteChunk,
                Op::ReadChunk, Op::WriteCloseDataset, Op::WriteFlush, Op::WriteCloseFile})
    CHECK(proto::is_write_op(op));
  for (Op op : {Op::ListGroup, Op::LibraryRead, Op::DatasetDetails, Op::MetaSequenceFile}) CHECK_FALSE(proto::is_write_op(op));
  // A chunk to write may be larger than any other request: only WriteChunk is allowed that.
  CHECK(proto::kMaxWriteRequest > proto::kMaxRequest);
}
