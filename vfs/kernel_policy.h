// What the kernel may keep of the answers (attribute, name and negative-name lifetimes, cached
// listings) and which ways a read may be answered (spliced, with pushes): decided here, from
// what vfs knows (a node's attributes, whether the mount is writable). The FUSE adapter passes in
// what only it knows (the mount's timeouts, what the kernel and libfuse can do) and carries the
// answers out; it decides none of them. The Vfs methods of the same names (vfs.h) fill in the
// node's attributes and the mount's writability.
#pragma once
#include <cstddef>

#include "vfs/vfs.h"

namespace h5d::vfs {

// How long the kernel may keep a node's attributes: 0 for a volatile node (its size and content
// change), else the mount's timeout, at most the node's cache_limit.
double attr_ttl(const Attr& a, const CacheTimeouts& mount);
// How long the kernel may keep a name: the mount's timeout, at most the node's cache_limit.
double entry_ttl(const Attr& a, const CacheTimeouts& mount);
// How long it may keep the absence of a name in directory `dir` (a negative entry). Nothing
// appears under a read-only mount, so as long as a name in that directory (entry_ttl of `dir`:
// no longer than its listing where it is revalidated against a changing source). 0 on rw mounts
// (names appear, created by other processes) and when the directory is unknown (`dir` nullptr).
double negative_entry_ttl(bool writable, const Attr* dir, const CacheTimeouts& mount);
// Whether the kernel may keep a directory's listing from one open to the next (keep_cache,
// cache_readdir): not on rw mounts, nor for a directory revalidated against a changing source.
bool keep_listing(bool writable, const Attr& dir);

// Whether a read of `size` bytes may be answered by splicing source files into the reply (it is
// then spliced only where OpenFile::read_spliced finds all its bytes stored verbatim): only on
// read-only mounts (bytes written through the mount need not be in the source file yet), only
// when the adapter can (ReplyMeans::splice) and the reply fits libfuse's pipe (splice_max).
bool may_splice(bool writable, const ReplyMeans& means, size_t size);
// Whether the pages a read made worth pushing (OpenFile::Pushes) may be pushed into the page
// cache: only on read-only mounts (pages of files that change must not be kept), only when the
// adapter can (ReplyMeans::push), and only after a read that returned all `asked` bytes (a short
// read ended at the file's end: nothing beyond it is worth pushing).
bool may_push(bool writable, const ReplyMeans& means, size_t asked, size_t got);

}  // namespace h5d::vfs
