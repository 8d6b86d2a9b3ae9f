#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <string>

namespace h5d {

namespace log {
namespace {
// Lock level 6 (docs/architecture.md), innermost: after any other; guards g_sink, the ring
// of recent lines and the recent errors.
std::mutex g_mu;
Sink g_sink;
std::atomic<bool> g_debug{false};
std::string g_program = "h5direct";  // guarded by g_mu
std::deque<std::string> g_lines;
size_t g_line_bytes = 0;
std::deque<ErrorEntry> g_errors;
uint64_t g_errors_total = 0;

std::string stamp(const timespec& ts) {
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char b[40];
  const size_t n = std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(b + n, sizeof b - n, ".%03ldZ", ts.tv_nsec / 1000000);
  return b;
}

// Under g_mu.
void keep_line(const timespec& ts, Level level, const std::string& msg) {
  std::string line = stamp(ts) + " " + level_name(level) + ": " + msg + "\n";
  if (line.size() > kRecentBytes / 4) line = line.substr(0, kRecentBytes / 4 - 5) + " ...\n";
  g_line_bytes += line.size();
  g_lines.push_back(std::move(line));
  while (g_lines.size() > kRecentLines || g_line_bytes > kRecentBytes) {
    g_line_bytes -= g_lines.front().size();
    g_lines.pop_front();
  }
}

void write_locked(Level level, const std::string& msg) {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  keep_line(ts, level, msg);
  if (g_sink) {
    g_sink(level, msg);
  } else {
    std::fprintf(stderr, "%s: %s: %s\n", g_program.c_str(), level_name(level), msg.c_str());
  }
}
}  // namespace

const char* level_name(Level l) {
  switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warning";
    case Level::Error: return "error";
  }
  return "?";
}

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
  write_locked(level, msg);
}

std::string stamp_now() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return stamp(ts);
}

std::string recent_text() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::string out;
  out.reserve(g_line_bytes);
  for (const std::string& l : g_lines) out += l;
  return out;
}

void report(Level level, int code, const Place& place, const std::string& msg) {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::lock_guard<std::mutex> lk(g_mu);
  if (level != Level::Debug || debug_enabled()) write_locked(level, msg);
  g_errors.push_back(ErrorEntry{double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9, code, level, place,
                                msg.size() > 4096 ? msg.substr(0, 4096) : msg});
  if (g_errors.size() > kRecentErrors) g_errors.pop_front();
  ++g_errors_total;
}

std::vector<ErrorEntry> recent_errors() {
  std::lock_guard<std::mutex> lk(g_mu);
  return {g_errors.begin(), g_errors.end()};
}

uint64_t errors_reported() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_errors_total;
}

}  // namespace log
}  // namespace h5d
