#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace h5d {

namespace log {
namespace {
std::mutex g_mu;  // lock level 6 (docs/architecture.md), innermost: after any other; guards g_sink
Sink g_sink;
std::atomic<bool> g_debug{false};
std::string g_program = "h5direct";  // guarded by g_mu
const char* level_name(Level l) {
  switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warning";
    case Level::Error: return "error";
  }
  return "?";
}
}  // namespace

void set_sink(Sink sink) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_sink = std::move(sink);
}
void set_program(const std::string& name) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_program = name;
}
void set_debug(bool on) { g_debug = on; }
bool debug_enabled() { return g_debug.load(std::memory_order_relaxed); }

void write(Level level, const std::string& msg) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_sink) {
    g_sink(level, msg);
  } else {
    std::fprintf(stderr, "%s: %s: %s\n", g_program.c_str(), level_name(level), msg.c_str());
  }
}

}  // namespace log
}  // namespace h5d
