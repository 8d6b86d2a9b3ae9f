#include "vfs/kernel_policy.h"

#include <algorithm>
#include <exception>

namespace h5d::vfs {

double attr_ttl(const Attr& a, const CacheTimeouts& mount) {
  if (a.is_volatile) return 0.0;
  return a.cache_limit >= 0 ? std::min(mount.attr, a.cache_limit) : mount.attr;
}

double entry_ttl(const Attr& a, const CacheTimeouts& mount) {
  return a.cache_limit >= 0 ? std::min(mount.entry, a.cache_limit) : mount.entry;
}

double negative_entry_ttl(bool writable, const Attr* dir, const CacheTimeouts& mount) {
  if (writable || !dir) return 0.0;
  return entry_ttl(*dir, mount);
}

bool keep_listing(bool writable, const Attr& dir) { return !writable && dir.cache_limit < 0; }

bool may_splice(bool writable, const ReplyMeans& means, size_t size) {
  return !writable && means.splice && size <= means.splice_max;
}

bool may_push(bool writable, const ReplyMeans& means, size_t asked, size_t got) {
  return !writable && means.push && got == asked;
}

double Vfs::negative_entry_ttl(uint64_t parent, const CacheTimeouts& mount) {
  if (writable()) return 0.0;
  Attr dir;
  try {
    dir = getattr(parent);
  } catch (const std::exception&) {
    return vfs::negative_entry_ttl(false, nullptr, mount);
  }
  return vfs::negative_entry_ttl(false, &dir, mount);
}

bool Vfs::keep_listing(uint64_t dir) { return !writable() && vfs::keep_listing(false, getattr(dir)); }

bool Vfs::may_splice(const ReplyMeans& means, size_t size) const { return vfs::may_splice(writable(), means, size); }

bool Vfs::may_push(const ReplyMeans& means, size_t asked, size_t got) const {
  return vfs::may_push(writable(), means, asked, got);
}

}  // namespace h5d::vfs
