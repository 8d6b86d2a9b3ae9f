// Random access to the bytes of one file, for the on-disk structure parsers. The real one is a
// pread on a cached descriptor; tests and fuzzers use memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace h5d::fmt {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads exactly n bytes at absolute file offset `off`; throws h5d::Error(EIO) naming the
  // offset when the file is shorter.
  virtual void read_at(uint64_t off, void* buf, size_t n) const = 0;
  virtual uint64_t size() const = 0;
  virtual std::string name() const = 0;
  // A hint: the (offset, length) ranges will be read next, in some order. A source on slow
  // storage reads them at once (into its page cache) instead of one round trip after another;
  // by default nothing. Returns when done; never throws (the reads that follow report errors).
  virtual void prefetch(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const { (void)ranges; }
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::vector<uint8_t> bytes, std::string name = "<memory>")
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  void read_at(uint64_t off, void* buf, size_t n) const override;
  uint64_t size() const override { return bytes_.size(); }
  std::string name() const override { return name_; }

 private:
  std::vector<uint8_t> bytes_;
  std::string name_;
};

}  // namespace h5d::fmt
