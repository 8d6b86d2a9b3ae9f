// ChunkMap: where every chunk of a dataset is, keyed by linear chunk index over the chunk grid
// (ceil(dims / chunk dims), C order). Dense vector for ordinary grids; a sparse ordered map for
// enormous grids (> kDenseLimit chunks), which holds allocated chunks only.
#include "core/error.h"
#include "core/fmt/chunk_index.h"

namespace h5d::fmt {

ChunkMap::ChunkMap(Shape dims, Shape chunk_dims, uint64_t max_records) {
  if (dims.size() != chunk_dims.size())
    fail_data("chunk map: dataset rank " + std::to_string(dims.size()) + " differs from chunk rank " +
              std::to_string(chunk_dims.size()));
  grid_.resize(dims.size());
  uint64_t n = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (chunk_dims[k] == 0) fail_data("chunk map: chunk dimension " + std::to_string(k) + " is 0");
    grid_[k] = dims[k] / chunk_dims[k] + (dims[k] % chunk_dims[k] != 0);
    if (__builtin_mul_overflow(n, grid_[k], &n))
      fail(EFBIG, "chunk map: chunk grid of more than 2^64 chunks");
  }
  grid_size_ = n;
  sparse_mode_ = n > kDenseLimit || n > max_records;
  if (!sparse_mode_) dense_.assign(n, ChunkLoc{});
}

uint64_t ChunkMap::grid_size() const { return grid_size_; }

uint64_t ChunkMap::linear(const uint64_t* scaled) const {
  uint64_t idx = 0;
  for (size_t k = 0; k < grid_.size(); ++k) idx = idx * grid_[k] + scaled[k];
  return idx;
}

const ChunkLoc* ChunkMap::find(uint64_t linear_index) const {
  if (sparse_mode_) {
    auto it = sparse_.find(linear_index);
    return it == sparse_.end() ? nullptr : &it->second;
  }
  if (linear_index >= dense_.size() || dense_[linear_index].addr == kUndefAddr) return nullptr;
  return &dense_[linear_index];
}

void ChunkMap::set(const uint64_t* scaled, const ChunkLoc& loc) {
  for (size_t k = 0; k < grid_.size(); ++k)
    if (scaled[k] >= grid_[k]) return;  // beyond the current extent
  if (loc.addr == kUndefAddr) return;
  const uint64_t idx = linear(scaled);
  auto duplicate = [&] {
    fail_data("chunk index lists chunk " + std::to_string(idx) + " twice (corrupt index)");
  };
  if (sparse_mode_) {
    if (allocated_ >= kSparseLimit)
      fail(EFBIG, "chunk map: more than " + std::to_string(kSparseLimit) + " allocated chunks");
    if (!sparse_.emplace(idx, loc).second) duplicate();
  } else {
    if (dense_[idx].addr != kUndefAddr) duplicate();
    dense_[idx] = loc;
  }
  ++allocated_;
}

void ChunkMap::mark_damaged(uint64_t linear_index, const std::string& why) {
  auto [it, inserted] = damage_.emplace(linear_index, why);
  if (!inserted && it->second.size() < 400) it->second += "; " + why;
}

const std::string* ChunkMap::damage(uint64_t linear_index) const {
  if (damage_.empty()) return nullptr;
  auto it = damage_.find(linear_index);
  return it == damage_.end() ? nullptr : &it->second;
}

}  // namespace h5d::fmt
