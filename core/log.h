// Minimal logging: a process-wide sink (stderr by default; fusefs switches to syslog when it
// daemonizes) and a debug switch (-o debug) that logs which path served each read.
//
// Whatever the sink, the recent lines are also kept in memory (a ring of at most kRecentLines
// lines and kRecentBytes bytes: MNT/.h5direct/log), and so are the recent errors that were
// reported with their place (report(): file, dataset, chunk; stats.json "recent_errors"), so
// that a mount's log has a home even when syslog is not there.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace h5d::log {

enum class Level { Debug, Info, Warn, Error };
const char* level_name(Level l);

using Sink = std::function<void(Level, const std::string&)>;
void set_sink(Sink sink);
// The name the default sink (stderr) starts its lines with: the program's name as invoked
// ("h5direct" unless set).
void set_program(const std::string& name);
void set_debug(bool on);
bool debug_enabled();
void write(Level level, const std::string& msg);

inline void debug(const std::string& m) { if (debug_enabled()) write(Level::Debug, m); }
inline void info(const std::string& m) { write(Level::Info, m); }
inline void warn(const std::string& m) { write(Level::Warn, m); }
inline void error(const std::string& m) { write(Level::Error, m); }

constexpr size_t kRecentLines = 1000;
constexpr size_t kRecentBytes = 256 * 1024;
constexpr size_t kRecentErrors = 100;

// The recent log lines, oldest first, each "2026-05-01T12:00:00.123Z error: MESSAGE\n".
std::string recent_text();
// The time now as those lines stamp it (UTC, milliseconds): for sinks that write their own lines.
std::string stamp_now();

// One failed request as reported (report()).
struct ErrorEntry {
  double time = 0;  // seconds since the epoch
  int code = 0;     // errno
  Level level = Level::Error;
  Place place;
  std::string message;
};
// Writes `msg` at `level` and keeps it among the recent errors (at most kRecentErrors), with its
// errno and place: every failed request that is worth a line goes through here, once.
void report(Level level, int code, const Place& place, const std::string& msg);
// The recent errors, oldest first, and how many were reported since start.
std::vector<ErrorEntry> recent_errors();
uint64_t errors_reported();

}  // namespace h5d::log
