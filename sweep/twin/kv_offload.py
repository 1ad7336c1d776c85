"""The twin's CPU KV tier (docs/model.md, "CPU KV tier"; the engine's:
``sweep.engine.features.kv_offload``): the nodes the GPUs cache stored in host memory too, least
recently used dropped first, and the time a pass takes to load its prefills' host-only nodes."""
from __future__ import annotations

import numpy as np

from sweep.twin.state import Twin, lru_dropped


def offload(tw: Twin, computed: set[int]) -> None:
    """The nodes cached in GPU memory (before its eviction) are stored in host memory too,
    which then drops the least recently used (the prefix cache's order) while they do not fit:
    a node stays if it and every younger one fit."""
    room = tw.design.host_blocks
    if room <= 0:
        return
    tw.host.update(computed)
    tw.host.difference_update(lru_dropped(tw, tw.host, room))


def pass_time(tw: Twin, duration: np.float64, loaded: int) -> np.float64:
    """A pass loads ``loaded`` tokens' KV from host memory while it computes for ``duration``:
    it takes the longer."""
    if tw.design.host_blocks <= 0:
        return duration
    return max(duration, np.float64(loaded) * np.float64(tw.design.load_s_per_token))
