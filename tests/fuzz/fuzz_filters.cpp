// libFuzzer target for the filter decoders. Input: byte 0 picks the pipeline, byte 1 the element
// size / parameters, byte 2 the decoded size (scaled), the rest is the stored chunk.
// Decoding must either succeed with exactly out_size bytes or throw h5d::Error; sanitizers catch
// everything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/filters/filters.h"

namespace {

h5d::FilterInfo F(int id, std::vector<unsigned> cd = {}) {
  h5d::FilterInfo f;
  f.id = id;
  f.cd_values = std::move(cd);
  return f;
}

}  // namespace

// libFuzzer's entry point, declared as its FuzzerInterface.h does.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t sel = data[0];
  const uint8_t par = data[1];
  static const size_t kEs[8] = {1, 2, 4, 8, 3, 12, 16, 5};
  const size_t es = kEs[par & 7];
  const unsigned blocks[4] = {0, 8, 64, 136};
  const unsigned block = blocks[(par >> 3) & 3];
  // Decoded sizes from tiny to 64 KiB, multiple of the element size.
  size_t out_size = (size_t(data[2]) * 257) % 65536;
  out_size -= out_size % es;
  std::vector<h5d::FilterInfo> p;
  switch (sel % 16) {
    case 0: p = {F(1, {6})}; break;
    case 1: p = {F(2, {unsigned(es)}), F(1, {6})}; break;
    case 2: p = {F(2, {unsigned(es)}), F(1, {6}), F(3)}; break;
    case 3: p = {F(3)}; break;
    case 4: p = {F(32000, {4, 0x105, unsigned(out_size)})}; break;
    case 5: p = {F(32001, {2, 2, unsigned(es), unsigned(out_size), 5, 1, 0})}; break;
    case 6: p = {F(32004, {block})}; break;
    case 7: p = {F(32008, {0, 4, unsigned(es), block, 0})}; break;
    case 8: p = {F(32008, {0, 4, unsigned(es), block, 2})}; break;
    case 9: p = {F(32008, {0, 4, unsigned(es), block, 3, 1})}; break;
    case 10: p = {F(32015, {3})}; break;
    case 11: p = {F(1), F(32004)}; break;               // intermediate size unknown
    case 12: p = {F(32015), F(32001)}; break;           // intermediate size unknown
    case 13: p = {F(2, {unsigned(es)}), F(32000)}; break;
    case 14: p = {F(32008, {0, 4, unsigned(es)}), F(32004)}; break;
    default: p = {F(2, {unsigned(es)})}; break;
  }
  const uint32_t mask = (sel >> 4) == 15 ? 1u : 0u;  // occasionally skip the first filter
  std::vector<uint8_t> in(data + 3, data + size), out;
  try {
    h5d::filters::decode_chunk(p, mask, es, in, out_size, out);
    if (out.size() != out_size) abort();
  } catch (const h5d::Error&) {
  }
  return 0;
}
