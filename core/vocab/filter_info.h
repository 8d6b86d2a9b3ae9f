// One filter of a dataset's pipeline, as stored (the filter pipeline message). Part of the core's
// vocabulary (core/vocab/: standard library only); filters/filters.h names the ids and decodes.
#pragma once
#include <string>
#include <vector>

namespace h5d::filters {

struct FilterInfo {
  int id = 0;
  std::string name;  // as stored in the pipeline message (may be empty)
  unsigned flags = 0;
  std::vector<unsigned> cd_values;
};

}  // namespace h5d::filters

namespace h5d {
// A dataset's pipeline as stored is also metadata of the dataset (DatasetInfo::filters in
// vocab/dataset_info.h, the helper protocol, the writer's specs): that one type is named in h5d too.
using filters::FilterInfo;
}  // namespace h5d
