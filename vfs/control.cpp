// The control directory's files (.h5direct/): stats.json, metrics (Prometheus text exposition
// format) and log. stats.json and metrics render one snapshot of the same counters
// (Vfs::counters), so they never disagree on what a counter means.
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine.h"
#include "core/h5lib/h5files.h"
#include "core/h5lib/metadata.h"
#include "core/h5lib/sandbox_plan.h"
#include "core/log.h"
#include "vfs/sidecar.h"
#include "vfs/vfs.h"

namespace h5d::vfs {
namespace {

const auto g_start = std::chrono::steady_clock::now();

std::string errno_name(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : std::to_string(err);
}

const char* error_class(int err) {
  return err == EIO                                                                 ? "io"
         : err == ENOENT                                                            ? "not_found"
         : err == ESTALE                                                            ? "stale"
         : (err == EACCES || err == EPERM)                                          ? "denied"
         : err == EROFS                                                             ? "read_only"
         : (err == EINVAL || err == EISDIR || err == ENOTDIR || err == EEXIST)      ? "invalid"
         : err == ENOMEM                                                            ? "out_of_memory"
                                                                                    : "other";
}

std::string iso_time(double t) {
  const time_t s = static_cast<time_t>(t);
  struct tm tm;
  gmtime_r(&s, &tm);
  char b[40];
  const size_t n = std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(b + n, sizeof b - n, ".%03dZ", static_cast<int>((t - double(s)) * 1000));
  return b;
}

// Escaped as the text format wants it: backslash and newline, and in label values (`quote`)
// the double quote.
std::string escape(const std::string& v, bool quote) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (quote && c == '"') o += "\\\"";
    else o += c;
  }
  return o;
}

std::string number(const Vfs::Counter& c) {
  if (c.integral) return std::to_string(static_cast<uint64_t>(c.value));
  char b[40];
  std::snprintf(b, sizeof b, "%.12g", c.value);
  return b;
}

}  // namespace

std::vector<Vfs::Counter> Vfs::counters() {
  std::vector<Counter> out;
  auto add = [&](std::vector<std::string> path, std::string metric, std::string help, bool counter, double v,
                 bool integral = true) {
    Counter c;
    c.json_path = std::move(path);
    c.metric = std::move(metric);
    c.help = std::move(help);
    c.is_counter = counter;
    c.value = v;
    c.integral = integral;
    out.push_back(std::move(c));
  };
  Stats& st = engine_.stats();
  auto u = [](const std::atomic<uint64_t>& a) { return double(a.load(std::memory_order_relaxed)); };
  add({"uptime_seconds"}, "uptime_seconds", "Seconds since the mount started", false,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count(), false);
  const ReadCounters& rc = ctx_->counters;
  add({"bytes_served"}, "bytes_served_total", "Bytes replied to reads of the mount's files", true, u(rc.bytes_served));
  add({"reads"}, "reads_total", "Read requests answered", true, u(rc.reads));
  add({"chunks_decoded"}, "chunks_decoded_total", "Chunks read from their files and decoded", true, u(st.chunks_decoded));
  add({"bytes_decoded"}, "bytes_decoded_total", "Bytes those chunks decoded to", true, u(st.bytes_decoded));
  add({"decode_seconds"}, "decode_seconds_total", "Time decoding chunks (holding a CPU slot), summed over threads", true,
      double(st.decode_ns.load()) * 1e-9, false);
  const BufferPool::Counters bc = engine_.buffers().counters();
  add({"decode_buffers", "reused"}, "decode_buffers_reused_total", "Decode buffers taken from the pool", true, double(bc.reused));
  add({"decode_buffers", "touched_ahead"}, "decode_buffers_touched_ahead_total",
      "Decode buffers whose pages were touched ahead of use", true, double(bc.touched_ahead));
  add({"decode_buffers", "fresh"}, "decode_buffers_fresh_total", "Decode buffers allocated afresh", true, double(bc.fresh));
  add({"decode_buffers", "idle_bytes"}, "decode_buffers_idle_bytes", "Bytes of idle decode buffers", false, double(bc.idle_bytes));
  const ChunkCache& cc = engine_.cache();
  add({"chunk_cache", "bytes"}, "chunk_cache_bytes", "Bytes of decoded chunks cached", false, double(cc.used()));
  add({"chunk_cache", "consumed_bytes"}, "chunk_cache_consumed_bytes", "Bytes of cached chunks already read through",
      false, double(cc.used_consumed()));
  add({"chunk_cache", "budget"}, "chunk_cache_budget_bytes", "The decoded-chunk cache's budget", false, double(cc.budget()));
  add({"chunks_prefetched"}, "chunks_prefetched_total", "Chunks decoded ahead of the reader", true, u(st.chunks_prefetched));
  add({"prefetch_dropped"}, "prefetch_dropped_total", "Decode-ahead tasks dropped, the reader had read their bytes",
      true, u(st.prefetch_dropped));
  add({"prefetch_capped_bytes"}, "prefetch_capped_bytes_total",
      "Decode-ahead bytes not started, the chunk cache had no room for them", true, u(st.prefetch_capped_bytes));
  add({"bytes_spliced"}, "bytes_spliced_total", "Bytes replied from source files without a copy", true, u(rc.bytes_spliced));
  add({"cache_hits"}, "cache_hits_total", "Decoded-chunk cache hits", true, u(st.cache_hits));
  add({"cache_misses"}, "cache_misses_total", "Decoded-chunk cache misses", true, u(st.cache_misses));
  add({"bytes_pread"}, "bytes_pread_total", "Bytes read from the source files", true, u(st.bytes_pread));
  add({"source_requests"}, "source_requests_total", "Requests to the source files (chunks, byte runs, read-ahead pieces)",
      true, u(st.source_requests));
  add({"merged_requests"}, "merged_requests_total", "Source requests that read several adjacent chunks at once", true,
      u(st.merged_requests));
  add({"source_in_flight"}, "source_in_flight", "Source requests in flight now", false, u(st.source_in_flight));
  add({"source_in_flight_max"}, "source_in_flight_max", "The most source requests in flight at once so far", false,
      u(st.source_in_flight_max));
  add({"readahead_bytes"}, "readahead_bytes_total", "Bytes read ahead of a stream into the source's page cache", true,
      u(st.readahead_bytes));
  add({"readahead_resident_bytes"}, "readahead_resident_bytes_total",
      "Read-ahead bytes found in the source's page cache already (no request)", true, u(st.readahead_resident_bytes));
  add({"splice_cold"}, "splice_cold_total", "Reads not spliced because the source bytes were not cached", true,
      u(rc.splice_cold));
  add({"splice_fragmented"}, "splice_fragmented_total",
      "Reads not spliced because their bytes lie in more file runs than one reply's pipe holds", true,
      u(rc.splice_fragmented));
  add({"io_depth"}, "io_depth", "Source requests in flight allowed for one file (-o io_depth)", false,
      double(engine_.options().io_depth));
  add({"io_workers"}, "io_workers", "I/O threads of the read pool", false, double(engine_.pool().size()));
  add({"io_workers_busy_max"}, "io_workers_busy_max", "The most I/O threads busy at once so far", false,
      double(engine_.pool().busy_max()));
  add({"bytes_pushed"}, "bytes_pushed_total", "Bytes pushed into the page cache ahead of the reader", true, u(rc.bytes_pushed));
  add({"library_reads"}, "library_reads_total", "Reads that went through libhdf5 (H5Dread in a helper)", true,
      u(st.library_reads));
  if (files_.metadata().isolated()) {
    const Metadata::Counters hc = files_.metadata().counters();
    add({"hdf5_helper", "helpers"}, "hdf5_helpers", "HDF5 helper processes the mount runs", false,
        double(hc.processes));
    add({"hdf5_helper", "requests"}, "hdf5_helper_requests_total", "Requests answered by the HDF5 helpers", true,
        double(hc.requests));
    add({"hdf5_helper", "files"}, "hdf5_helper_files", "Distinct files the HDF5 helpers were asked about", false,
        double(hc.files_asked));
    add({"hdf5_helper", "failures"}, "hdf5_helper_failures_total",
        "HDF5 helpers that crashed, hung or talked garbage (each restarted)", true, double(hc.failures));
    add({"hdf5_helper", "broker_opens"}, "hdf5_helper_broker_opens_total",
        "Files the daemon opened for the HDF5 helpers (they open none themselves)", true, double(hc.broker_opens));
    add({"hdf5_helper", "broker_lookups"}, "hdf5_helper_broker_lookups_total",
        "Paths the daemon looked up for the HDF5 helpers (stat, access)", true, double(hc.broker_lookups));
    add({"hdf5_helper", "broker_refused"}, "hdf5_helper_broker_refused_total",
        "Files the HDF5 helpers asked for and the daemon refused (outside what the mount reads)", true,
        double(hc.broker_refused));
    for (const auto& [layer, held] : layers_held(hc.sandbox)) {
      add({"hdf5_helper", "sandbox", layer}, "hdf5_helper_sandbox_layer", "Layers of the HDF5 helpers' sandbox that hold",
          false, held ? 1.0 : 0.0);
      out.back().label_name = "layer";
      out.back().label_value = layer;
    }
  }
  std::map<int, uint64_t> replies;
  {
    std::lock_guard<std::mutex> lk(err_mu_);
    replies = errors_;
  }
  // Every error reply, in total and by class, and by errno.
  std::map<std::string, uint64_t> by_class = {{"io", 0},        {"not_found", 0}, {"stale", 0},
                                              {"denied", 0},    {"read_only", 0}, {"invalid", 0},
                                              {"out_of_memory", 0}, {"other", 0}};
  uint64_t total = 0;
  for (const auto& [err, n] : replies) {
    by_class[error_class(err)] += n;
    total += n;
  }
  add({"errors", "total"}, "", "", true, double(total));  // the sum of the classes: stats.json only
  for (const auto& [cls, n] : by_class) {
    add({"errors", cls}, "errors_total", "Error replies by class", true, double(n));
    out.back().label_name = "class";
    out.back().label_value = cls;
  }
  for (const auto& [err, n] : replies) {
    const std::string name = errno_name(err);
    add({"error_replies", name}, "error_replies_total", "Error replies by errno", true, double(n));
    out.back().label_name = "errno";
    out.back().label_value = name;
  }
  add({"errors_reported"}, "errors_reported_total", "Failed requests reported with a log line (recent_errors)", true,
      double(log::errors_reported()));
  for (const auto& [why, n] : st.fallbacks()) {
    add({"fallbacks", why}, "fallbacks_total", "Reads that fell back to a slower path, by reason", true, double(n));
    out.back().label_name = "reason";
    out.back().label_value = why;
  }
  add({"inodes"}, "inodes", "Inodes known (nodes listed so far)", false, double(table_->size()));
  add({"opens"}, "opens_total", "Files opened", true, double(opens_.load(std::memory_order_relaxed)));
  add({"open_files"}, "open_files", "Files open (or mapped) now", false, double(OpenFile::live()));
  return out;
}

std::string Vfs::render_stats() {
  using nlohmann::json;
  json j;
  j["source"] = source_;
  j["fallbacks"] = json::object();
  j["error_replies"] = json::object();
  for (const Counter& c : counters()) {
    json* at = &j;
    for (const std::string& k : c.json_path) at = &(*at)[k];
    if (c.integral) *at = static_cast<uint64_t>(c.value);
    else *at = c.value;
  }
  if (files_.metadata().isolated()) j["hdf5_helper"]["sandbox_report"] = files_.metadata().counters().sandbox;
  json recent = json::array();
  for (const log::ErrorEntry& e : log::recent_errors()) {
    json r = {{"time", iso_time(e.time)}, {"errno", errno_name(e.code)}, {"level", log::level_name(e.level)}};
    r["file"] = e.place.file.empty() ? json(nullptr) : json(e.place.file);
    r["dataset"] = e.place.dataset.empty() ? json(nullptr) : json(e.place.dataset);
    r["chunk"] = e.place.chunk.empty() ? json(nullptr) : json(e.place.chunk);
    r["reason"] = e.message;
    recent.push_back(std::move(r));
  }
  j["recent_errors"] = std::move(recent);
  return json_text(j);
}

std::string Vfs::render_metrics() {
  std::string out;
  std::set<std::string> described;
  for (const Counter& c : counters()) {
    if (c.metric.empty()) continue;
    const std::string name = "h5direct_" + c.metric;
    if (described.insert(name).second) {
      out += "# HELP " + name + " " + escape(c.help, false) + "\n";
      out += "# TYPE " + name + (c.is_counter ? " counter\n" : " gauge\n");
    }
    out += name;
    if (!c.label_name.empty()) out += "{" + c.label_name + "=\"" + escape(c.label_value, true) + "\"}";
    out += " " + number(c) + "\n";
  }
  return out;
}

}  // namespace h5d::vfs
