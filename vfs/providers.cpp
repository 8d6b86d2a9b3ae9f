#include "vfs/providers.h"

#include "vfs/run_view.h"

namespace h5d::vfs {

void install_builtin_providers(Vfs& vfs, const VfsOptions& opts) {
  // The EuXFEL run view (empty factory when run_view is off or per_file).
  if (auto f = make_run_view_factory(opts)) vfs.add_provider_factory(std::move(f));
}

}  // namespace h5d::vfs
