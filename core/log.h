// Minimal logging: a process-wide sink (stderr by default; fusefs switches to syslog when it
// daemonizes) and a debug switch (-o debug) that logs which path served each read.
#pragma once
#include <functional>
#include <string>

namespace h5d::log {

enum class Level { Debug, Info, Warn, Error };

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

}  // namespace h5d::log
