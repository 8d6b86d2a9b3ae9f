// helper::serve (serve.h): the helper process's side of the protocol, answering each
// request with the local Metadata of its files (libhdf5 in this process). Helper-side library.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/euxfel/h5meta.h"
#include "core/h5lib/h5file.h"
#include "core/h5lib/h5helper.h"
#include "helper/h5lib.h"
#include "helper/h5local.h"
#include "core/log.h"
#include "helper/channel.h"
#include "helper/sandbox.h"
#include "helper/serve.h"
#include "helper/test_hook.h"

namespace h5d {
namespace helper {
namespace {

using proto::Op;

template <class T>
T arg(proto::In& in) {
  T v;
  proto::get(in, v);
  return v;
}

std::string dispatch(H5Files& files, Op op, proto::In& in, const std::string& file) {
  namespace meta = euxfel::meta;
  proto::Out o;
  auto f = files.open(file);
  auto put_info = [&](const std::string& path, bool details) {  // DatasetInfo, DatasetDetails, DatasetsDetails
    proto::put(o, details ? *f->dataset_details(path) : *f->dataset_info(path));
    proto::put(o, f->storage_info(path));
  };
  switch (op) {
    case Op::ListGroup: proto::put(o, f->list_group(arg<std::string>(in))); break;
    case Op::KindOf: proto::put(o, f->kind_of(arg<std::string>(in))); break;
    case Op::Attributes: proto::put(o, f->attributes(arg<std::string>(in))); break;
    case Op::AttributeNames: proto::put(o, f->attribute_names(arg<std::string>(in))); break;
    case Op::Attribute: {
      const auto path = arg<std::string>(in);
      proto::put(o, f->attribute(path, arg<std::string>(in)));
      break;
    }
    case Op::DatasetInfo:
    case Op::DatasetDetails: put_info(arg<std::string>(in), op == Op::DatasetDetails); break;
    case Op::ReadValue: {
      const auto path = arg<std::string>(in);
      proto::put(o, f->read_value(path, arg<uint64_t>(in)));
      break;
    }
    case Op::LibraryRead: {
      const auto path = arg<std::string>(in);
      const auto start = arg<std::vector<uint64_t>>(in);
      const auto count = arg<std::vector<uint64_t>>(in);
      proto::put(o, library_read_local(*f, path, start, count));
      break;
    }
    case Op::MetaExists: proto::put(o, meta::exists(*f, arg<std::string>(in))); break;
    case Op::MetaIsDataset: proto::put(o, meta::is_dataset(*f, arg<std::string>(in))); break;
    case Op::MetaIsGroup: proto::put(o, meta::is_group(*f, arg<std::string>(in))); break;
    case Op::MetaSoftLink: proto::put(o, meta::soft_link_target(*f, arg<std::string>(in))); break;
    case Op::MetaReadU64:
    case Op::MetaReadI64: {
      const auto path = arg<std::string>(in);
      const auto n = arg<uint64_t>(in);
      std::vector<uint64_t> u;
      std::vector<int64_t> s;
      const bool found = op == Op::MetaReadU64 ? meta::try_read_u64(*f, path, u, n)
                                               : meta::try_read_i64(*f, path, s, n);
      proto::put(o, found);
      if (op == Op::MetaReadU64) proto::put(o, u);
      else proto::put(o, s);
      break;
    }
    case Op::MetaReadIndex: {
      const auto base = arg<std::string>(in);
      const auto groups = arg<std::vector<std::string>>(in);
      const auto n = arg<uint64_t>(in);
      auto r = meta::read_index(*f, base, groups, n);
      o.u64(r.size());
      for (const auto& x : r) {
        proto::put(o, x.firsts);
        proto::put(o, x.counts);
        proto::put(o, x.error);
      }
      break;
    }
    case Op::MetaReadStrings: proto::put(o, meta::read_strings(*f, arg<std::string>(in))); break;
    case Op::MetaListDatasets: proto::put(o, meta::list_datasets(*f, arg<std::string>(in))); break;
    case Op::MetaListMembers: proto::put(o, meta::list_members(*f, arg<std::string>(in))); break;
    case Op::MetaSequenceFile: {
      const bool with_metadata = arg<bool>(in);
      const bool with_index = arg<bool>(in);
      proto::put(o, meta::read_sequence_file(*f, with_metadata, with_index));
      break;
    }
    case Op::DatasetsDetails: {
      arg<std::string>(in);  // the group they are in: for messages only
      const auto paths = arg<std::vector<std::string>>(in);
      o.u64(paths.size());
      for (const std::string& p : paths) put_info(p, true);
      break;
    }
    default: fail(EINVAL, std::string("not a read request: ") + proto::op_name(op));  // the Write* ops: serve_write
  }
  in.end();
  return o.take();
}

// A truncated file is served only where nothing past its cut was needed (h5lib.h,
// open_truncated): when a read past the cut was refused during this request, its answer is
// refused too, even if libhdf5 or our code went on without those bytes (a link left out as
// dangling, an attribute skipped), and what this helper holds of the files concerned is dropped,
// so no later answer can come from metadata read for this one.
// `failed`: the request's own error, or nullptr when it succeeded. Either way the error thrown
// says that the file is truncated and at which sizes (libhdf5's own reason, "link iteration
// failed", does not), followed by the request's own error where there was one.
void refuse_reads_past_end(H5Files& files, const std::string& file, const std::string& object, Op op,
                           const std::exception* failed) {
  const std::vector<h5::ReadPastEnd> cut = h5::take_reads_past_end();
  if (cut.empty()) return;
  for (const h5::ReadPastEnd& p : cut) files.forget(p.path);
  const h5::ReadPastEnd& c = cut.front();
  std::string msg = (c.path == file ? file : file + " (through " + c.path + ")") + ":" + object + ": " +
                    fmt::truncated_message(c.size, c.stored_end) + "; " + proto::op_name(op) +
                    " needs bytes past its end";
  if (failed) msg += std::string(": ") + failed->what();
  fail(EIO, msg);
}

// What an error reply (or a batch's failed answer) carries: the errno (EIO for what is not an
// h5d::Error) and the message, at most 4096 bytes.
std::pair<uint32_t, std::string> error_of(const std::exception& e) {
  const Error* err = dynamic_cast<const Error*>(&e);
  std::string msg = e.what();
  if (msg.size() > 4096) msg.resize(4096);
  return {static_cast<uint32_t>(err ? err->code() : EIO), std::move(msg)};
}

// DatasetInfos: each (file, dataset) answered as its own DatasetInfo request would be, the
// truncated-file refusal and the fault hook included; `reply` gets junk (a malformed reply)
// when the fault hook says so for one of the files.
std::string dispatch_infos(H5Files& files, proto::In& in, const TestHook& hook) {
  arg<std::string>(in);  // the first dataset: for messages only
  const auto items = arg<std::vector<std::pair<std::string, std::string>>>(in);
  in.end();
  proto::Out o;
  o.u64(items.size());
  for (const auto& [file, dset] : items) {
    if (hook.apply(file)) return "not a reply at all";
    proto::InfoAnswer a;
    try {
      auto f = files.open(file);
      a.info = *f->dataset_info(dset);
      a.storage = f->storage_info(dset);
      refuse_reads_past_end(files, file, dset, Op::DatasetInfo, nullptr);
      a.ok = true;
    } catch (const std::exception& e) {
      a = proto::InfoAnswer{};
      try {
        refuse_reads_past_end(files, file, dset, Op::DatasetInfo, &e);
        std::tie(a.code, a.error) = error_of(e);
      } catch (const std::exception& cut) {
        std::tie(a.code, a.error) = error_of(cut);
      }
    }
    h5::release_free_lists();  // as between requests: nothing of one file is reused for the next
    proto::put(o, a);
  }
  return o.take();
}

}  // namespace

int serve(Channel& ch, const TestHook& hook, unsigned request_cpu_s) {
  h5::allow_truncated_files(true);  // every answer is checked by refuse_reads_past_end
  EngineOptions eo;
  eo.threads = 1;
  eo.cache_bytes = 16ull << 20;
  eo.max_open_files = 128;  // as the daemon's default: each helper sees a share of the files
  Engine engine(eo);
  H5Files files(engine, {});  // no helper options: libhdf5 in this process
  if (hook.active()) {  // "MODE:@NAME": reading an attribute NAME (of any file) faults
    LocalMetadata::set_attribute_hook([&hook](const std::string& key) {
      if (hook.apply(key)) fail(EIO, "garbage asked for while reading " + key);
    });
  }
  std::unique_ptr<WriteFile> written;  // a writer process's one file (Op::WriteCreateFile)
  for (;;) {
    proto::Header h;
    std::string body;
    if (!ch.read_request(h, body)) return 0;  // the daemon closed its end (or is not ours)
    ch.new_request();
    if (request_cpu_s) limit_request_cpu(request_cpu_s);
    std::string reply;
    uint16_t kind = proto::kReplyOk;
    const Op op = static_cast<Op>(h.kind);
    // A chunk read back (ReadChunk) is as large as it was written, which the daemon allowed
    // (kMaxWriteRequest) and asks for exactly.
    const uint32_t limit = op == Op::LibraryRead ? proto::kMaxDataReply
                           : op == Op::ReadChunk ? proto::kMaxWriteRequest
                                                 : proto::kMaxMetaReply;
    try {
      if (h.kind == 0 || h.kind > static_cast<uint16_t>(Op::Last)) fail(EINVAL, "unknown request " + std::to_string(h.kind));
      if (op != Op::WriteChunk && h.length > proto::kMaxRequest) fail(EINVAL, "request too large");
      proto::In in(body);
      const std::string file = in.str();
      if (hook.apply(file)) {
        const char junk[] = "not a reply at all";
        detail::write_blocking(ch.fd(), junk, sizeof junk);
        continue;
      }
      std::string object;  // every request's first argument is the object's path
      try {
        proto::In peek = in;
        object = peek.str();
      } catch (const Error&) {
      }
      try {
        reply = proto::is_write_op(op)        ? serve_write(written, op, in, file)
                : op == Op::DatasetInfos ? dispatch_infos(files, in, hook)
                                         : dispatch(files, op, in, file);
      } catch (const std::exception& e) {
        refuse_reads_past_end(files, file, object, op, &e);
        throw;
      }
      refuse_reads_past_end(files, file, object, op, nullptr);
      if (reply.size() > limit) fail(EIO, file + ": " + proto::op_name(op) + ": reply of " + std::to_string(reply.size()) + " bytes is above the limit");
    } catch (const std::exception& e) {
      const auto [code, msg] = error_of(e);
      proto::Out o;
      o.u32(code);
      o.str(msg);
      reply = o.take();
      kind = proto::kReplyError;
    }
    h5::release_free_lists();  // nothing of this request's file is reused for the next one's
    if (!ch.send(kind, h.seq, reply)) return 0;
  }
}

}  // namespace helper
}  // namespace h5d
