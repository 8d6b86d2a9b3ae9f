// The shape of an N-d array (and of its chunks, selections, offsets): one extent per dimension,
// outermost first. Part of the core's vocabulary (core/vocab/: standard library only).
#pragma once
#include <cstdint>
#include <vector>

namespace h5d {

using Shape = std::vector<uint64_t>;

}  // namespace h5d
