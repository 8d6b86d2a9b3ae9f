// Side: helper. The writer process's side of the write path (helper::serve, h5serve.cpp): one
// request of the daemon's RemoteWriteFile (remote_file.cpp) answered with this process's one
// LocalWriteFile (local_file.cpp).
#include "core/error.h"
#include "core/h5lib/h5proto.h"
#include "core/write/write_internal.h"
#include "helper/serve.h"

namespace h5d::helper {

std::string serve_write(std::unique_ptr<WriteFile>& file, proto::Op op, proto::In& in, const std::string& path) {
  using proto::Op;
  proto::Out o;
  if (op == Op::WriteCreateFile) {
    if (file) fail(EINVAL, path + ": this writer process has a file already");
    dev_t dev = 0;
    ino_t ino = 0;
    file = detail::make_local_write_file(path, dev, ino);
    proto::put(o, static_cast<uint64_t>(dev));
    proto::put(o, static_cast<uint64_t>(ino));
    in.end();
    return o.take();
  }
  const std::string* mine = file ? detail::local_write_file_path(*file) : nullptr;
  if (!mine || *mine != path) fail(EINVAL, path + ": not the file of this writer process");
  auto obj = [&] {
    std::string p;
    proto::get(in, p);
    return p;
  };
  switch (op) {
    case Op::WriteExists: proto::put(o, file->exists(obj())); break;
    case Op::WriteCreateGroup: file->create_group(obj()); break;
    case Op::WriteCreateDataset: {
      const std::string p = obj();
      const NewDataset spec = detail::get_spec(in);
      proto::put(o, file->create_dataset(p, spec));
      break;
    }
    case Op::WriteChunk: {
      const std::string p = obj();
      std::vector<uint64_t> offset;
      std::vector<uint8_t> bytes;
      proto::get(in, offset);
      proto::get(in, bytes);
      file->write_chunk(p, offset, bytes);
      break;
    }
    case Op::ReadChunk: {
      const std::string p = obj();
      std::vector<uint64_t> offset;
      uint64_t size = 0;
      uint32_t mask = 0;
      proto::get(in, offset);
      proto::get(in, size);
      const auto bytes = file->read_chunk(p, offset, size, mask);
      proto::put(o, mask);
      proto::put(o, bytes);
      break;
    }
    case Op::WriteCloseDataset: file->close_dataset(obj()); break;
    case Op::WriteFlush: file->flush(); break;
    case Op::WriteCloseFile: file->close(); break;
    default: fail(EINVAL, std::string("not a write request: ") + proto::op_name(op));
  }
  in.end();
  return o.take();
}

}  // namespace h5d::helper
