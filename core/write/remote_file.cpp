// Side: daemon. The daemon's WriteFile (writer.h) of one written file: each call a request to
// the file's own writer process (server.cpp answers it there), and the wire form of a dataset's
// spec. No libhdf5 here.
#include <utility>

#include "core/error.h"
#include "core/h5lib/h5helper.h"
#include "core/h5lib/h5proto.h"
#include "core/log.h"
#include "core/write/write_internal.h"

namespace h5d {

namespace detail {

void put_spec(proto::Out& o, const NewDataset& d) {
  proto::put(o, std::vector<uint64_t>(d.shape.begin(), d.shape.end()));
  proto::put(o, d.typestr);
  proto::put(o, std::vector<uint64_t>(d.chunks.begin(), d.chunks.end()));
  proto::put(o, d.compression);
  proto::put(o, static_cast<int64_t>(d.level));
  proto::put(o, d.shuffle);
}

NewDataset get_spec(proto::In& in) {
  NewDataset d;
  std::vector<uint64_t> shape, chunks;
  int64_t level = -1;
  proto::get(in, shape);
  proto::get(in, d.typestr);
  proto::get(in, chunks);
  proto::get(in, d.compression);
  proto::get(in, level);
  proto::get(in, d.shuffle);
  if (level < INT32_MIN || level > INT32_MAX) in.bad("compression level");
  d.shape.assign(shape.begin(), shape.end());
  d.chunks.assign(chunks.begin(), chunks.end());
  d.level = static_cast<int>(level);
  return d;
}

}  // namespace detail

namespace {

using detail::put_spec;

// In the file's writer process (the daemon). A crash, abort, malformed reply or a call longer
// than hdf5_timeout kills the process: that call and every later one of this file fail with
// Error(EIO), logged once (here, naming the file, the object and the call). No restart: the
// libhdf5 state of a file open for writing (its metadata cache) died with the process.
class RemoteWriteFile final : public WriteFile {
 public:
  RemoteWriteFile(const HelperOptions& opts, std::string path, dev_t& dev, ino_t& ino)
      : path_(std::move(path)), timeout_ms_(opts.timeout_ms), broker_(path_) {
    // Not ended by the daemon's stop: a writer process flushes and closes its file first.
    HelperOptions own = opts;
    own.stop_fd = -1;
    proc_.start(own, &broker_, true);
    pid_ = proc_.pid();
    const auto id = reply_of<std::pair<uint64_t, uint64_t>>(proto::Op::WriteCreateFile, "/", proto::Out());
    dev = static_cast<dev_t>(id.first);
    ino = static_cast<ino_t>(id.second);
  }

  pid_t pid() const override { return pid_; }

  bool exists(const std::string& p) override {
    proto::Out o;
    proto::put(o, p);
    return reply_of<bool>(proto::Op::WriteExists, p, o);
  }

  void create_group(const std::string& p) override {
    proto::Out o;
    proto::put(o, p);
    done(proto::Op::WriteCreateGroup, p, o);
  }

  uint64_t create_dataset(const std::string& p, const NewDataset& spec) override {
    proto::Out o;
    proto::put(o, p);
    put_spec(o, spec);
    return reply_of<uint64_t>(proto::Op::WriteCreateDataset, p, o);
  }

  void write_chunk(const std::string& p, const std::vector<uint64_t>& offset,
                   const std::vector<uint8_t>& bytes) override {
    proto::Out o;
    proto::put(o, p);
    proto::put(o, offset);
    proto::put(o, bytes);
    done(proto::Op::WriteChunk, p, o);
  }

  std::vector<uint8_t> read_chunk(const std::string& p, const std::vector<uint64_t>& offset, uint64_t size,
                                  uint32_t& mask) override {
    proto::Out o;
    proto::put(o, p);
    proto::put(o, offset);
    proto::put(o, size);
    // The reply is the chunk's size as written (asked for) plus the mask and a length: exactly.
    if (size > proto::kMaxWriteRequest - 12) fail(EFBIG, path_ + ":" + p + ": chunk too large to read back");
    const std::string reply = call(proto::Op::ReadChunk, p, o, static_cast<uint32_t>(size + 12));
    proto::In in(reply);
    std::vector<uint8_t> bytes;
    try {
      proto::get(in, mask);
      proto::get(in, bytes);
      in.end();
      if (bytes.size() != size) in.bad(std::to_string(bytes.size()) + " chunk bytes, " + std::to_string(size) + " asked for");
    } catch (const Error& e) {
      broken(proto::Op::ReadChunk, p, std::string("sent a bad reply: ") + e.what());
    }
    return bytes;
  }

  void close_dataset(const std::string& p) override {
    proto::Out o;
    proto::put(o, p);
    done(proto::Op::WriteCloseDataset, p, o);
  }

  void flush() override { done(proto::Op::WriteFlush, "/", proto::Out()); }
  void close() override { done(proto::Op::WriteCloseFile, "/", proto::Out()); }

 private:
  template <class R>
  R reply_of(proto::Op op, const std::string& object, const proto::Out& args) {
    const std::string reply = call(op, object, args, proto::kMaxMetaReply);
    try {
      return proto::decode_all<R>(reply);
    } catch (const Error& e) {
      broken(op, object, std::string("sent a bad reply: ") + e.what());
    }
  }
  void done(proto::Op op, const std::string& object, const proto::Out& args) {
    const std::string reply = call(op, object, args, proto::kMaxMetaReply);
    if (!reply.empty()) broken(op, object, "sent a bad reply: " + std::to_string(reply.size()) + " bytes, none expected");
  }

  std::string call(proto::Op op, const std::string& object, const proto::Out& args, uint32_t max_reply) {
    if (!dead_.empty())
      throw Error(EIO, path_ + ":" + object + ": " + proto::op_name(op) + " not done: this file's HDF5 writer process " + dead_,
                  true);  // logged when it died
    proto::Out o;
    proto::put(o, path_);
    std::string body = o.take() + args.data();
    if (body.size() > proto::kMaxWriteRequest) fail(EFBIG, path_ + ":" + object + ": request too large");
    std::string reply;
    uint16_t kind = 0;
    try {
      kind = proc_.exchange(op, body, max_reply, timeout_ms_, reply, {path_});
    } catch (const HelperProcess::Broken& b) {
      broken(op, object, b.why);
    }
    if (kind == proto::kReplyError) throw_reply_error(reply, path_ + ":" + object);
    return reply;
  }

  [[noreturn]] void broken(proto::Op op, const std::string& object, std::string how) {
    proc_.kill(&how);
    dead_ = "(pid " + std::to_string(pid_) + ") " + how + " in " + proto::op_name(op);
    const std::string msg = path_ + ":" + object + ": HDF5 writer process (pid " + std::to_string(pid_) + ") " + how +
                            " in " + proto::op_name(op) + "; writes to this file that need it fail from now on";
    log::error(msg);
    throw Error(EIO, msg, true);  // this line is its one log line
  }

  const std::string path_;
  const unsigned timeout_ms_;
  WriterBroker broker_;  // the one file the process may open (created once)
  HelperProcess proc_;
  pid_t pid_ = -1;           // kept for the log lines after it is gone
  std::string dead_;         // why it died; calls fail at once from then on
};

}  // namespace

namespace detail {

std::unique_ptr<WriteFile> make_remote_write_file(const HelperOptions& opts, const std::string& path, dev_t& dev,
                                                  ino_t& ino) {
  return std::make_unique<RemoteWriteFile>(opts, path, dev, ino);
}

}  // namespace detail
}  // namespace h5d
