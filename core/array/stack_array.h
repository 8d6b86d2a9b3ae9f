// Several modules' row arrays stacked into one array with a module axis, rows aligned to a
// common row axis (frames or trains) and fill where a module has no data: the multi-module
// detector views (EXtra-data's DETECTOR(run)[key].ndarray() and its virtual CXI layout).
//
// Each module slot has a source array (an EuXFEL key over the run: rows x entry) and a sorted
// list of pieces mapping runs of its rows to runs of output rows. plan() cuts the requested
// region per module into the covered runs, each planned on the module's array with a strided
// destination (the decode writes straight into the output), and the uncovered runs, which are
// filled with the fill value. A read spanning modules therefore decodes from all module files at
// once, and nothing is copied beyond the decode.
//
// Layouts (M = module slots, N = output entries, E = entry shape of one source row):
//   modules first:  (M, N) + E'        E' = E without its axis 0 when `squeeze` (a length-1 axis)
//   frames first:   (N*C, M) + E''     C = `cells` > 1: axis 0 of E (length C) is folded into the
//                                      frame axis (frame n*C + c = entry n, cell c), E'' = E[1:];
//                                      C = 1: E'' = E' as above
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/array/array.h"

namespace h5d {

class StackArray final : public Array {
 public:
  // `rows` source rows starting at src_row go to output entries [out_row, out_row + rows).
  struct Piece {
    uint64_t src_row = 0, out_row = 0, rows = 0;
  };
  struct Module {
    ArrayPtr array;             // nullptr: a module slot without data (all fill)
    std::vector<Piece> pieces;  // sorted by out_row, not overlapping
  };
  struct Layout {
    bool frames_first = false;
    uint64_t entries = 0;  // N
    uint64_t cells = 1;    // C (frames first only)
    bool squeeze = false;  // drop E's axis 0 (must have length 1)
  };

  // `entry` is E (the source arrays' shape after axis 0; all must agree, as must the dtypes).
  // `fill` is one element's bytes. Throws Error(EINVAL) on inconsistent input.
  StackArray(std::vector<Module> modules, Shape entry, DType dtype, std::vector<uint8_t> fill,
             Layout layout, std::string what);

  const Shape& shape() const override { return shape_; }
  const DType& dtype() const override { return dtype_; }
  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override;
  void plan_prefetch(const Region& r, ReadPlan& plan) const override;
  std::string describe() const override { return what_; }
  // A module's unit, clipped to the bytes that come from that module contiguously: one cell of
  // one frame (frames first), or the run of entries of one piece (modules first).
  ByteSpan decode_span(uint64_t off) const override;
  bool decodes() const override;
  bool decoded(const Region& r) const override;
  // The modules' file runs, one cell (frames first) or one piece's entries (modules first) at a
  // time; false where a byte is fill or a module's array has no runs for it.
  bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const override;
  // Every module's, the bound shared by them in module order.
  void source_files(std::vector<SourceFile>& out, size_t open_at_most) const override {
    for (const Module& m : modules_) {
      if (!m.array) continue;
      const size_t known = static_cast<size_t>(
          std::count_if(out.begin(), out.end(), [](const SourceFile& f) { return f.id.ino != 0; }));
      m.array->source_files(out, open_at_most > known ? open_at_most - known : 0);
    }
  }

  const std::vector<Module>& modules() const { return modules_; }
  const Layout& layout() const { return layout_; }
  // True where (module slot, output entry) is covered by a piece, as a (M, N) row-major mask.
  std::vector<uint8_t> coverage() const;

 private:
  // Where output byte `off` comes from: output bytes [run_lo, run_hi) around it come from
  // `array` contiguously, starting at its byte part_lo. False: fill (or out of range).
  struct Located {
    const Array* array = nullptr;
    uint64_t run_lo = 0, run_hi = 0, part_lo = 0;
  };
  bool locate(uint64_t off, Located& at) const;
  // Calls src(module, src_region, dest) for covered parts and fill(dest, count) for the rest.
  template <class Src, class Fill>
  void walk(const Region& r, const DestView& dst, Src&& src, Fill&& fill) const;

  std::vector<Module> modules_;
  Shape entry_, shape_;
  DType dtype_;
  std::vector<uint8_t> fill_;
  Layout layout_;
  std::string what_;
};

// The fill EXtra-data uses by default (components._out_array): NaN for floating point types
// ('f' kind, any size and byte order), zeros otherwise. `ones` gives all bits set (the virtual
// CXI writer's mask fill).
std::vector<uint8_t> default_fill(const DType& dtype);
std::vector<uint8_t> all_ones_fill(const DType& dtype);

}  // namespace h5d
