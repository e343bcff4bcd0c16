"""Compiled doubly linked lists and a binary min-heap over flat arrays, shared by the kernels.

The prefix replay (`prefix.kernels.engine`) keeps its caches as doubly linked lists of dense
ids, and the kernels keep their pending events in a heap; they call these helpers from their numba
loops (`cache=True`), so a fix to the list or heap logic lands in all of them. The engine
simulator (`sim.engine`) writes the same list steps out over its block-pool matrix instead:
there a call, even an inlined one, counts a reference to each array on every freed block.
Lists are numbered: `head[lst]`/`tail[lst]` are the ends of list `lst` (-1 when empty),
`prev`/`nxt` the links of each node. An unlinked node's own links are left stale: every
caller rewrites them on the next insert.
"""

from __future__ import annotations

import numba as nb


@nb.njit(cache=True, inline="always")
def unlink(x, lst, prev, nxt, head, tail):
    """Take node x out of list lst."""
    p = prev[x]
    q = nxt[x]
    if p >= 0:
        nxt[p] = q
    else:
        head[lst] = q
    if q >= 0:
        prev[q] = p
    else:
        tail[lst] = p


@nb.njit(cache=True, inline="always")
def replace(x, y, lst, prev, nxt, head, tail):
    """Put node y where node x is in list lst (x leaves it)."""
    p = prev[x]
    q = nxt[x]
    prev[y] = p
    nxt[y] = q
    if p >= 0:
        nxt[p] = y
    else:
        head[lst] = y
    if q >= 0:
        prev[q] = y
    else:
        tail[lst] = y


@nb.njit(cache=True, inline="always")
def append(x, lst, prev, nxt, head, tail):
    """Put node x at the tail of list lst (the most recent end)."""
    t = tail[lst]
    prev[x] = t
    nxt[x] = -1
    if t >= 0:
        nxt[t] = x
    else:
        head[lst] = x
    tail[lst] = x


@nb.njit(cache=True, inline="always")
def prepend(x, lst, prev, nxt, head, tail):
    """Put node x at the head of list lst (the next to be taken)."""
    h = head[lst]
    nxt[x] = h
    prev[x] = -1
    if h >= 0:
        prev[h] = x
    else:
        tail[lst] = x
    head[lst] = x


@nb.njit(cache=True)
def heap_push(keys, vals, size, key, val):
    """Add (key, val) to the min-heap of `size` entries; returns the new size."""
    j = size
    keys[j] = key
    vals[j] = val
    while j > 0:
        parent = (j - 1) // 2
        if keys[parent] <= keys[j]:
            break
        keys[parent], keys[j] = keys[j], keys[parent]
        vals[parent], vals[j] = vals[j], vals[parent]
        j = parent
    return size + 1


@nb.njit(cache=True)
def heap_pop(keys, vals, size):
    """Drop the minimum (read it at index 0 first); returns the new size."""
    size -= 1
    keys[0] = keys[size]
    vals[0] = vals[size]
    j = 0
    while True:
        left = 2 * j + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and keys[left + 1] < keys[left]:
            child = left + 1
        if keys[j] <= keys[child]:
            break
        keys[child], keys[j] = keys[j], keys[child]
        vals[child], vals[j] = vals[j], vals[child]
        j = child
    return size
