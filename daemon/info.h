// `h5direct info PATH`: a European XFEL run's summary like extra-data-run-info (docs/euxfel.md,
// "Run summary"), from a run view in a mount (its run.json) or from a run directory's files.
#pragma once
#include <string>
#include <vector>

namespace h5d::daemon {

// `args`: the arguments after "info". Returns the process exit status.
int run_info(const std::string& program, const std::vector<std::string>& args);

}  // namespace h5d::daemon
