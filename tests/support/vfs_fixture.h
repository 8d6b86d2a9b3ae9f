// A Vfs over one source (a file or a directory) with the built-in providers, on a test engine
// of two threads: what the unit tests of reads through the Vfs (no mount) start from. Header
// only: the unit tests link vfs, the test support library does not.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/h5fixture.h"
#include "vfs/providers.h"
#include "vfs/vfs.h"

namespace h5d::test {

struct VfsOver {
  explicit VfsOver(const std::string& source) : engine(options()), fs(engine, engine.files, opts, source) {
    vfs::install_builtin_providers(fs, opts);
  }
  static CoreOptions options() {
    CoreOptions o;
    o.threads = 2;
    return o;
  }
  // stats.json, parsed.
  nlohmann::json figures() { return nlohmann::json::parse(fs.render_stats()); }

  TestCore engine;
  vfs::VfsOptions opts;
  vfs::Vfs fs;
};

}  // namespace h5d::test
