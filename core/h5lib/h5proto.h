// The messages between the daemon and its HDF5 helper processes (h5helper.h): length-prefixed,
// versioned, bounded binary. Every field read back is checked against what is left of the
// message and against fixed limits, so a helper that returns garbage (a libhdf5 heap overflow,
// a half-written reply) costs an Error(EIO), never an unbounded allocation or a bad index.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/vocab/dtype.h"
#include "core/error.h"
#include "core/h5lib/run_meta.h"
#include "core/h5lib/h5file.h"
#include "core/vocab/value.h"

namespace h5d::proto {

constexpr uint32_t kMagic = 0x49443548;  // "H5DI" little-endian
constexpr uint16_t kVersion = 9;  // 2: MetaSequenceFile; 3: LinkEntry::file; 4: the Write* ops; 5: DatasetsDetails;
                                  // 6: DatasetInfos, StorageInfo::damaged; 7: LinkEntry::ancestor,
                                  // AttributeNames, Attribute; 8: MetaSequenceFile's with_index;
                                  // 9: the sandbox's messages (kBrokerOpen ...)
constexpr size_t kHeaderSize = 16;        // magic u32, version u16, kind u16, seq u32, length u32
constexpr uint32_t kMaxRequest = 1u << 20;
// WriteChunk carries a chunk's encoded bytes: chunks are below 4 GiB (plan_dataset) and at most
// write_buffer (the writer refuses larger ones), so a u32 length holds every one it sends.
constexpr uint32_t kMaxWriteRequest = 0xffffffffu;
constexpr uint32_t kMaxMetaReply = 64u << 20;  // metadata replies (listings, attributes, ...)
constexpr uint32_t kMaxDataReply = 1u << 30;   // a library read: also exactly the bytes asked for
constexpr size_t kMaxRank = 32;
constexpr size_t kMaxDepth = 32;               // nesting of Values and compound types
constexpr uint64_t kMaxItemsize = 1ull << 32;

enum class Op : uint16_t {
  ListGroup = 1,
  KindOf,
  Attributes,
  DatasetInfo,
  ReadValue,
  LibraryRead,
  MetaExists,
  MetaIsDataset,
  MetaIsGroup,
  MetaSoftLink,
  MetaReadU64,
  MetaReadI64,
  MetaReadIndex,
  MetaReadStrings,
  MetaListDatasets,
  MetaListMembers,
  DatasetDetails,
  MetaSequenceFile,  // everything Run::open reads from one sequence file (meta::read_sequence_file)
  DatasetsDetails,   // dataset_details of several datasets of one file (H5File::datasets_details)
  // A written file's writer process (core/write/, one process per file): the first request
  // creates the file, the others act on it; every one names the file.
  WriteCreateFile,
  WriteExists,
  WriteCreateGroup,
  WriteCreateDataset,
  WriteChunk,
  ReadChunk,
  WriteCloseDataset,
  WriteFlush,
  WriteCloseFile,
  // dataset_info of one dataset in each of several files, one InfoAnswer each (H5File::prefetch_infos:
  // the parts of a concatenation a read touches). The request's file is the first one.
  DatasetInfos,
  // H5File::attribute_names and H5File::attribute: an object's attributes one by one, when
  // reading them all at once (Attributes) broke the helper.
  AttributeNames,
  Attribute,
  Last = Attribute,
};
const char* op_name(Op op);
inline bool is_write_op(Op op) { return op >= Op::WriteCreateFile && op <= Op::WriteCloseFile; }

// Reply kinds (the header's kind field in a reply).
constexpr uint16_t kReplyOk = 0;
constexpr uint16_t kReplyError = 1;  // body: errno (u32), message (string)

// The sandbox's messages (docs/architecture.md, "The sandbox"). A sandboxed helper has no file
// system: while it serves a request, it asks the daemon to open each file libhdf5 (or its own
// code) opens, and the daemon answers with the descriptor or a refusal. They travel on the same
// socket as requests and replies; the daemon reads them while it waits for a reply
// (HelperProcess::exchange).
// helper -> daemon: body path (string), open flags (u32), mode (u32).
constexpr uint16_t kBrokerOpen = 0x100;
// helper -> daemon: body path (string), flags (u32: kStatNoFollow): the file's status.
constexpr uint16_t kBrokerStat = 0x104;
constexpr uint32_t kStatNoFollow = 1;
// daemon -> helper: body errno (u32): 0 with one descriptor attached (SCM_RIGHTS) for an open,
// 0 followed by the struct stat's bytes for a stat; else the refusal.
constexpr uint16_t kBrokerAnswer = 0x101;
constexpr uint32_t kMaxBrokerMessage = 8192;  // a path of at most PATH_MAX and the two numbers
// helper -> daemon, once, before its first reply: what its sandbox holds (body: string,
// describe() of the layers entered).
constexpr uint16_t kSandboxReport = 0x102;
// helper -> daemon, from its SIGSYS handler: the number (u32) of a system call the filter refused
// as one a parser has no business making; the helper then dies of SIGSYS.
constexpr uint16_t kRefusedCall = 0x103;

// One answer of a DatasetInfos batch: the dataset's metadata, or the error its own DatasetInfo
// request gave in the helper.
struct InfoAnswer {
  bool ok = false;
  DatasetInfo info;
  StorageInfo storage;
  uint32_t code = 0;
  std::string error;
};

struct Header {
  uint16_t version = kVersion;
  uint16_t kind = 0;  // request: Op; reply: kReplyOk / kReplyError
  uint32_t seq = 0;
  uint32_t length = 0;
};
void encode_header(const Header& h, uint8_t out[kHeaderSize]);
// Throws Error(EIO) when the magic or version is wrong or length exceeds max_length.
Header decode_header(const uint8_t in[kHeaderSize], uint32_t max_length);

class Out {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) { u64(s.size()); buf_.append(s); }
  void bytes(const void* p, size_t n) { u64(n); raw(p, n); }
  const std::string& data() const { return buf_; }
  std::string take() { return std::move(buf_); }

 private:
  void raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Reads a message body; every read is bounds-checked (Error(EIO) "malformed reply: ...").
class In {
 public:
  In(const void* p, size_t n) : p_(static_cast<const uint8_t*>(p)), end_(p_ + n) {}
  explicit In(const std::string& s) : In(s.data(), s.size()) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  double f64();
  std::string str();
  // A count of elements each taking at least min_bytes of what is left: bounds allocations.
  size_t count(size_t min_bytes = 1);
  void raw(void* out, size_t n);
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  void end() const;  // throws when bytes are left over
  [[noreturn]] void bad(const std::string& why) const;
  unsigned depth = 0;  // current nesting (Values, types)

 private:
  template <class T>
  T scalar();
  const uint8_t* p_;
  const uint8_t* end_;
};

// Codecs, one pair per type that crosses the boundary.
void put(Out& o, bool v);
void put(Out& o, uint32_t v);
void put(Out& o, uint64_t v);
void put(Out& o, int64_t v);
void put(Out& o, const std::string& v);
void put(Out& o, const Value& v);
void put(Out& o, const DType& v);
void put(Out& o, const FilterInfo& v);
void put(Out& o, const Hyperslab& v);
void put(Out& o, const VdsMapping& v);
void put(Out& o, const LinkEntry& v);
void put(Out& o, ObjectKind v);
void put(Out& o, const DatasetInfo& v);
void put(Out& o, const StorageInfo& v);
void put(Out& o, const std::vector<uint8_t>& v);
void put(Out& o, const euxfel::meta::IndexArrays& v);
void put(Out& o, const euxfel::meta::SequenceMeta& v);
void put(Out& o, const InfoAnswer& v);
template <class A, class B>
void put(Out& o, const std::pair<A, B>& v) {
  put(o, v.first);
  put(o, v.second);
}
template <class T>
void put(Out& o, const std::vector<T>& v) {
  o.u64(v.size());
  for (const auto& x : v) put(o, x);
}
template <class K, class V>
void put(Out& o, const std::map<K, V>& m) {
  o.u64(m.size());
  for (const auto& kv : m) put(o, kv);
}

void get(In& in, bool& v);
void get(In& in, uint32_t& v);
void get(In& in, uint64_t& v);
void get(In& in, int64_t& v);
void get(In& in, std::string& v);
void get(In& in, Value& v);
void get(In& in, DType& v);
void get(In& in, FilterInfo& v);
void get(In& in, Hyperslab& v);
void get(In& in, VdsMapping& v);
void get(In& in, LinkEntry& v);
void get(In& in, ObjectKind& v);
void get(In& in, DatasetInfo& v);
void get(In& in, StorageInfo& v);
void get(In& in, std::vector<uint8_t>& v);
void get(In& in, euxfel::meta::IndexArrays& v);
void get(In& in, euxfel::meta::SequenceMeta& v);
void get(In& in, InfoAnswer& v);
template <class A, class B>
void get(In& in, std::pair<A, B>& v) {
  get(in, v.first);
  get(in, v.second);
}
template <class T>
void get(In& in, std::vector<T>& v) {
  const size_t n = in.count();
  v.clear();
  v.resize(n);
  for (auto& x : v) get(in, x);
}
template <class K, class V>
void get(In& in, std::map<K, V>& m) {
  const size_t n = in.count();
  m.clear();
  for (size_t i = 0; i < n; ++i) {
    std::pair<K, V> kv;
    get(in, kv);
    if (!m.emplace(std::move(kv)).second) in.bad("a key twice in a map");
  }
}

// A whole reply body as one R: Error(EIO) "malformed reply" when it is not exactly that.
template <class R>
R decode_all(const std::string& body) {
  In in(body);
  R r;
  get(in, r);
  in.end();
  return r;
}

// Checks a dataset's metadata from a helper for consistency (ranks, sizes, offsets); throws
// Error(EIO) naming what is wrong. Datasets of more than 2^63 bytes are turned into non-arrays
// (why_not_array says so): no file offset or .npy size can hold them.
void validate(DatasetInfo& info, const StorageInfo& st);

}  // namespace h5d::proto
