// Replays fuzz inputs as a normal test (zstd's regression driver does the same): every file in
// the directories (or the files) named on the command line goes through the target's
// LLVMFuzzerTestOneInput once. Built with the target's source by tests/CMakeLists.txt, without
// libFuzzer, so the seed corpora (and crashes added to them) run in every build, the ASan one
// included. Exit status: 0 when every input was replayed.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> inputs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  if (!S_ISDIR(st.st_mode)) return {path};
  std::vector<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(path + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    const std::vector<std::string> files = inputs(argv[i]);
    if (files.empty()) {
      std::fprintf(stderr, "fuzz replay: no inputs at %s\n", argv[i]);
      return 1;
    }
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++n;
    }
  }
  std::printf("fuzz replay: %zu inputs\n", n);
  return 0;
}
