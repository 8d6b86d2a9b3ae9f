// VirtualArray: a VDS read by following its mappings to the source datasets, which are read
// through their own direct paths (chunked, contiguous, nested VDS). Regular hyperslab mappings
// on any axis are supported, including those that drop or add axes (each source into one index
// of a new axis); whatever no mapping covers reads as the VDS fill value. A missing source is an
// error for reads that touch it unless the engine is told to fill (libhdf5's behaviour).
#include <algorithm>
#include <set>

#include "core/array/dataset.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/log.h"

namespace h5d {
namespace {

constexpr uint64_t kUnlimited = ~uint64_t(0);

struct Seg {
  uint64_t v, s, n;  // n elements from v (virtual coord) and s (source coord), contiguous in both
};

uint64_t nsel(const Hyperslab& h, size_t k) { return h.count[k] * h.block[k]; }

// Positions [p, p+len) of a selection's dimension k, as coordinates, cut where blocks end.
template <class Fn>
void positions_to_coords(const Hyperslab& h, size_t k, uint64_t p, uint64_t len, Fn&& fn) {
  const uint64_t b = h.block[k];
  while (len > 0) {
    uint64_t qi = p / b, qj = p % b;
    uint64_t take = std::min(len, b - qj);
    fn(h.start[k] + qi * h.stride[k] + qj, take);
    p += take;
    len -= take;
  }
}

void dim_segments(const Hyperslab& v, size_t kv, const Hyperslab& s, size_t ks, uint64_t r0, uint64_t r1,
                  uint64_t src_extent, std::vector<Seg>& out) {
  const uint64_t vb = v.block[kv], vc = v.count[kv], vs0 = v.start[kv];
  const uint64_t vst = std::max<uint64_t>(v.stride[kv], 1);
  if (vc == 0) return;
  // Blocks before i end before r0 (stride >= block whenever count > 1; with count 1 HDF5 may
  // report stride 1, hence the clamp).
  uint64_t i = r0 <= vs0 ? 0 : std::min((r0 - vs0) / vst, vc - 1);
  for (; i < vc; ++i) {
    const uint64_t b0 = vs0 + i * vst;
    if (b0 >= r1) break;
    const uint64_t c0 = std::max(b0, r0), c1 = std::min(b0 + vb, r1);
    if (c1 <= c0) continue;
    uint64_t vcoord = c0;
    positions_to_coords(s, ks, i * vb + (c0 - b0), c1 - c0, [&](uint64_t scoord, uint64_t n) {
      // Beyond the source's current extent HDF5 reads the fill value: leave those uncovered.
      if (scoord < src_extent) {
        uint64_t m = std::min(n, src_extent - scoord);
        if (!out.empty() && out.back().v + out.back().n == vcoord && out.back().s + out.back().n == scoord)
          out.back().n += m;
        else
          out.push_back({vcoord, scoord, m});
      }
      vcoord += n;
    });
  }
}

class VirtualArray final : public Array {
 public:
  VirtualArray(Engine& e, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info, ArrayPtr fallback)
      : engine_(e), sources_(sources), info_(std::move(info)), fallback_(std::move(fallback)),
        what_(info_->file + ":" + info_->path) {}
  const Shape& shape() const override { return info_->shape; }
  const DType& dtype() const override { return info_->dtype; }
  std::string describe() const override { return what_; }

  void plan(const Region& r, const DestView& dst, ReadPlan& plan) const override {
    if (r.empty()) return;
    const Resolved& res = resolved();
    if (res.use_fallback) return fallback_->plan(r, dst, plan);
    uint64_t covered = 0;
    ReadPlan sub;
    sub.request = plan.request;
    // VDS over VDS is followed to any depth, but a chain that loops must not recurse forever.
    thread_local int depth = 0;
    if (depth > 32) fail(ELOOP, what_ + ": VDS mappings nest more than 32 deep (a loop?)");
    ++depth;
    try {
      for_each_piece(res, r, [&](size_t m, const Region& src, const DestView& d) {
        if (!res.sources[m]) {
          if (engine_.options().vds_missing_fill) return;  // left to the fill below
          std::string err = res.errors[m];
          sub.add([err] { fail_data(err); });
        } else {
          res.sources[m]->plan(src, d, sub);
        }
        covered += src.elements();
      }, &dst);
    } catch (...) {
      --depth;
      throw;
    }
    --depth;
    if (covered < r.elements()) fill_region(r.count, info_->fill_value, dst.base, dst.strides);
    if (log::debug_enabled()) log::debug("read " + what_ + ": direct (virtual, " + std::to_string(sub.tasks.size()) + " source tasks)");
    plan.append(std::move(sub));
  }

  // Missing sources (a read touching them is EIO, or fill with vds_missing=fill), and each
  // source's own damage.
  std::string damage() const override {
    const Resolved& res = resolved();
    if (res.use_fallback) return {};
    size_t missing = 0;
    std::string first;
    for (size_t m = 0; m < res.sources.size(); ++m) {
      std::string why = res.sources[m] ? res.sources[m]->damage() : res.errors[m];
      if (why.empty()) continue;
      if (missing++ == 0) first = why;
    }
    if (!missing) return {};
    return std::to_string(missing) + " of " + std::to_string(res.sources.size()) +
           " mappings' sources missing or damaged: " + first;
  }

  // The sources (a VDS maps each once, or a few times: sources are listed once per mapping and
  // told apart by hold_sources).
  void source_files(std::vector<SourceFile>& out, size_t open_at_most) const override {
    const Resolved& res = resolved();
    if (res.use_fallback) return;
    thread_local int depth = 0;  // VDS over VDS: a chain that loops must not recurse forever
    if (depth > 32) return;
    ++depth;
    try {
      for (const ArrayPtr& src : res.sources)
        if (src) src->source_files(out, open_at_most);
    } catch (...) {
      --depth;
      throw;
    }
    --depth;
  }

  void plan_prefetch(const Region& r, ReadPlan& plan) const override {
    if (r.empty()) return;
    const Resolved& res = resolved();
    if (res.use_fallback) return;
    for_each_piece(res, r, [&](size_t m, const Region& src, const DestView&) {
      if (res.sources[m]) res.sources[m]->plan_prefetch(src, plan);
    }, nullptr);
  }

  // A source's unit, for mappings of whole rows (axis 0 onto the source's axis 0, every other
  // axis selected whole on both sides with equal extents: EuXFEL's overview files, a VDS
  // concatenating files): there the VDS's bytes are a shifted copy of the source's. Other
  // mappings scatter a source's unit over the VDS's bytes: no unit.
  ByteSpan decode_span(uint64_t off) const override {
    const Shape& sh = shape();
    const uint64_t row_bytes = sh.empty() ? 0 : nbytes() / std::max<uint64_t>(sh[0], 1);
    if (row_bytes == 0 || off >= nbytes()) return {};
    const Resolved& res = resolved();
    if (res.use_fallback) return {};
    const uint64_t row = off / row_bytes;
    for (size_t m = 0; m < info_->vds.size(); ++m) {
      if (!res.sources[m] || !whole_rows(res, m)) continue;
      const Hyperslab& v = info_->vds[m].vspace;
      const uint64_t vst = std::max<uint64_t>(v.stride[0], 1);
      if (v.count[0] == 0 || row < v.start[0]) continue;
      const uint64_t i = std::min((row - v.start[0]) / vst, v.count[0] - 1);
      const uint64_t b0 = v.start[0] + i * vst;
      if (row >= b0 + v.block[0]) continue;
      std::vector<Seg> segs;
      dim_segments(v, 0, res.srcspace[m], 0, b0, b0 + v.block[0], res.sources[m]->shape()[0], segs);
      for (const Seg& sg : segs)
        if (row >= sg.v && row < sg.v + sg.n)
          return shifted_span(*res.sources[m], sg.s * row_bytes, sg.v * row_bytes, (sg.v + sg.n) * row_bytes, off);
    }
    return {};
  }

  // For mappings of whole rows only (as decode_span): each row block is a source's bytes moved,
  // so the runs are the sources' runs. Anything else (another kind of mapping, a missing
  // source, rows no mapping or more than one covers: fill or overlap) is read, not spliced.
  bool file_runs(uint64_t off, uint64_t len, std::vector<FileRun>& out) const override {
    const Shape& sh = shape();
    const uint64_t row_bytes = sh.empty() ? 0 : nbytes() / std::max<uint64_t>(sh[0], 1);
    if (row_bytes == 0 || off > nbytes() || len > nbytes() - off) return false;
    const Resolved& res = resolved();
    if (res.use_fallback) return false;
    for (size_t m = 0; m < info_->vds.size(); ++m)
      if (!res.sources[m] || !whole_rows(res, m)) return false;
    thread_local int depth = 0;  // VDS over VDS: a chain that loops must not recurse forever
    if (depth > 32) return false;
    struct Depth {
      Depth() { ++depth; }
      ~Depth() { --depth; }
    } in;
    const size_t mark = out.size();
    for (uint64_t pos = off, end = off + len; pos < end;) {
      const uint64_t row = pos / row_bytes;
      size_t hits = 0, src = 0;
      Seg seg{};
      for (size_t m = 0; m < info_->vds.size(); ++m) {
        const Hyperslab& v = info_->vds[m].vspace;
        const uint64_t vst = std::max<uint64_t>(v.stride[0], 1);
        if (v.count[0] == 0 || row < v.start[0]) continue;
        const uint64_t b0 = v.start[0] + std::min((row - v.start[0]) / vst, v.count[0] - 1) * vst;
        if (row >= b0 + v.block[0]) continue;
        std::vector<Seg> segs;
        dim_segments(v, 0, res.srcspace[m], 0, b0, b0 + v.block[0], res.sources[m]->shape()[0], segs);
        for (const Seg& sg : segs)
          if (row >= sg.v && row < sg.v + sg.n) {
            ++hits;
            src = m;
            seg = sg;
          }
      }
      const uint64_t n = hits == 1 ? std::min(end, (seg.v + seg.n) * row_bytes) - pos : 0;
      if (n == 0 || !res.sources[src]->file_runs(seg.s * row_bytes + (pos - seg.v * row_bytes), n, out)) {
        out.resize(mark);
        return false;
      }
      pos += n;
    }
    return true;
  }

  bool decodes() const override {
    const Resolved& res = resolved();
    if (res.use_fallback) return false;
    for (size_t m = 0; m < res.sources.size(); ++m)
      if (res.sources[m] && whole_rows(res, m) && res.sources[m]->decodes()) return true;
    return false;
  }

  bool decoded(const Region& r) const override {
    if (r.empty()) return false;
    const Resolved& res = resolved();
    if (res.use_fallback) return false;
    bool all = true;
    for_each_piece(res, r, [&](size_t m, const Region& src, const DestView&) {
      all = all && res.sources[m] && res.sources[m]->decoded(src);
    }, nullptr);
    return all;
  }

 private:
  struct Resolved {
    bool use_fallback = false;
    std::vector<ArrayPtr> sources;    // nullptr: missing (errors[m] says why)
    std::vector<std::string> errors;
    std::vector<Hyperslab> srcspace;  // effective source selections
    // Per mapping: paired (virtual dim, source dim) and the fixed coordinates of the others.
    std::vector<std::vector<std::pair<size_t, size_t>>> pairs;
  };

  const Resolved& resolved() const {
    std::lock_guard<std::mutex> lk(mu_);
    if (res_) return *res_;
    thread_local std::set<const VirtualArray*> resolving;
    if (resolving.count(this)) fail(ELOOP, what_ + ": VDS maps onto itself");
    resolving.insert(this);
    auto res = std::make_unique<Resolved>();
    try {
      resolve(*res);
    } catch (...) {
      resolving.erase(this);
      throw;
    }
    resolving.erase(this);
    res_ = std::move(res);
    return *res_;
  }

  void resolve(Resolved& res) const {
    const auto& maps = info_->vds;
    res.sources.resize(maps.size());
    res.errors.resize(maps.size());
    res.pairs.resize(maps.size());
    res.srcspace.resize(maps.size());
    // The sources' metadata first, all of them in one HDF5 helper request per helper (a VDS
    // over a run's files has hundreds of mappings: one round trip each would be its first read).
    std::vector<std::pair<std::string, std::string>> sources;
    for (const VdsMapping& map : maps)
      if (!map.resolved_file.empty()) sources.emplace_back(map.resolved_file, map.dataset_name);
    sources_.prefetch_infos(sources);
    for (size_t m = 0; m < maps.size(); ++m) {
      const VdsMapping& map = maps[m];
      const std::string where = what_ + ": VDS mapping " + std::to_string(m) + " (" + map.file_name + ":" + map.dataset_name + ")";
      if (map.resolved_file.empty()) {
        res.errors[m] = where + ": source file not found";
      } else {
        try {
          auto sinfo = sources_.dataset_info(map.resolved_file, map.dataset_name);
          if (!sinfo->is_array || sinfo->dtype.itemsize != info_->dtype.itemsize ||
              npy_descr_literal(sinfo->dtype) != npy_descr_literal(info_->dtype)) {
            res.use_fallback = true;  // type conversion between source and VDS: the library does it
            engine_.stats().note_fallback("VDS source type differs from the VDS type");
            return;
          }
          res.sources[m] = sources_.dataset_array(map.resolved_file, map.dataset_name);
        } catch (const Error& e) {
          if (e.code() == ELOOP) throw;
          res.errors[m] = where + ": " + e.what();
        }
      }
      // An "all" source selection may come without an extent: take the source's shape.
      // A missing source selected whole is taken to have the shape of its virtual selection,
      // so that reads touching it can say it is missing.
      res.srcspace[m] = map.srcspace;
      if (map.srcspace.is_all) {
        Shape sshape;
        if (res.sources[m]) {
          sshape = res.sources[m]->shape();
        } else {
          for (size_t k = 0; k < map.vspace.count.size(); ++k) sshape.push_back(nsel(map.vspace, k));
        }
        Hyperslab& h = res.srcspace[m];
        h.start.assign(sshape.size(), 0);
        h.stride.assign(sshape.size(), 1);
        h.count.assign(sshape.size(), 1);
        h.block = sshape;
      }
      const Hyperslab& srcsel = res.srcspace[m];
      // Pair the dimensions that select more than one element, in order.
      std::vector<size_t> vd, sd;
      for (size_t k = 0; k < map.vspace.count.size(); ++k)
        if (nsel(map.vspace, k) != 1) vd.push_back(k);
      for (size_t k = 0; k < srcsel.count.size(); ++k)
        if (nsel(srcsel, k) != 1) sd.push_back(k);
      bool ok = vd.size() == sd.size();
      for (size_t i = 0; ok && i < vd.size(); ++i) ok = nsel(map.vspace, vd[i]) == nsel(srcsel, sd[i]);
      if (!ok) {
        res.use_fallback = true;
        engine_.stats().note_fallback("VDS mapping whose selections differ in shape");
        return;
      }
      for (size_t i = 0; i < vd.size(); ++i) res.pairs[m].emplace_back(vd[i], sd[i]);
    }
  }

  // Mapping m maps whole rows: virtual axis 0 onto source axis 0, every other axis selected
  // whole (one block from 0) on both sides, with equal extents.
  bool whole_rows(const Resolved& res, size_t m) const {
    const Hyperslab& v = info_->vds[m].vspace;
    const Hyperslab& s = res.srcspace[m];
    const Shape& ss = res.sources[m]->shape();
    const Shape& vs = shape();
    if (v.start.size() != vs.size() || s.start.size() != ss.size() || vs.size() != ss.size()) return false;
    if (res.pairs[m].empty() || res.pairs[m][0] != std::make_pair(size_t(0), size_t(0))) return false;
    for (size_t k = 1; k < vs.size(); ++k) {
      const bool vw = v.start[k] == 0 && v.count[k] == 1 && v.block[k] == vs[k];
      const bool sw = s.start[k] == 0 && s.count[k] == 1 && s.block[k] == ss[k];
      if (!vw || !sw || vs[k] != ss[k]) return false;
    }
    return true;
  }

  // Calls fn(mapping, source region, destination) for every piece of region r that a mapping
  // covers. With dst == nullptr the destination passed is empty (prefetch).
  template <class Fn>
  void for_each_piece(const Resolved& res, const Region& r, Fn&& fn, const DestView* dst) const {
    const auto& maps = info_->vds;
    for (size_t m = 0; m < maps.size(); ++m) {
      const VdsMapping& map = maps[m];
      const Hyperslab& v = map.vspace;
      const Hyperslab& s = res.srcspace[m];
      const size_t vrank = v.start.size(), srank = s.start.size();
      if (vrank != r.start.size()) continue;
      Shape src_extent = res.sources[m] ? res.sources[m]->shape() : s.block;
      if (!res.sources[m])  // missing: its extent is unknown; cover the whole selection
        for (size_t k = 0; k < src_extent.size(); ++k) src_extent[k] = ~uint64_t(0);
      // Fixed virtual coordinates must lie inside r.
      bool inside = true;
      std::vector<bool> v_paired(vrank, false), s_paired(srank, false);
      for (auto [kv, ks] : res.pairs[m]) v_paired[kv] = s_paired[ks] = true;
      for (size_t k = 0; k < vrank && inside; ++k)
        if (!v_paired[k]) inside = nsel(v, k) == 1 && v.start[k] >= r.start[k] && v.start[k] < r.start[k] + r.count[k];
      for (size_t k = 0; k < srank && inside; ++k)
        if (!s_paired[k]) inside = k < src_extent.size() && s.start[k] < src_extent[k];
      if (!inside) continue;
      std::vector<std::vector<Seg>> segs(res.pairs[m].size());
      bool empty = false;
      for (size_t i = 0; i < res.pairs[m].size(); ++i) {
        auto [kv, ks] = res.pairs[m][i];
        dim_segments(v, kv, s, ks, r.start[kv], r.start[kv] + r.count[kv],
                     ks < src_extent.size() ? src_extent[ks] : 0, segs[i]);
        if (segs[i].empty()) empty = true;
      }
      if (empty) continue;
      // Cartesian product of the per-dimension segments.
      std::vector<size_t> idx(segs.size(), 0);
      for (;;) {
        Region src;
        src.start.assign(srank, 0);
        src.count.assign(srank, 1);
        for (size_t k = 0; k < srank; ++k)
          if (!s_paired[k]) src.start[k] = s.start[k];
        DestView d;
        if (dst) {
          d.base = dst->base;
          d.strides.assign(srank, 0);
          for (size_t k = 0; k < vrank; ++k)
            if (!v_paired[k]) d.base += static_cast<int64_t>(v.start[k] - r.start[k]) * dst->strides[k];
        }
        for (size_t i = 0; i < segs.size(); ++i) {
          auto [kv, ks] = res.pairs[m][i];
          const Seg& sg = segs[i][idx[i]];
          src.start[ks] = sg.s;
          src.count[ks] = sg.n;
          if (dst) {
            d.base += static_cast<int64_t>(sg.v - r.start[kv]) * dst->strides[kv];
            d.strides[ks] = dst->strides[kv];
          }
        }
        fn(m, src, d);
        size_t i = segs.size();
        bool done = true;
        while (i > 0) {
          --i;
          if (++idx[i] < segs[i].size()) {
            done = false;
            break;
          }
          idx[i] = 0;
        }
        if (done) break;
      }
    }
  }

  Engine& engine_;
  DatasetSources& sources_;
  std::shared_ptr<const DatasetInfo> info_;
  ArrayPtr fallback_;
  std::string what_;
  // Lock level 2 (docs/architecture.md): after Run::mu_ and a VDS mapping onto this one, before
  // the HDF5 lock; held while the sources are resolved. Guards res_ creation.
  mutable std::mutex mu_;
  mutable std::unique_ptr<Resolved> res_;
};

}  // namespace

ArrayPtr make_virtual_array(Engine& engine, DatasetSources& sources, std::shared_ptr<const DatasetInfo> info,
                            const StorageInfo& st) {
  ArrayPtr fallback = make_library_array(engine, sources, info, st, "VDS read through the library");
  for (const auto& m : info->vds) {
    for (size_t k = 0; k < m.vspace.count.size(); ++k)
      if (m.vspace.count[k] == kUnlimited || m.vspace.block[k] == kUnlimited)
        return make_library_array(engine, sources, info, st, "VDS with an unlimited mapping");
    for (size_t k = 0; k < m.srcspace.count.size(); ++k)
      if (m.srcspace.count[k] == kUnlimited || m.srcspace.block[k] == kUnlimited)
        return make_library_array(engine, sources, info, st, "VDS with an unlimited mapping");
  }
  return std::make_shared<VirtualArray>(engine, sources, std::move(info), std::move(fallback));
}

}  // namespace h5d
