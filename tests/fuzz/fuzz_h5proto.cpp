// libFuzzer target for the daemon's decoder of HDF5 helper replies (core/h5lib/h5proto.cpp): a
// helper that libhdf5 corrupted may send any bytes. Byte 0 picks what the daemon expects (a
// message header, a group listing, attributes, one value, a dataset's metadata, a batch of
// them, attribute names, a sequence file's metadata); the rest is the reply body. Each decode
// either succeeds or throws h5d::Error (EIO, "malformed reply"); any other exception aborts,
// sanitizers catch the rest. What decodes is encoded again by the real encoder and must decode
// to the same bytes once more (nothing read that the encoder would not write), and a dataset's
// metadata then goes through proto::validate, as the daemon does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/h5lib/h5proto.h"

// libFuzzer's entry point, declared as its FuzzerInterface.h does.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace proto = h5d::proto;

void check(bool ok) {
  if (!ok) std::abort();
}

template <class R>
R round_trip(const std::string& body) {
  R r = proto::decode_all<R>(body);
  proto::Out o;
  proto::put(o, r);
  const std::string again = o.data();
  R r2 = proto::decode_all<R>(again);
  proto::Out o2;
  proto::put(o2, r2);
  check(o2.data() == again);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size - 1 > proto::kMaxRequest) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 8) {
      case 0: {
        if (body.size() < proto::kHeaderSize) return 0;
        const proto::Header h = proto::decode_header(reinterpret_cast<const uint8_t*>(body.data()), proto::kMaxMetaReply);
        check(h.version == proto::kVersion && h.length <= proto::kMaxMetaReply);
        break;
      }
      case 1: round_trip<std::vector<h5d::LinkEntry>>(body); break;
      case 2: round_trip<std::vector<std::pair<std::string, h5d::Value>>>(body); break;
      case 3: round_trip<h5d::Value>(body); break;
      case 4: {
        auto got = round_trip<std::pair<h5d::DatasetInfo, h5d::StorageInfo>>(body);
        proto::validate(got.first, got.second);
        break;
      }
      case 5: {
        for (proto::InfoAnswer& a : round_trip<std::vector<proto::InfoAnswer>>(body))
          if (a.ok) proto::validate(a.info, a.storage);
        break;
      }
      case 6: round_trip<std::vector<std::string>>(body); break;
      case 7: round_trip<h5d::euxfel::meta::SequenceMeta>(body); break;
    }
  } catch (const h5d::Error&) {
  }
  return 0;
}
