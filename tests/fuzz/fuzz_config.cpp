// libFuzzer target for the option parser (user input): byte 0 picks the entry point, the rest is
// its input. 0: a command line (arguments separated by NUL bytes); 1: a JSON config document;
// 2: a size ("512M"); 3: a -o list. Parsing must either succeed or throw config::ConfigError
// (a message for the user); any other exception aborts, sanitizers catch everything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/options.h"

// libFuzzer's entry point, declared as its FuzzerInterface.h does.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  // config=FILE would read whatever file the input names: keep the fuzzer off the disk.
  if (body.find("config") != std::string::npos) return 0;
  using h5d::config::ConfigError;
  try {
    switch (data[0] % 4) {
      case 0: {
        std::vector<std::string> args;
        size_t pos = 0;
        while (pos <= body.size()) {
          size_t end = body.find('\0', pos);
          if (end == std::string::npos) end = body.size();
          args.push_back(body.substr(pos, end - pos));
          pos = end + 1;
        }
        h5d::config::parse_command_line(args);  // paths are checked later (mount.cpp)
        break;
      }
      case 1: {
        nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return 0;
        h5d::config::MountOptions m;
        h5d::config::apply_config_json(m, j, "fuzz");
        break;
      }
      case 2:
        h5d::config::parse_size(body);
        break;
      default: {
        auto items = h5d::config::split_option_list(body);
        h5d::config::MountOptions m;
        for (const auto& it : items) h5d::config::apply_option(m, it);
        break;
      }
    }
  } catch (const ConfigError&) {
  }
  return 0;
}
