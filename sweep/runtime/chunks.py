"""A batch in chunks of one size. A compiled function's program depends on the size of its
batch, so a call of any size made of chunks of ``SIZE`` rows reuses one program: the sampler
and the summaries, cheap to run and seconds to compile, are called this way."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

#: Rows per chunk: a call of one simulation pads 15 rows (microseconds of work), a call of
#: hundreds makes tens of calls.
SIZE = 16


def split(tree, size: int = SIZE) -> list:
    """``tree`` (leaves batched along their leading axis) as chunks of ``size`` rows, the last
    padded with copies of its first row. Rows are cut on the host, and a device array's
    chunks are placed where it was (eager slicing would compile a program per offset)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    host = [np.asarray(x) for x in leaves]
    parts = []
    for i in range(0, host[0].shape[0], size):
        chunk = [_padded(x[i:i + size], size) for x in host]
        chunk = [jax.device_put(c, x.sharding) if isinstance(x, jax.Array) else c
                 for c, x in zip(chunk, leaves)]
        parts.append(treedef.unflatten(chunk))
    return parts


def _padded(rows: np.ndarray, size: int) -> np.ndarray:
    if len(rows) == size:
        return rows
    return np.concatenate([rows, np.repeat(rows[:1], size - len(rows), axis=0)])


def join(parts: list, m: int):
    """The first ``m`` rows of the chunks ``parts`` (device arrays), as one batch on the
    device."""
    if len(parts) == 1 and jax.tree_util.tree_leaves(parts[0])[0].shape[0] == m:
        return parts[0]
    return _join(parts, m)


@partial(jax.jit, static_argnums=1)
def _join(parts: list, m: int):
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs)[:m], *parts)


def join_on_host(parts: list, m: int):
    """The first ``m`` rows of the chunks ``parts``, as one batch of host arrays."""
    return jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs])[:m],
                                  *parts)
