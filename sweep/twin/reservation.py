"""The twin's SGLang admission (docs/model.md, "SGLang's admission"; the engine's:
``sweep.engine.features.reservation``): a waiting request is admitted only where its prompt's
and whole output's blocks fit beside the room kept for the running requests' outputs to come."""
from __future__ import annotations

import math

import numpy as np

from sweep.physics.engines import CLIP_NEW_TOKENS, new_token_ratio
from sweep.twin.state import Twin


def kept(tw: Twin) -> int:
    """Blocks kept back for the running requests' outputs to come (0: an engine that keeps
    none)."""
    if not tw.design.reserves:
        return 0
    to_come = sum(s.o - s.g for s in tw.occupied.values() if not s.preempted)
    ratio = new_token_ratio(np.float64(tw.passes - tw.reserve_since))
    return int(np.ceil(ratio * np.float64(to_come) / np.float64(tw.design.block_tokens)))


def reserving(tw: Twin) -> bool:
    """Whether admission keeps room for the outputs: an engine that does, with some seat
    running (a lone request is admitted as if it kept none: SGLang's pool holds a whole
    context)."""
    return bool(tw.design.reserves) and any(not s.preempted for s in tw.occupied.values())


def extra(tw: Twin, prompt: int, output: int) -> int:
    """Blocks of a waiting request's output to come, beyond those of its prompt."""
    bt = tw.design.block_tokens
    return max(math.ceil((prompt + min(output, CLIP_NEW_TOKENS)) / bt)
               - math.ceil((prompt + 1) / bt), 0)
