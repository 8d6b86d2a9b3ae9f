// The providers every mount gets besides the plain tree (the EuXFEL run view, ...).
#pragma once
#include "vfs/vfs.h"

namespace h5d::vfs {

// Registers the built-in provider factories with `vfs` according to its options. Called by the
// mount program once, before the first access.
void install_builtin_providers(Vfs& vfs, const VfsOptions& opts);

}  // namespace h5d::vfs
