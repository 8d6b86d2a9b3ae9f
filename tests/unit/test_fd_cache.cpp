// FdCache::hold (core/engine/fd_cache.h): a held file keeps being read through its descriptor
// when it is deleted or replaced, never when it is modified in place; holds stay within the
// descriptor bound and end with their handles. The oracle: the bytes written to the file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "core/engine/fd_cache.h"
#include "core/error.h"
#include "tests/support/errno_of.h"
#include "tests/support/h5fixture.h"

using namespace h5d;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

std::string read_through(FdCache& fds, const std::string& path, const FileIdentity& id, size_t n) {
  auto fd = fds.get(path, &id);
  std::string out(n, '\0');
  pread_exact(fd->fd(), out.data(), n, 0, path);
  fds.recheck(path, id);
  return out;
}

}  // namespace

TEST_CASE("fd cache: a held file is read through its descriptor once deleted or replaced, not once modified",
          "[fd_cache]") {
  const std::string path = test::scratch_path("held.bin");
  write_file(path, "old bytes of the file");
  const FileIdentity id = current_identity(path);
  FdCache fds(16);

  SECTION("deleted: held, the old bytes; unheld, ESTALE") {
    auto hold = fds.hold(path, id);
    REQUIRE(hold);
    REQUIRE(fds.held_count() == 1);
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE(read_through(fds, path, id, 9) == "old bytes");
    hold.reset();
    REQUIRE(fds.held_count() == 0);
    REQUIRE(test::errno_of([&] { fds.get(path, &id); }) == ESTALE);
  }
  SECTION("replaced by rename: the held file's old bytes; a new file's identity reads the new one") {
    auto hold = fds.hold(path, id);
    REQUIRE(hold);
    write_file(path + ".new", "new bytes, another file");
    REQUIRE(::rename((path + ".new").c_str(), path.c_str()) == 0);
    REQUIRE(read_through(fds, path, id, 9) == "old bytes");
    const FileIdentity now = current_identity(path);
    REQUIRE(read_through(fds, path, now, 9) == "new bytes");
  }
  SECTION("modified in place: ESTALE, held or not (never a mix of old and new bytes)") {
    auto hold = fds.hold(path, id);
    REQUIRE(hold);
    ::usleep(20000);  // a new mtime
    write_file(path, "rewritten in place, longer than before");
    REQUIRE(test::errno_of([&] { fds.get(path, &id); }) == ESTALE);
    REQUIRE(test::errno_of([&] { fds.recheck(path, id); }) == ESTALE);
  }
  SECTION("a file no longer as its metadata says is not taken hold of") {
    REQUIRE(::unlink(path.c_str()) == 0);
    REQUIRE_FALSE(fds.hold(path, id));
  }
  ::unlink(path.c_str());
}

TEST_CASE("fd cache: holds stay within max_open - max(1, max_open / 8) and are shared", "[fd_cache]") {
  FdCache fds(8);  // at most 7 held
  REQUIRE(fds.hold_limit() == 7);
  std::vector<std::string> paths;
  std::vector<std::shared_ptr<const void>> holds;
  for (size_t i = 0; i < 9; ++i) {
    paths.push_back(test::scratch_path("bound" + std::to_string(i) + ".bin"));
    write_file(paths.back(), "file " + std::to_string(i));
  }
  for (size_t i = 0; i < 7; ++i) {
    bool bound = true;
    holds.push_back(fds.hold(paths[i], current_identity(paths[i]), &bound));
    REQUIRE(holds.back());
    REQUIRE_FALSE(bound);
  }
  bool bound = false;
  REQUIRE_FALSE(fds.hold(paths[7], current_identity(paths[7]), &bound));
  REQUIRE(bound);
  // the same file held again costs no descriptor
  auto again = fds.hold(paths[0], current_identity(paths[0]), &bound);
  REQUIRE(again);
  REQUIRE(fds.held_count() == 7);
  // the cache keeps what the holds leave of the bound (and at least one)
  for (size_t i = 0; i < 9; ++i) fds.get(paths[i]);
  REQUIRE(fds.open_count() <= 1);
  holds.clear();
  REQUIRE(fds.held_count() == 1);  // `again` still holds file 0
  again.reset();
  REQUIRE(fds.held_count() == 0);
  for (const auto& p : paths) ::unlink(p.c_str());
}
