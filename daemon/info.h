// `h5direct info PATH`: a European XFEL run's summary as EXtra-data's run.info() prints it
// (docs/euxfel.md, "Run summary"), from a run view in a mount (its run.json) or from a run
// directory's files; a folder of runs, a line each (lsxfel); an HDF5 file's datasets, and what of
// a damaged one cannot be read.
#pragma once
#include <string>
#include <vector>

namespace h5d::daemon {

// `args`: the arguments after "info". Returns the process exit status.
int run_info(const std::string& program, const std::vector<std::string>& args);

}  // namespace h5d::daemon
