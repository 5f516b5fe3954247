"""Rows of a flat view split into whole 16-byte groups and their two partial edges.

The long-row softmax kernels (``softmax_smem``, ``softmax_split``) read X and write Y through flat
1-D views that start on a 16-byte boundary (the adapter builds them); row r is the elements
[start, start + n) with start = off + r * sx, at any alignment. In units of elements:

- ``ga`` = start rounded up to a group of ``vec`` (16 bytes / element size), ``gb`` = the row's
  end rounded down: the groups in [ga, gb) lie wholly inside the row and move as 16-byte
  vectors (TileLang proves each group uniform: every bound is a multiple of ``vec``);
- the head, [start, ga), and the tail, [gb, end), hold fewer than ``vec`` elements each; they
  move element by element, and only where ``edges`` (a compile-time class: rows that start
  and end on 16 bytes have none).

The edge elements are read by every thread of the CTA that owns them (the same few addresses,
served by L1), so the edges need no cross-thread reduction: each thread folds them into its copy
of the row's max and sum.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def vector_layout(tile: int, vec: int):
    """Thread t holds the 16-byte group [t vec, (t + 1) vec) of a ``tile``-column fragment, so
    a warp's loads cover 512 consecutive bytes."""
    return T.Fragment((tile,), forward_fn=lambda j: (j // vec, j % vec))


def bounds(start, n, vec: int):
    """(ga, gb): the first and one past the last element of the row's whole groups; gb < ga when
    the row lies inside one group."""
    return T.ceildiv(start, vec) * vec, ((start + n) // vec) * vec


def edge_index(t, start, n, ga, gb, vec: int):
    """(element, inside the row) of edge slot t in [0, 2 vec): slots below vec walk the group
    before ``ga`` (the head), the others the group from max(ga, gb) (the tail)."""
    e = T.if_then_else(t < vec, ga - vec + t, T.max(ga, gb) + t - vec)
    return e, T.And(e >= start, e < start + n)


@T.macro
def edge_max(X, em, start, n, ga, gb, vec: int):
    """em[0] = max(em[0], the edge elements)."""
    for t in T.unroll(2 * vec):
        e, inside = edge_index(t, start, n, ga, gb, vec)
        if inside:
            em[0] = T.max(em[0], T.cast(X[e], "float32"))


@T.macro
def edge_sum(X, es, shift, start, n, ga, gb, vec: int):
    """es[0] += sum of exp(edge element - shift)."""
    for t in T.unroll(2 * vec):
        e, inside = edge_index(t, start, n, ga, gb, vec)
        if inside:
            es[0] += T.exp2((T.cast(X[e], "float32") - shift) * LOG2E)


@T.macro
def edge_write(X, Y, tx, mx, inv, start, n, ga, gb, vec: int, dtype: str):
    """Thread tx < 2 vec writes edge slot tx: exp(x - mx) * inv."""
    if tx < 2 * vec:
        e, inside = edge_index(tx, start, n, ga, gb, vec)
        if inside:
            Y[e] = T.cast(T.exp2((T.cast(X[e], "float32") - mx) * LOG2E) * inv, dtype)
