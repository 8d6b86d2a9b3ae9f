// NAME.npy and NAME.raw: an in-memory .npy header (npy only) followed by the array's C-order
// bytes, read through Engine::read_bytes, with per-open-file sequential prefetch.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/engine.h"
#include "core/error.h"
#include "core/log.h"
#include "vfs/npy.h"
#include "vfs/prefetch.h"
#include "vfs/tree.h"
#include "vfs/writable.h"

namespace h5d::vfs {
namespace {

class ArrayFileNode final : public FileNode {
 public:
  ArrayFileNode(const TreeContext& ctx, ArrayFormat format, ArraySpec spec, const NodeMeta& meta)
      : FileNode(meta), ctx_(ctx), format_(format), spec_(std::move(spec)) {
    if (format_ == ArrayFormat::Npy) header_ = npy_header(spec_.dtype, spec_.shape);
    data_size_ = product(spec_.shape) * spec_.dtype.itemsize;
  }
  uint64_t size() const override { return header_.size() + data_size_; }
  std::unique_ptr<OpenFile> open() override;
  // rw mounts with -o write_existing: in-place writes (vfs/writable.h, Writer::open_existing).
  std::unique_ptr<OpenFile> open_write(int) override {
    if (!ctx_.writer || spec_.file.empty()) fail(EROFS, spec_.what + ": read-only");
    return make_inplace_open_file(header_, ctx_.writer->open_existing(spec_.file, spec_.dset));
  }

  const TreeContext& ctx_;
  const ArrayFormat format_;
  const ArraySpec spec_;
  std::string header_;
  uint64_t data_size_ = 0;
  std::mutex open_mu_;  // guards last_, opened_
  std::weak_ptr<const Array> last_;  // the array the previous open read from
  bool opened_ = false;
};

class ArrayOpenFile final : public OpenFile {
 public:
  ArrayOpenFile(const ArrayFileNode& node, ArrayPtr array)
      : node_(node),
        array_(std::move(array)),
        prefetcher_({node.ctx_.opts.prefetch_initial, node.ctx_.opts.prefetch_max,
                     node.ctx_.opts.prefetch_seek_tolerance, node.ctx_.opts.prefetch_after}),
        band_(band_of(array_)) {
    decodes = band_ > 0;
  }

  size_t read(uint64_t off, size_t size, char* buf) override { return read_impl(off, size, buf, true); }
  size_t read_for_push(uint64_t off, size_t size, char* buf) override { return read_impl(off, size, buf, false); }

  Range cheap_after(uint64_t off, size_t n) const override {
    uint64_t end = 0;
    if (!ends_mid_band(off, n, &end)) return {};
    Range r = pages(end, std::min(node_.data_size_, (end / band_ + 1) * band_));
    r.len = std::min(r.len, kMaxPush);
    return r;
  }

  Range ahead_after(uint64_t off, size_t n) const override {
    uint64_t end = 0;
    if (band_ > kMaxPush || !prefetcher_.streaming() || !ends_mid_band(off, n, &end)) return {};
    const uint64_t next = (end / band_ + 1) * band_;
    if (next >= node_.data_size_) return {};
    const uint64_t next_end = std::min(node_.data_size_, next + band_);
    if (!node_.ctx_.engine.bytes_decoded(*array_, next, next_end - next)) return {};
    return pages(next, next_end);
  }

 private:
  static constexpr uint64_t kMaxPush = 8ull << 20;
  static constexpr uint64_t kPage = 4096;

  // Bytes of the rows the array decodes together (Array::fetch_rows); 0 when it has none.
  static uint64_t band_of(const ArrayPtr& a) {
    if (!a || a->fetch_rows() == 0) return 0;
    uint64_t row_bytes = a->dtype().itemsize;
    for (size_t k = 1; k < a->shape().size(); ++k) row_bytes *= a->shape()[k];
    return a->fetch_rows() * row_bytes;
  }

  // Whether a read of file bytes [off, off + n) stopped inside a band; `end`: the data offset.
  bool ends_mid_band(uint64_t off, size_t n, uint64_t* end) const {
    const uint64_t header = node_.header_.size();
    if (band_ == 0 || n == 0 || off + n <= header) return false;
    *end = off + n - header;
    return *end % band_ != 0 && *end < node_.data_size_;
  }

  // The whole pages (the kernel takes no partial page, except the file's last) of data bytes
  // [from, to), as file offsets.
  Range pages(uint64_t from, uint64_t to) const {
    const uint64_t header = node_.header_.size();
    const uint64_t f = (header + from + kPage - 1) / kPage * kPage;
    uint64_t t = header + to;
    if (t != node_.size()) t = t / kPage * kPage;
    return t > f ? Range{f, t - f} : Range{};
  }

  size_t read_impl(uint64_t off, size_t size, char* buf, bool reader) {
    const std::string& header = node_.header_;
    const uint64_t total = node_.size();
    if (off >= total || size == 0) return 0;
    const uint64_t end = std::min<uint64_t>(off + size, total);
    size_t done = 0;
    if (off < header.size()) {
      const size_t n = std::min<uint64_t>(end, header.size()) - off;
      std::memcpy(buf, header.data() + off, n);
      done = n;
    }
    const uint64_t doff = off + done - header.size();
    const uint64_t dlen = end - off - done;
    Engine& engine = node_.ctx_.engine;
    if (dlen > 0) {
      if (log::debug_enabled()) {
        log::debug("read " + node_.spec_.what + (node_.format_ == ArrayFormat::Npy ? " (.npy)" : " (.raw)") +
                   " data bytes [" + std::to_string(doff) + ", " + std::to_string(doff + dlen) +
                   ") via " + node_.spec_.read_path);
      }
      try {
        engine.read_bytes(*array_, doff, dlen, reinterpret_cast<uint8_t*>(buf) + done);
      } catch (...) {
        // core's message names the file, the dataset and the chunk; add the byte range.
        rethrow_with_context(std::string(node_.format_ == ArrayFormat::Npy ? ".npy" : ".raw") +
                             " data bytes [" + std::to_string(doff) + ", " +
                             std::to_string(doff + dlen) + ")");
      }
      if (!reader) return end - off;
      auto ahead = prefetcher_.on_read(doff, dlen, node_.data_size_);
      if (ahead.len > 0) {
        try {
          engine.prefetch_bytes(*array_, ahead.off, ahead.len);
        } catch (const std::exception& e) {
          log::debug("prefetch of " + node_.spec_.what + " failed: " + e.what());
        }
      }
    }
    return end - off;
  }

  const ArrayFileNode& node_;  // kept alive by the inode table
  ArrayPtr array_;
  SequentialPrefetcher prefetcher_;
  const uint64_t band_;
};

std::unique_ptr<OpenFile> ArrayFileNode::open() {
  ArrayPtr a;
  if (data_size_ > 0) {
    a = spec_.loader();
    if (!a) fail(EIO, spec_.what + ": no array");
    if (a->nbytes() != data_size_) {
      fail(ESTALE, spec_.what + ": array size changed since it was listed (" +
                    std::to_string(a->nbytes()) + " bytes, listed " + std::to_string(data_size_) +
                    "); remount to see the new shape");
    }
  }
  // A different array than at the previous open means the source file changed and its metadata
  // was read again: the kernel must drop the pages it cached from the old contents.
  bool changed = false;
  {
    std::lock_guard<std::mutex> lk(open_mu_);
    changed = opened_ && last_.lock() != a;
    opened_ = true;
    last_ = a;
  }
  auto f = std::make_unique<ArrayOpenFile>(*this, std::move(a));
  if (changed) f->keep_cache = false;
  return f;
}

}  // namespace

NodePtr make_array_file(const TreeContext& ctx, ArrayFormat format, ArraySpec spec,
                        const NodeMeta& meta) {
  return std::make_shared<ArrayFileNode>(ctx, format, std::move(spec), meta);
}

}  // namespace h5d::vfs
