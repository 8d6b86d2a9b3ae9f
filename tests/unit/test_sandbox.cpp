// The helpers' sandbox as decided without a helper: which layers a kernel allows
// (core/h5lib/sandbox_plan.h), and what the broker hands a helper (core/h5lib/broker.h), checked
// against files made here (the descriptor's file, a symlink's target, modes, owners).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/h5lib/broker.h"
#include "core/h5lib/sandbox_plan.h"
#include "tests/support/h5fixture.h"

using namespace h5d;

namespace {

KernelReport full_kernel() {
  KernelReport k;
  k.seccomp = true;
  k.landlock_abi = 7;
  k.root = true;
  k.can_switch_uid = true;
  return k;
}

void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

void write_hdf5(const std::string& path) {
  test::FileSpec f;
  f.path = path;
  test::DsetSpec d;
  d.dims = {4};
  d.layout = "contiguous";
  test::write_dataset(f, d);
}

std::string fresh_dir(const std::string& name) {
  const std::string d = test::scratch_path(name);
  std::system(("rm -rf '" + d + "'").c_str());
  REQUIRE(::mkdir(d.c_str(), 0755) == 0);
  return d;
}

// The broker's answer as a pair (got a descriptor, errno), its descriptor closed.
std::pair<bool, int> ask(Broker& b, const std::string& path, int flags, const std::vector<std::string>& files) {
  BrokerAnswer a = b.open(path, flags, 0644, files);
  if (a.fd >= 0) ::close(a.fd);
  return {a.fd >= 0, a.error};
}

}  // namespace

TEST_CASE("sandbox plan: every layer a kernel has, the missing ones named", "[sandbox]") {
  const SandboxPlan all = plan_sandbox(full_kernel(), SandboxMode::All);
  CHECK(all.complete());
  CHECK(all.no_new_privs);
  CHECK(all.not_dumpable);
  CHECK(all.drop_caps);
  CHECK(all.drop_uid);
  CHECK(all.seccomp);
  CHECK_FALSE(all.seccomp_log);
  CHECK(all.landlock_abi == 7);
  CHECK(all.limits);
  CHECK(describe(all) ==
        "no_new_privs, not dumpable, capabilities dropped (uid 65534), landlock ABI 7, seccomp, limits");

  KernelReport old = full_kernel();
  old.landlock_abi = 0;  // a kernel before 5.13, or without lsm=landlock
  const SandboxPlan no_landlock = plan_sandbox(old, SandboxMode::All);
  CHECK_FALSE(no_landlock.complete());
  CHECK(no_landlock.landlock_abi == 0);
  CHECK(no_landlock.seccomp);  // the other layers still hold
  REQUIRE(no_landlock.missing.size() == 1);
  CHECK(no_landlock.missing[0].rfind("landlock", 0) == 0);
  CHECK(describe(no_landlock).find("; missing: landlock") != std::string::npos);

  KernelReport container = full_kernel();
  container.seccomp = false;  // seccomp refused to a container
  container.landlock_abi = 3;
  const SandboxPlan no_seccomp = plan_sandbox(container, SandboxMode::Strict);
  CHECK_FALSE(no_seccomp.complete());
  CHECK_FALSE(no_seccomp.seccomp);
  CHECK(no_seccomp.landlock_abi == 3);
  CHECK(describe(no_seccomp).find("missing: seccomp") != std::string::npos);

  KernelReport user = full_kernel();
  user.root = false;  // a user's mount: no uid to leave, no capabilities to drop but ambient ones
  user.can_switch_uid = false;
  const SandboxPlan mine = plan_sandbox(user, SandboxMode::All);
  CHECK(mine.complete());
  CHECK_FALSE(mine.drop_uid);
  CHECK(mine.drop_caps);

  KernelReport stuck = full_kernel();
  stuck.can_switch_uid = false;  // root without CAP_SETUID in the bounding set
  CHECK_FALSE(plan_sandbox(stuck, SandboxMode::All).complete());

  const SandboxPlan log = plan_sandbox(full_kernel(), SandboxMode::Log);
  CHECK(log.seccomp);
  CHECK(log.seccomp_log);
  CHECK(describe(log).find("seccomp (log only)") != std::string::npos);

  const SandboxPlan off = plan_sandbox(full_kernel(), SandboxMode::Off);
  CHECK_FALSE(off.seccomp);
  CHECK_FALSE(off.no_new_privs);
  CHECK(off.landlock_abi == 0);
  CHECK(describe(off) == "off");
}

TEST_CASE("sandbox plan: the layers a report names, for the metrics", "[sandbox]") {
  auto held = [](const std::string& report) {
    std::vector<std::string> out;
    for (const auto& [name, on] : layers_held(report)) {
      if (on) out.push_back(name);
    }
    return out;
  };
  CHECK(held(describe(plan_sandbox(full_kernel(), SandboxMode::All))) ==
        std::vector<std::string>{"no_new_privs", "not_dumpable", "capabilities", "landlock", "seccomp", "limits"});
  KernelReport old = full_kernel();
  old.landlock_abi = 0;
  CHECK(held(describe(plan_sandbox(old, SandboxMode::All))) ==
        std::vector<std::string>{"no_new_privs", "not_dumpable", "capabilities", "seccomp", "limits"});
  // Log mode refuses nothing: its filter does not count as a layer.
  CHECK(held(describe(plan_sandbox(full_kernel(), SandboxMode::Log))) ==
        std::vector<std::string>{"no_new_privs", "not_dumpable", "capabilities", "landlock", "limits"});
  CHECK(held("off").empty());
  CHECK(held("").empty());
  SandboxMode m = SandboxMode::All;
  CHECK(parse_sandbox_mode("strict", m));
  CHECK(m == SandboxMode::Strict);
  CHECK_FALSE(parse_sandbox_mode("none", m));
}

TEST_CASE("broker: a read helper gets regular files of the source, read-only, and nothing else", "[sandbox]") {
  const std::string root = fresh_dir("broker-src");
  const std::string outside = fresh_dir("broker-out");
  write_hdf5(root + "/a.h5");
  write_text(root + "/segment.bin", "raw bytes of an external file");
  REQUIRE(::mkfifo((root + "/fifo").c_str(), 0644) == 0);
  REQUIRE(::mkdir((root + "/dir").c_str(), 0755) == 0);
  write_text(outside + "/secret.txt", "not HDF5");
  write_hdf5(outside + "/other.h5");
  REQUIRE(::symlink((outside + "/secret.txt").c_str(), (root + "/leak").c_str()) == 0);
  REQUIRE(::symlink("/etc/shadow", (root + "/shadow").c_str()) == 0);
  SourceBroker b({root});
  const std::vector<std::string> req = {root + "/a.h5"};

  CHECK(ask(b, root + "/a.h5", O_RDONLY, req) == std::make_pair(true, 0));
  CHECK(ask(b, root + "/segment.bin", O_RDONLY, req).first);  // an external file beside it
  CHECK(ask(b, root + "/missing.h5", O_RDONLY, req) == std::make_pair(false, ENOENT));
  // Never written, never created, never anything but a regular file (a FIFO is not waited on).
  CHECK(ask(b, root + "/a.h5", O_RDWR, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/a.h5", O_WRONLY | O_TRUNC, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/new.h5", O_RDONLY | O_CREAT, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/fifo", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/dir", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, "a.h5", O_RDONLY, req) == std::make_pair(false, EACCES));  // relative
  // Outside the source, only HDF5 files, and a symlink counts where it leads.
  CHECK(ask(b, "/etc/shadow", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, "/etc/passwd", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/shadow", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, root + "/leak", O_RDONLY, req) == std::make_pair(false, EACCES));
  CHECK(ask(b, outside + "/secret.txt", O_RDONLY, {outside + "/secret.txt"}) == std::make_pair(false, EACCES));
  // An HDF5 file outside it: when the request names it (a VDS source the daemon resolved) ...
  CHECK(ask(b, outside + "/other.h5", O_RDONLY, {outside + "/other.h5"}).first);
  CHECK(b.refused() >= 11);
  CHECK(b.opened() >= 3);
  CHECK(b.should_log("/etc/shadow"));
  CHECK_FALSE(b.should_log("/etc/shadow"));  // each refused path logged once
}

TEST_CASE("broker: libhdf5's own opens outside the source reach what the file's owner may read", "[sandbox]") {
  if (::geteuid() != 0) return;  // files of another owner: made as root
  const std::string root = fresh_dir("broker-owner-src");
  const std::string outside = fresh_dir("broker-owner-out");
  write_hdf5(root + "/users.h5");
  write_hdf5(root + "/roots.h5");
  write_hdf5(outside + "/private.h5");
  write_hdf5(outside + "/public.h5");
  REQUIRE(::chown((root + "/users.h5").c_str(), 65534, 65534) == 0);  // written by an ordinary user
  REQUIRE(::chmod((outside + "/private.h5").c_str(), 0600) == 0);   // root's own
  REQUIRE(::chmod((outside + "/public.h5").c_str(), 0644) == 0);
  SourceBroker b({root});
  // The user's file links to root's private file: refused, to the public one: given.
  CHECK(ask(b, outside + "/private.h5", O_RDONLY, {root + "/users.h5"}) == std::make_pair(false, EACCES));
  CHECK(ask(b, outside + "/public.h5", O_RDONLY, {root + "/users.h5"}).first);
  // A file of root's reaches what anyone may read, not all that root may.
  CHECK(ask(b, outside + "/private.h5", O_RDONLY, {root + "/roots.h5"}) == std::make_pair(false, EACCES));
  CHECK(ask(b, outside + "/public.h5", O_RDONLY, {root + "/roots.h5"}).first);
  // A directory on the way the owner may not pass.
  REQUIRE(::chmod(outside.c_str(), 0700) == 0);
  CHECK(ask(b, outside + "/public.h5", O_RDONLY, {root + "/users.h5"}) == std::make_pair(false, EACCES));
}

TEST_CASE("broker: a writer process gets its one file, created once", "[sandbox]") {
  const std::string dir = fresh_dir("broker-writer");
  const std::string mine = dir + "/out.h5";
  WriterBroker b(mine);
  CHECK(ask(b, mine, O_RDWR, {mine}) == std::make_pair(false, EACCES));  // not created yet
  CHECK(ask(b, mine, O_RDWR | O_CREAT, {mine}) == std::make_pair(false, EACCES));  // only exclusively
  CHECK(ask(b, mine, O_RDWR | O_CREAT | O_EXCL, {mine}).first);
  CHECK(ask(b, mine, O_RDWR | O_CREAT | O_EXCL, {mine}) == std::make_pair(false, EACCES));  // once
  CHECK(ask(b, mine, O_RDWR, {mine}).first);  // reopened
  CHECK(ask(b, dir + "/other.h5", O_RDWR | O_CREAT | O_EXCL, {mine}) == std::make_pair(false, EACCES));
  CHECK(ask(b, "/etc/passwd", O_RDONLY, {mine}) == std::make_pair(false, EACCES));
  // Replaced behind it: no longer its file.
  REQUIRE(::unlink(mine.c_str()) == 0);
  write_text(mine, "someone else's");
  CHECK(ask(b, mine, O_RDWR, {mine}) == std::make_pair(false, EACCES));
}
