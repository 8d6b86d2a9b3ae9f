"""Targeted damage to h5py-written files, for test_extent.py and test_mutation.py.

Each function finds the structure it changes with h5py's low-level API (object header
address, chunk offsets and sizes from get_chunk_info) and the bytes around it, then patches the
file in place. Only for files written with libver='earliest' where a v1 B-tree is named (its keys
are: chunk size u32, filter mask u32, rank+1 u64 element offsets, then the child address).
Every function asserts that what it patches occurs exactly once, so that a change in how
libhdf5 lays out these files fails loudly instead of silently testing nothing.
"""
import struct

import h5py


def _patch(path, offset, new):
    with open(path, 'r+b') as f:
        f.seek(offset)
        f.write(new)


def _find_once(data, pattern, lo=0, hi=None):
    hi = len(data) if hi is None else hi
    first = data.find(pattern, lo, hi)
    assert first >= 0, f'pattern {pattern.hex()} not found in [{lo}, {hi})'
    assert data.find(pattern, first + 1, hi) < 0, f'pattern {pattern.hex()} found twice'
    return first


def chunk_infos(path, dset):
    with h5py.File(path, 'r') as f:
        d = f[dset].id
        return [d.get_chunk_info(i) for i in range(d.get_num_chunks())]


def _btree_key_offset(path, dset, index):
    """File offset of the v1 B-tree key of chunk number `index` (get_chunk_info order) and the
    chunk info."""
    ci = chunk_infos(path, dset)[index]
    data = open(path, 'rb').read()
    key = struct.pack('<II', ci.size, ci.filter_mask) + \
        struct.pack('<' + 'Q' * (len(ci.chunk_offset) + 1), *ci.chunk_offset, 0)
    return _find_once(data, key + struct.pack('<Q', ci.byte_offset)), ci, len(key)


def grow_contiguous(path, dset, new_len):
    """Sets the (1-D) dataspace of contiguous `dset` to new_len elements (dims and maxdims), its
    storage left as it is: the dataset now claims bytes past its storage."""
    with h5py.File(path, 'r') as f:
        d = f[dset]
        assert d.ndim == 1 and d.chunks is None
        n = d.shape[0]
        ohdr = h5py.h5o.get_info(d.id).addr
    data = open(path, 'rb').read()
    old = struct.pack('<Q', n)
    hits = [i for i in range(ohdr, ohdr + 512) if data[i:i + 8] == old]
    assert 1 <= len(hits) <= 2, hits  # dims, and maxdims when stored
    for h in hits:
        _patch(path, h, struct.pack('<Q', new_len))


def flip_chunk_mask(path, dset, index, mask=1):
    """Sets the filter mask of chunk `index` in its v1 B-tree key (mask 1: the first filter was
    skipped, so with one filter the chunk claims to be stored raw)."""
    off, _, _ = _btree_key_offset(path, dset, index)
    _patch(path, off + 4, struct.pack('<I', mask))


def move_chunk_address(path, dset, index, delta):
    """Moves the address of chunk `index` in its v1 B-tree record by `delta` bytes."""
    off, ci, klen = _btree_key_offset(path, dset, index)
    _patch(path, off + klen, struct.pack('<Q', ci.byte_offset + delta))


def set_chunk_key(path, dset, index, new_offset):
    """Replaces the element offset of chunk `index` in its v1 B-tree key (the chunk's address
    and size stay): the key now names another place in the dataset."""
    off, ci, _ = _btree_key_offset(path, dset, index)
    assert len(new_offset) == len(ci.chunk_offset)
    _patch(path, off + 8, struct.pack('<' + 'Q' * len(new_offset), *new_offset))


def set_chunk_elem_offset(path, dset, index, value):
    """Sets the last (element-size) offset of chunk `index`'s v1 B-tree key, always 0 in a
    valid file: libhdf5 compares it too, so it no longer finds the chunk (and reads fill)."""
    off, ci, klen = _btree_key_offset(path, dset, index)
    _patch(path, off + klen - 8, struct.pack('<Q', value))


def zero_contiguous_size(path, dset):
    """Sets the stored size in `dset`'s contiguous layout message (version 3: version, class 1,
    address, size) to 0, its address left: libhdf5 still reads the bytes at the address."""
    with h5py.File(path, 'r') as f:
        d = f[dset]
        assert d.chunks is None
        addr, size = d.id.get_offset(), d.id.get_storage_size()
    data = open(path, 'rb').read()
    at = _find_once(data, bytes([3, 1]) + struct.pack('<QQ', addr, size))
    _patch(path, at + 10, struct.pack('<Q', 0))


def set_type_size(path, dset, new_size):
    """Sets the size field of `dset`'s (fixed-point or float) datatype message: the first
    datatype message of its object header whose size field holds the current size."""
    with h5py.File(path, 'r') as f:
        d = f[dset]
        size = d.dtype.itemsize
        ohdr = h5py.h5o.get_info(d.id).addr
        cls = 1 if d.dtype.kind == 'f' else 0
    data = open(path, 'rb').read()
    for i in range(ohdr, ohdr + 512):
        # datatype message body: class and version byte (version 1), 3 bit-field bytes, size u32
        if data[i] == (0x10 | cls) and data[i + 4:i + 8] == struct.pack('<I', size):
            _patch(path, i + 4, struct.pack('<I', new_size))
            return
    raise AssertionError(f'no datatype message of {dset} found')


def set_dims(path, dset, new_dims):
    """Replaces the dims (and maxdims when stored) of `dset`'s dataspace message."""
    with h5py.File(path, 'r') as f:
        d = f[dset]
        old = struct.pack('<' + 'Q' * d.ndim, *d.shape)
        ohdr = h5py.h5o.get_info(d.id).addr
    data = open(path, 'rb').read()
    first = data.find(old, ohdr, ohdr + 512)
    assert first >= 0
    new = struct.pack('<' + 'Q' * len(new_dims), *new_dims)
    _patch(path, first, new)
    second = data.find(old, first + len(old), first + 2 * len(old))
    if second == first + len(old):
        _patch(path, second, new)
