"""SGLang's one tree of GPU and host KV (`sglang_tree.py`), compiled.

The same rules, step for step, as `HiCacheTree` (the reference it is held to on random traces
and on SGLang's own runs): every method there is a function here of the same name. The tree
lives in arrays: per node one row of `nd` (the `_F_*` columns), its children as a list in
insertion order (a Python dict's order, which SGLang's subtree walk follows), and per distinct
page id the node whose key starts with it (ids are chained, so that node is unique). The two
leaf sets keep lazy heaps by stamp, and `write_back`'s duplicates an append-only log in which
an entry counts while its node still points at it (an insertion-ordered dict with lazy
deletion, as SGLang's). The storage below the host, when there is one, is an LRU of page keys
in rows per key (`lru_rows.py`, as `PageLru` keeps them); a request's backups wait in `wr`
(first page, pages, node) until its end, when they land in it.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from yaotu_trace._lists import append, heap_pop, heap_push, replace, unlink
from yaotu_trace.prefix.tiers.lru_rows import (
    EVICTED,
    LOADED,
    held,
    insert,
    lru_state,
    refcount_free,
    rows,
    touch,
)

_ROOT = 0
_DEPTH_STEP = 1 << 20
# Columns of `nd`, one row per node.
_F_PARENT, _F_SRC, _F_LEN, _F_GPU, _F_HOST, _F_LOCK, _F_HLOCK, _F_STAMP = 0, 1, 2, 3, 4, 5, 6, 7
_F_HITS, _F_HUSE, _F_NCH, _F_GCH, _F_FIRST, _F_LAST, _F_NEXT, _F_PREV = 8, 9, 10, 11, 12, 13, 14, 15
_F_INGPU, _F_INHOST, _F_DUP, _F_ALIVE = 16, 17, 18, 19
_FIELDS = 20
# Slots of `sc`, the scalars.
_S_CLOCK, _S_GFREE, _S_HFREE, _S_NEXT, _S_NOW, _S_STORED, _S_EVICTED, _S_LOADED = range(8)
_S_GHN, _S_HHN, _S_DUPN, _S_NREC, _S_NLOCKED, _S_PAGE, _S_THRESHOLD = range(8, 15)
_S_DUPHEAD = 15  # log entries before it are all dead
_S_FAILED = 16  # backups the host could not make room for
_S_STORAGE = 17  # whether a storage tier lies below the host
_S_NBACKED = 18  # backups this request (rows of `wr`)
_S_RELEASED = 19  # write_back: host copies of GPU nodes reclaimed (nothing lost)
_S_NEEDED, _S_FREE = 20, 21  # the request SGLang cannot allocate for: pages needed, and free
_SCALARS = 22
DONE, OUT_OF_ROOM = -1, -2  # what the pass returns, besides a request SGLang stops at
_STORAGE = 0  # the storage's LRU in the `lru_rows` state


@nb.njit(cache=True, inline="always")
def _tick(sc):
    sc[_S_CLOCK] += _DEPTH_STEP
    return sc[_S_CLOCK]


# `member` and `slot` (which heap: GPU or host leaves) are given as np.int64, not literals:
# numba would compile each helper once per literal value.
@nb.njit(cache=True)
def _compact(nd, sc, keys, vals, member, slot):
    """Rebuild a leaf heap from its members (the lazy entries have filled it)."""
    n = np.int64(0)
    for v in range(1, sc[_S_NEXT]):
        if nd[v, _F_ALIVE] and nd[v, member]:
            n = heap_push(keys, vals, n, nd[v, _F_STAMP], v)
    sc[slot] = n


@nb.njit(cache=True)
def _push(nd, sc, keys, vals, member, slot, v):
    if sc[slot] >= len(keys):
        _compact(nd, sc, keys, vals, member, slot)
    sc[slot] = heap_push(keys, vals, sc[slot], nd[v, _F_STAMP], v)


@nb.njit(cache=True)
def _oldest(nd, sc, keys, vals, member, slot):
    """The least recently stamped member of a leaf set, its entry popped; -1 when none."""
    while sc[slot] > 0:
        stamp = keys[0]
        v = vals[0]
        sc[slot] = heap_pop(keys, vals, sc[slot])
        if nd[v, _F_ALIVE] and nd[v, member] and nd[v, _F_STAMP] == stamp:
            return v
    return -1


@nb.njit(cache=True)
def _stamp(nd, sc, gk, gv, hk, hv, v, stamp):
    nd[v, _F_STAMP] = stamp
    if nd[v, _F_INGPU]:
        _push(nd, sc, gk, gv, np.int64(_F_INGPU), np.int64(_S_GHN), v)
    if nd[v, _F_INHOST]:
        _push(nd, sc, hk, hv, np.int64(_F_INHOST), np.int64(_S_HHN), v)


@nb.njit(cache=True)
def _update_sets(nd, sc, gk, gv, hk, hv, v):
    if v == _ROOT:
        return
    gpu_leaf = nd[v, _F_GPU] == 1 and nd[v, _F_LOCK] == 0 and nd[v, _F_GCH] == 0
    if gpu_leaf and not nd[v, _F_INGPU]:
        nd[v, _F_INGPU] = 1
        _push(nd, sc, gk, gv, np.int64(_F_INGPU), np.int64(_S_GHN), v)
    elif not gpu_leaf:
        nd[v, _F_INGPU] = 0
    host_leaf = (nd[v, _F_GPU] == 0 and nd[v, _F_HOST] == 1 and nd[v, _F_HLOCK] == 0
                 and nd[v, _F_LOCK] == 0 and nd[v, _F_NCH] == 0)
    if host_leaf and not nd[v, _F_INHOST]:
        nd[v, _F_INHOST] = 1
        _push(nd, sc, hk, hv, np.int64(_F_INHOST), np.int64(_S_HHN), v)
    elif not host_leaf:
        nd[v, _F_INHOST] = 0


@nb.njit(cache=True)
def _track_duplicate(nd, sc, dup, v):
    if v != _ROOT and nd[v, _F_GPU] and nd[v, _F_HOST]:
        if nd[v, _F_DUP] < 0:
            if sc[_S_DUPN] >= len(dup):  # compact the log, keeping its order
                m = 0
                for k in range(sc[_S_DUPHEAD], sc[_S_DUPN]):
                    u = dup[k]
                    if nd[u, _F_DUP] == k:
                        dup[m] = u
                        nd[u, _F_DUP] = m
                        m += 1
                sc[_S_DUPN] = m
                sc[_S_DUPHEAD] = 0
            dup[sc[_S_DUPN]] = v
            nd[v, _F_DUP] = sc[_S_DUPN]
            sc[_S_DUPN] += 1
    else:
        nd[v, _F_DUP] = -1


@nb.njit(cache=True)
def _lock(nd, sc, gk, gv, hk, hv, v):
    cur = v
    while cur != _ROOT and not nd[cur, _F_GPU]:
        nd[cur, _F_LOCK] += 1
        cur = nd[cur, _F_PARENT]
    while cur != _ROOT:
        nd[cur, _F_LOCK] += 1
        nd[cur, _F_INGPU] = 0
        cur = nd[cur, _F_PARENT]
    _update_sets(nd, sc, gk, gv, hk, hv, v)


@nb.njit(cache=True)
def _unlock(nd, sc, gk, gv, hk, hv, v):
    cur = v
    while cur != _ROOT:
        nd[cur, _F_LOCK] -= 1
        if nd[cur, _F_LOCK] == 0:
            _update_sets(nd, sc, gk, gv, hk, hv, cur)
        cur = nd[cur, _F_PARENT]
    _update_sets(nd, sc, gk, gv, hk, hv, v)


@nb.njit(cache=True)
def _matched(nd, ids, v, start, depth, most):
    src = nd[v, _F_SRC]
    hi = min(nd[v, _F_LEN], most)
    if ids[src + hi - 1] == ids[start + depth + hi - 1]:
        return hi
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ids[src + mid - 1] == ids[start + depth + mid - 1]:
            lo = mid
        else:
            hi = mid
    return lo


@nb.njit(cache=True)
def _child(nd, child_of, node, page_id):
    c = child_of[page_id]
    if c > 0 and nd[c, _F_ALIVE] and nd[c, _F_PARENT] == node:
        return c
    return -1


@nb.njit(cache=True)
def _append_child(nd, parent, c):
    nd[c, _F_PARENT] = parent
    append(c, parent, nd[:, _F_PREV], nd[:, _F_NEXT], nd[:, _F_FIRST], nd[:, _F_LAST])
    nd[parent, _F_NCH] += 1
    if nd[c, _F_GPU]:
        nd[parent, _F_GCH] += 1


@nb.njit(cache=True)
def _unlink_child(nd, c):
    parent = nd[c, _F_PARENT]
    unlink(c, parent, nd[:, _F_PREV], nd[:, _F_NEXT], nd[:, _F_FIRST], nd[:, _F_LAST])
    nd[parent, _F_NCH] -= 1
    if nd[c, _F_GPU]:
        nd[parent, _F_GCH] -= 1


@nb.njit(cache=True)
def _set_gpu(nd, sc, v, on):
    if nd[v, _F_GPU] == on:
        return
    nd[v, _F_GPU] = on
    parent = nd[v, _F_PARENT]
    if on:
        sc[_S_GFREE] -= nd[v, _F_LEN]
        nd[parent, _F_GCH] += 1
    else:
        sc[_S_GFREE] += nd[v, _F_LEN]
        nd[parent, _F_GCH] -= 1


@nb.njit(cache=True)
def _drop_host(nd, sc, v):
    if nd[v, _F_HOST]:
        nd[v, _F_HOST] = 0
        sc[_S_HFREE] += nd[v, _F_LEN]


@nb.njit(cache=True)
def _new_node(nd, sc, parent, src, length):
    v = sc[_S_NEXT]
    sc[_S_NEXT] += 1
    for f in range(nd.shape[1]):  # a loop: a slice assignment compiles numba's broadcasting
        nd[v, f] = 0
    nd[v, _F_PARENT] = parent
    nd[v, _F_SRC] = src
    nd[v, _F_LEN] = length
    nd[v, _F_STAMP] = _tick(sc)
    _tick(sc)  # creation_time
    nd[v, _F_HUSE] = -1
    nd[v, _F_FIRST] = -1
    nd[v, _F_LAST] = -1
    nd[v, _F_NEXT] = -1
    nd[v, _F_PREV] = -1
    nd[v, _F_DUP] = -1
    nd[v, _F_ALIVE] = 1
    return v


@nb.njit(cache=True)
def _split(nd, sc, gk, gv, hk, hv, dup, child_of, ids, child, k):
    parent = nd[child, _F_PARENT]
    new = _new_node(nd, sc, parent, nd[child, _F_SRC], k)
    for f in (_F_HITS, _F_GPU, _F_HOST, _F_LOCK, _F_HLOCK, _F_HUSE):
        nd[new, f] = nd[child, f]
    first = ids[nd[child, _F_SRC]]
    nd[child, _F_SRC] += k
    nd[child, _F_LEN] -= k
    # `new` takes `child`'s place among its parent's children; `child` hangs below it.
    replace(child, new, parent, nd[:, _F_PREV], nd[:, _F_NEXT], nd[:, _F_FIRST],
            nd[:, _F_LAST])
    _append_child(nd, new, child)
    child_of[first] = new
    child_of[ids[nd[child, _F_SRC]]] = child
    _stamp(nd, sc, gk, gv, hk, hv, child, _tick(sc))
    _update_sets(nd, sc, gk, gv, hk, hv, new)
    _update_sets(nd, sc, gk, gv, hk, hv, child)
    if dup is not None:  # write_back
        _track_duplicate(nd, sc, dup, new)
    return new


@nb.njit(cache=True)
def _remove(nd, child_of, ids, v):
    _unlink_child(nd, v)
    first = ids[nd[v, _F_SRC]]
    if child_of[first] == v:
        child_of[first] = 0
    nd[v, _F_INGPU] = 0
    nd[v, _F_INHOST] = 0
    nd[v, _F_DUP] = -1
    nd[v, _F_ALIVE] = 0


@nb.njit(cache=True)
def _delete_tombstones(nd, sc, gk, gv, hk, hv, child_of, ids, cur):
    while cur != _ROOT and nd[cur, _F_NCH] == 0:
        if nd[cur, _F_LOCK] or nd[cur, _F_HLOCK]:
            break
        if nd[cur, _F_GPU] or nd[cur, _F_HOST]:
            _update_sets(nd, sc, gk, gv, hk, hv, cur)
            break
        parent = nd[cur, _F_PARENT]
        _remove(nd, child_of, ids, cur)
        cur = parent
        _update_sets(nd, sc, gk, gv, hk, hv, cur)


@nb.njit(cache=True)
def _delete_gpu_leaf(nd, sc, gk, gv, hk, hv, child_of, ids, v):
    _set_gpu(nd, sc, v, np.int64(0))
    _drop_host(nd, sc, v)
    parent = nd[v, _F_PARENT]
    _remove(nd, child_of, ids, v)
    _update_sets(nd, sc, gk, gv, hk, hv, parent)
    _delete_tombstones(nd, sc, gk, gv, hk, hv, child_of, ids, parent)


@nb.njit(cache=True)
def _demote(nd, sc, gk, gv, hk, hv, v):
    _set_gpu(nd, sc, v, np.int64(0))
    _update_sets(nd, sc, gk, gv, hk, hv, v)
    _update_sets(nd, sc, gk, gv, hk, hv, nd[v, _F_PARENT])


@nb.njit(cache=True)
def _record_host_loss(nd, sc, rec, v):
    r = sc[_S_NREC]
    rec[r, 0] = nd[v, _F_SRC]
    rec[r, 1] = nd[v, _F_LEN]
    rec[r, 2] = sc[_S_NOW]
    rec[r, 3] = nd[v, _F_HUSE]
    sc[_S_NREC] = r + 1
    sc[_S_EVICTED] += nd[v, _F_LEN]


@nb.njit(cache=True)
def _evict_host_leaf(nd, sc, gk, gv, hk, hv, child_of, ids, rec, v):
    freed = nd[v, _F_LEN]
    _record_host_loss(nd, sc, rec, v)
    _drop_host(nd, sc, v)
    parent = nd[v, _F_PARENT]
    _remove(nd, child_of, ids, v)
    _delete_tombstones(nd, sc, gk, gv, hk, hv, child_of, ids, parent)
    return freed


@nb.njit(cache=True)
def _reclaim_duplicates(nd, sc, dup, needed):
    freed = 0
    for spare_leaves in (True, False):
        if freed >= needed:
            break
        for k in range(sc[_S_DUPHEAD], sc[_S_DUPN]):
            if freed >= needed:
                break
            v = dup[k]
            if nd[v, _F_DUP] != k:
                continue  # popped since
            if not (nd[v, _F_ALIVE] and nd[v, _F_GPU] and nd[v, _F_HOST]):
                nd[v, _F_DUP] = -1
                continue
            if spare_leaves and nd[v, _F_INGPU]:
                continue
            if nd[v, _F_HLOCK]:
                continue
            _drop_host(nd, sc, v)
            freed += nd[v, _F_LEN]
            sc[_S_RELEASED] += nd[v, _F_LEN]
            nd[v, _F_DUP] = -1
    head = sc[_S_DUPHEAD]
    while head < sc[_S_DUPN] and nd[dup[head], _F_DUP] != head:
        head += 1
    sc[_S_DUPHEAD] = head
    return freed


@nb.njit(cache=True)
def _evict_host(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, needed):
    freed = 0
    if dup is not None:  # write_back
        freed = _reclaim_duplicates(nd, sc, dup, needed)
    while freed < needed:
        v = _oldest(nd, sc, hk, hv, np.int64(_F_INHOST), np.int64(_S_HHN))
        if v < 0:
            break
        freed += _evict_host_leaf(nd, sc, gk, gv, hk, hv, child_of, ids, rec, v)
    return freed


@nb.njit(cache=True)
def _back_up(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, v):
    length = nd[v, _F_LEN]
    if sc[_S_HFREE] < length:
        needed = length - sc[_S_HFREE]
        if _evict_host(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, needed) < needed:
            return False
    sc[_S_HFREE] -= length
    nd[v, _F_HOST] = 1
    nd[v, _F_HUSE] = sc[_S_NOW]
    sc[_S_STORED] += length
    if sc[_S_STORAGE]:  # host-locked until its storage write lands
        b = sc[_S_NBACKED]
        wr[b, 0] = nd[v, _F_SRC]
        wr[b, 1] = length
        wr[b, 2] = v
        sc[_S_NBACKED] = b + 1
        nd[v, _F_HLOCK] += 1
        _update_sets(nd, sc, gk, gv, hk, hv, v)
    return True


@nb.njit(cache=True)
def _write_through(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, scratch, locked, v):
    n = 0
    scratch[n] = v
    n += 1
    up = nd[v, _F_PARENT]
    while up != _ROOT and not nd[up, _F_HOST]:
        scratch[n] = up
        n += 1
        up = nd[up, _F_PARENT]
    for j in range(n - 1, -1, -1):
        target = scratch[j]
        if nd[target, _F_HOST]:
            continue
        if not _back_up(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, target):
            sc[_S_FAILED] += 1
            return
        _lock(nd, sc, gk, gv, hk, hv, target)
        locked[sc[_S_NLOCKED]] = target
        sc[_S_NLOCKED] += 1


@nb.njit(cache=True)
def _count_hit(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, scratch, locked, v):
    if dup is not None:  # write_back backs up on eviction, not on hits
        return
    if not nd[v, _F_GPU]:
        return
    nd[v, _F_HITS] += 1
    if not nd[v, _F_HOST] and nd[v, _F_HITS] >= sc[_S_THRESHOLD]:
        _write_through(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, scratch, locked,
                       v)


@nb.njit(cache=True)
def _drop_subtree(nd, sc, gk, gv, hk, hv, child_of, ids, rec, stack, below, v):
    top = 0
    c = nd[v, _F_FIRST]
    while c >= 0:
        stack[top] = c
        top += 1
        c = nd[c, _F_NEXT]
    n = 0
    while top > 0:
        top -= 1
        cur = stack[top]
        if nd[cur, _F_LOCK] or nd[cur, _F_HLOCK]:
            return False
        below[n] = cur
        n += 1
        c = nd[cur, _F_FIRST]
        while c >= 0:
            stack[top] = c
            top += 1
            c = nd[c, _F_NEXT]
    for j in range(n - 1, -1, -1):
        desc = below[j]
        _record_host_loss(nd, sc, rec, desc)
        _drop_host(nd, sc, desc)
        _remove(nd, child_of, ids, desc)
    _delete_gpu_leaf(nd, sc, gk, gv, hk, hv, child_of, ids, v)
    return True


@nb.njit(cache=True)
def _evict_leaf(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, stack, below, v):
    if nd[v, _F_HOST]:
        _demote(nd, sc, gk, gv, hk, hv, v)
    elif dup is None:  # write_through: a GPU-only leaf goes
        _delete_gpu_leaf(nd, sc, gk, gv, hk, hv, child_of, ids, v)
    elif _back_up(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, v):
        _track_duplicate(nd, sc, dup, v)
        _demote(nd, sc, gk, gv, hk, hv, v)
    else:
        sc[_S_FAILED] += 1
        _drop_subtree(nd, sc, gk, gv, hk, hv, child_of, ids, rec, stack, below, v)


@nb.njit(cache=True)
def _make_room(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, stack, below, kept,
               tokens):
    target = tokens // sc[_S_PAGE]
    n_kept = 0
    while sc[_S_GFREE] < target:
        v = _oldest(nd, sc, gk, gv, np.int64(_F_INGPU), np.int64(_S_GHN))
        if v < 0:
            break
        _evict_leaf(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, stack, below, v)
        if nd[v, _F_ALIVE] and nd[v, _F_INGPU]:
            kept[n_kept] = v
            n_kept += 1
    for j in range(n_kept):
        _push(nd, sc, gk, gv, np.int64(_F_INGPU), np.int64(_S_GHN), kept[j])


@nb.njit(cache=True)
def _lookup(nd, sc, gk, gv, hk, hv, dup, child_of, ids, start, cap):
    """(deepest node on the GPU, deepest node on the GPU or host, GPU pages, pages matched)."""
    node = np.int64(_ROOT)
    best = _ROOT
    best_gpu = _ROOT
    gpu_run = 0
    depth = np.int64(0)
    while depth < cap:
        c = _child(nd, child_of, node, ids[start + depth])
        if c < 0 or (not nd[c, _F_GPU] and not nd[c, _F_HOST]):
            break
        m = _matched(nd, ids, c, start, depth, cap - depth)
        split = m < nd[c, _F_LEN]
        if split:
            c = _split(nd, sc, gk, gv, hk, hv, dup, child_of, ids, c, m)
        node = c
        depth += m
        best = node
        if nd[node, _F_GPU]:
            best_gpu = node
            gpu_run = depth
        if split:
            break
    stamp = _tick(sc)
    cur = best
    while cur != _ROOT:
        _stamp(nd, sc, gk, gv, hk, hv, cur, stamp)
        stamp -= 1
        cur = nd[cur, _F_PARENT]
    return best_gpu, best, gpu_run, depth


@nb.njit(cache=True)
def _insert_host(nd, sc, gk, gv, hk, hv, child_of, ids, anchor, src, pages):
    """The fetched pages as a host-only child of the anchor (the lookup ended there)."""
    _stamp(nd, sc, gk, gv, hk, hv, anchor, _tick(sc))
    v = _new_node(nd, sc, anchor, src, pages)
    nd[v, _F_HOST] = 1
    nd[v, _F_HUSE] = sc[_S_NOW]
    _append_child(nd, anchor, v)
    child_of[ids[src]] = v
    _update_sets(nd, sc, gk, gv, hk, hv, v)
    _update_sets(nd, sc, gk, gv, hk, hv, anchor)


@nb.njit(cache=True)
def _prefetch(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, storage, start, cap,
              least_pages):
    """(first page, pages) fetched from storage into the host under the deepest node
    matched."""
    st, ends, _, _, lru_counters, _ = storage
    _, anchor, _, depth = _lookup(nd, sc, gk, gv, hk, hv, dup, child_of, ids, start, cap)
    if anchor != _ROOT and not nd[anchor, _F_HOST]:
        return depth, 0
    if cap - depth < least_pages:
        return depth, 0
    found = 0
    while depth + found < cap and held(st, _STORAGE, ids[start + depth + found]):
        found += 1
    if found < least_pages:
        return depth, 0
    if anchor != _ROOT:
        nd[anchor, _F_HLOCK] += 1
        _update_sets(nd, sc, gk, gv, hk, hv, anchor)
    if sc[_S_HFREE] < found:
        _evict_host(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, found)
        if sc[_S_HFREE] < found:
            found = sc[_S_HFREE] if sc[_S_HFREE] >= least_pages else 0
    if found:
        for j in range(found):
            touch(st, ends, _STORAGE, ids[start + depth + j], sc[_S_NOW])
        lru_counters[_STORAGE, LOADED] += found
        sc[_S_HFREE] -= found
        sc[_S_STORED] += found
        _insert_host(nd, sc, gk, gv, hk, hv, child_of, ids, anchor, start + depth, found)
    if anchor != _ROOT:
        nd[anchor, _F_HLOCK] -= 1
        _update_sets(nd, sc, gk, gv, hk, hv, anchor)
    return depth, found


@nb.njit(cache=True)
def _write_storage(nd, sc, gk, gv, hk, hv, ids, wr, storage):
    """The request's backups land in storage in the order they were acknowledged (a page
    already stored refreshed), and their nodes' host locks go. False when an insert could
    overflow the eviction room (the pass then stops: a room of one per page of the trace is
    never outgrown, as no request writes a page twice)."""
    st, ends, size, capacity, lru_counters, evictions = storage
    now = sc[_S_NOW]
    for b in range(sc[_S_NBACKED]):
        for key in ids[wr[b, 0]:wr[b, 0] + wr[b, 1]]:
            if held(st, _STORAGE, key):
                touch(st, ends, _STORAGE, key, now)
                continue
            if lru_counters[_STORAGE, EVICTED] == evictions.shape[2]:
                return False
            insert(st, ends, size, capacity, lru_counters, evictions, _STORAGE, key, now)
    for b in range(sc[_S_NBACKED]):
        v = wr[b, 2]
        nd[v, _F_HLOCK] -= 1
        _update_sets(nd, sc, gk, gv, hk, hv, v)
    sc[_S_NBACKED] = 0
    return True


class TreeRoom(NamedTuple):
    """The arrays `hicache_tree_pass` works in, in the order it takes them (`*room`): the
    nodes, the scalars, the two leaf heaps (keys, values), write_back's duplicates' log
    (None under the write-through policies: `hicache_tree_pass`), the node of
    each page id, the host evictions' records, a request's backups and its scratch lists, and
    per request the GPU, host and storage hit pages and the first page lacking."""

    nd: np.ndarray
    sc: np.ndarray
    gk: np.ndarray
    gv: np.ndarray
    hk: np.ndarray
    hv: np.ndarray
    dup: np.ndarray | None
    child_of: np.ndarray
    rec: np.ndarray
    wr: np.ndarray
    scratch: np.ndarray
    locked: np.ndarray
    stack: np.ndarray
    below: np.ndarray
    kept: np.ndarray
    gpu_hit: np.ndarray
    host_hit: np.ndarray
    storage_hit: np.ndarray
    lacking: np.ndarray


def tree_room(n: int, num_distinct: int, storage: bool, write_back: bool) -> TreeRoom:
    """`TreeRoom` for `n` requests over `num_distinct` page ids, with or without a storage,
    under write_back or a write-through policy."""
    max_nodes = (5 if storage else 3) * n + 2  # a prefetch adds a split and a node
    heap_size = 4 * max_nodes + 4096
    return TreeRoom(
        nd=np.zeros((max_nodes, _FIELDS), dtype=np.int64), sc=np.zeros(_SCALARS, dtype=np.int64),
        gk=np.empty(heap_size, dtype=np.int64), gv=np.empty(heap_size, dtype=np.int64),
        hk=np.empty(heap_size, dtype=np.int64), hv=np.empty(heap_size, dtype=np.int64),
        dup=np.empty(2 * max_nodes + 1024, dtype=np.int64) if write_back else None,
        # 0: no node (the root); a node's row fits 32 bits (5 nodes a request at most), and at
        # one token a page this array is the pass's largest (1.6 GB at 1e9 tokens).
        child_of=np.zeros(max(num_distinct, 1), dtype=np.int32),
        rec=np.empty((max_nodes, 4), dtype=np.int64),
        wr=np.empty((max_nodes if storage else 1, 3), dtype=np.int64),
        scratch=np.empty(max_nodes, dtype=np.int64), locked=np.empty(max_nodes, dtype=np.int64),
        stack=np.empty(max_nodes, dtype=np.int64), below=np.empty(max_nodes, dtype=np.int64),
        kept=np.empty(max_nodes, dtype=np.int64), gpu_hit=np.zeros(n, dtype=np.int64),
        host_hit=np.zeros(n, dtype=np.int64), storage_hit=np.zeros(n, dtype=np.int64),
        lacking=np.full(n, -1, dtype=np.int64))


class StorageLru(NamedTuple):
    """The storage below the host as `hicache_tree_pass` takes it: an LRU of page keys in
    `lru_rows`' arrays (its rows, ends, size, capacity, counters) and room for its
    evictions."""

    rows: np.ndarray
    ends: np.ndarray
    size: np.ndarray
    capacity: np.ndarray
    counters: np.ndarray
    evictions: np.ndarray


def storage_lru(num_distinct: int, capacity_pages: int, pages_written: int) -> StorageLru:
    """An empty `StorageLru` of `capacity_pages` over `num_distinct` page ids, with room for
    one eviction per page written (untouched room costs no memory)."""
    st, _ = rows(num_distinct, 1, 0, 0)
    ends, size, lru_counters, _ = lru_state(1, 0)
    return StorageLru(rows=st, ends=ends, size=size,
                      capacity=np.full(1, capacity_pages, dtype=np.int64),
                      counters=lru_counters,
                      evictions=np.empty((1, 3, pages_written + 1), dtype=np.int64))


def counters_of(sc: np.ndarray) -> np.ndarray:
    """The host tier's counters: stored, evicted, loaded, failed, released."""
    return sc[[_S_STORED, _S_EVICTED, _S_LOADED, _S_FAILED, _S_RELEASED]].copy()


def shortfall(sc: np.ndarray) -> tuple[int, int]:
    """The pages needed and free of the request the pass stopped at."""
    return int(sc[_S_NEEDED]), int(sc[_S_FREE])


def records_of(sc: np.ndarray, rec: np.ndarray) -> np.ndarray:
    """The host evictions' records the pass wrote."""
    return rec[:sc[_S_NREC]].copy()


@refcount_free
def hicache_tree_pass(offsets, ids, max_hit, prompt_tokens, refused, page, gpu_pages,
                      host_pages, threshold, load_back_min_tokens,
                      prefetch_min_tokens, storage, nd, sc, gk, gv, hk, hv, dup, child_of,
                      rec, wr, scratch, locked, stack, below, kept, gpu_hit, host_hit,
                      storage_hit, lacking):  # pragma: no cover - compiled
    """Fills, in the arrays of `TreeRoom`, the GPU hit pages, the host pages loaded, of them
    the pages fetched from storage, the host evictions' records [first page, pages, request,
    last use] (`records_of`) and counters (`counters_of`), the storage's `lru_rows` counters
    and evictions, and per request the first page the GPU and host lacked at the lookup (−1:
    none within the hit cap). `storage` is the storage's LRU (`storage_lru`), or None
    without a storage: numba then prunes its branches, and a first run compiles no prefetch;
    the room's `dup`, the duplicates' log, is write_back's, None under the write-through
    policies, whose runs then compile none of write_back's code (nor it theirs). Returns
    `DONE`; `OUT_OF_ROOM` when that room ran out; or the request SGLang cannot allocate for
    (`sglang_tree.PrefillOutOfMemory`; its pages needed and free in `sc`, `shortfall`). The
    pass stops at either."""
    n = len(offsets) - 1
    least_pages = -(-prefetch_min_tokens // page)
    sc[_S_GFREE] = gpu_pages
    sc[_S_HFREE] = host_pages
    sc[_S_NEXT] = 1
    sc[_S_PAGE] = page
    sc[_S_THRESHOLD] = threshold
    sc[_S_STORAGE] = 0
    if storage is not None:
        sc[_S_STORAGE] = 1
    nd[_ROOT, _F_GPU] = 1
    nd[_ROOT, _F_LOCK] = 1
    nd[_ROOT, _F_ALIVE] = 1
    nd[_ROOT, _F_FIRST] = -1
    nd[_ROOT, _F_LAST] = -1
    nd[_ROOT, _F_DUP] = -1
    for i in range(n):
        if refused[i]:
            continue
        sc[_S_NOW] = i
        start = offsets[i]
        full = offsets[i + 1] - start
        cap = max_hit[i]
        span_start = 0
        fetched = 0
        if storage is not None and cap > 0:
            span_start, fetched = _prefetch(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec,
                                            storage, start, cap, least_pages)
        best_gpu = _ROOT
        best = _ROOT
        gpu_run = 0
        if cap > 0:
            best_gpu, best, gpu_run, _ = _lookup(nd, sc, gk, gv, hk, hv, dup, child_of, ids,
                                                 start, cap)
        # load-back of the host continuation
        loaded = 0
        anchor = best_gpu
        held_pages = gpu_run
        if best != best_gpu:
            nd[best, _F_HLOCK] += 1
            _update_sets(nd, sc, gk, gv, hk, hv, best)
            _lock(nd, sc, gk, gv, hk, hv, best)
            pages = 0
            cur = best
            while not nd[cur, _F_GPU]:
                pages += nd[cur, _F_LEN]
                cur = nd[cur, _F_PARENT]
            held_pages += pages
            if pages * page >= max(1, load_back_min_tokens):
                if sc[_S_GFREE] < pages:
                    _make_room(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, stack,
                               below, kept, pages * page)
                if sc[_S_GFREE] >= pages:
                    _unlock(nd, sc, gk, gv, hk, hv, best)
                    n_nodes = 0
                    cur = best
                    while not nd[cur, _F_GPU]:
                        scratch[n_nodes] = cur
                        n_nodes += 1
                        cur = nd[cur, _F_PARENT]
                    for j in range(n_nodes - 1, -1, -1):
                        v = scratch[j]
                        _set_gpu(nd, sc, v, np.int64(1))
                        nd[v, _F_HUSE] = i
                        _update_sets(nd, sc, gk, gv, hk, hv, v)
                    _update_sets(nd, sc, gk, gv, hk, hv, best)
                    _lock(nd, sc, gk, gv, hk, hv, best)
                    loaded = pages
                    if dup is not None:  # write_back
                        for j in range(n_nodes):
                            _track_duplicate(nd, sc, dup, scratch[j])
            _unlock(nd, sc, gk, gv, hk, hv, best)
            nd[best, _F_HLOCK] -= 1
            _update_sets(nd, sc, gk, gv, hk, hv, best)
            if loaded:
                anchor = best
                sc[_S_LOADED] += loaded
        if held_pages < cap:
            lacking[i] = held_pages
        # allocation
        _lock(nd, sc, gk, gv, hk, hv, anchor)
        extra = page if page > 1 else 0
        need = prompt_tokens[i] - (gpu_run + loaded) * page + extra
        if need > sc[_S_GFREE] * page:
            _make_room(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, stack, below, kept,
                       need + page - 1)
        needed = -(-prompt_tokens[i] // page) - (gpu_run + loaded)
        if sc[_S_GFREE] < needed:  # SGLang raises "Prefill out of memory"
            sc[_S_NEEDED] = needed
            sc[_S_FREE] = sc[_S_GFREE]
            return i
        # insert
        sc[_S_NLOCKED] = 0
        _tick(sc)  # the root is touched
        node = np.int64(_ROOT)
        depth = np.int64(0)
        while depth < full:
            c = _child(nd, child_of, node, ids[start + depth])
            if c < 0:
                break
            _stamp(nd, sc, gk, gv, hk, hv, c, _tick(sc))
            m = _matched(nd, ids, c, start, depth, full - depth)
            if m < nd[c, _F_LEN]:
                c = _split(nd, sc, gk, gv, hk, hv, dup, child_of, ids, c, m)
            if not nd[c, _F_GPU]:
                _set_gpu(nd, sc, c, np.int64(1))
                _update_sets(nd, sc, gk, gv, hk, hv, c)
                if dup is not None:  # write_back
                    _track_duplicate(nd, sc, dup, c)
                _update_sets(nd, sc, gk, gv, hk, hv, nd[c, _F_PARENT])
            _count_hit(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, scratch, locked, c)
            node = c
            depth += m
        if depth < full:
            leaf = _new_node(nd, sc, node, start + depth, full - depth)
            nd[leaf, _F_GPU] = 1
            sc[_S_GFREE] -= full - depth
            _append_child(nd, node, leaf)
            child_of[ids[start + depth]] = leaf
            _update_sets(nd, sc, gk, gv, hk, hv, leaf)
            _update_sets(nd, sc, gk, gv, hk, hv, node)
            _count_hit(nd, sc, gk, gv, hk, hv, dup, child_of, ids, rec, wr, scratch, locked,
                       leaf)
        _unlock(nd, sc, gk, gv, hk, hv, anchor)
        for j in range(sc[_S_NLOCKED]):
            _unlock(nd, sc, gk, gv, hk, hv, locked[j])
        if storage is not None and not _write_storage(nd, sc, gk, gv, hk, hv, ids, wr,
                                                      storage):
            return OUT_OF_ROOM
        # The fetched span, as far as the hit covers it, is storage's; the rest the host's.
        stored = max(0, min(gpu_run + loaded, span_start + fetched) - span_start)
        sc[_S_LOADED] -= stored
        gpu_hit[i] = gpu_run
        host_hit[i] = loaded - stored
        storage_hit[i] = stored
    return DONE
