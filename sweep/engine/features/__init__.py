"""The engine's features, composed by a list (docs/internals.md, "Adding a feature").

A feature is one module of this package holding, side by side:

- ``NAME`` and ``uses(p, r)``: its compile gate, whether any simulation of a (concrete) batch
  uses it; the engine is compiled with the features some simulation uses, and no other;
- ``init(n, seats, nodes)``: its own slot of the state (``EngineState.features[NAME]``) for
  ``n`` requests, ``seats`` seats and ``nodes`` cache nodes, or None when it carries nothing
  from pass to pass;
- ``Hooks``: a subclass of ``plain.Plain`` that replaces the hooks it changes; every other hook
  keeps its plain form, which adds nothing (or of another feature's ``Hooks``, which it then
  ``REPLACES``: compiled in, it stands for that feature).

``FEATURES`` lists them; ``compose`` builds one batch's hooks from the active ones. A hook is
replaced by at most one feature, so the order of the list changes nothing. The twin's rule of
each feature is the module of the same name in ``sweep.twin``."""
from __future__ import annotations

from functools import cache

from sweep.engine.features import (closed_loop, expert_parallel, kv_offload, multi_step,
                                   pauses, pipeline, prefills, reservation, sessions)
from sweep.engine.features.plain import Plain

#: Every feature of the engine: adding one is a module and a line here.
FEATURES = (prefills, kv_offload, closed_loop, sessions, pauses, expert_parallel, pipeline,
            multi_step, reservation)
_BY_NAME = {f.NAME: f for f in FEATURES}


def active(p, r) -> tuple[str, ...]:
    """The features some simulation of a (concrete) batch uses: the static part of its
    compiled program. A feature that ``REPLACES`` others (its hooks extend theirs) stands for
    them."""
    used = [f for f in FEATURES if f.uses(p, r)]
    replaced = {name for f in used for name in getattr(f, "REPLACES", ())}
    return tuple(f.NAME for f in used if f.NAME not in replaced)


def covering(names, p, r) -> tuple[str, ...]:
    """The features to compile a batch with when the caller names them (one program for
    batches that use different ones): ``names`` in the order of ``FEATURES``, less those that
    another of them replaces. They must cover every feature the batch uses; one that no
    simulation uses changes no result, only the program's size."""
    unknown = sorted(set(names) - set(_BY_NAME))
    if unknown:
        raise ValueError(f"features: {unknown[0]!r} unknown; allowed: {sorted(_BY_NAME)}")
    replaced = {n for f in FEATURES if f.NAME in names for n in getattr(f, "REPLACES", ())}
    chosen = tuple(f.NAME for f in FEATURES if f.NAME in names and f.NAME not in replaced)
    missing = [n for n in active(p, r) if n not in chosen + tuple(replaced)]
    if missing:
        raise ValueError(f"features: {missing[0]!r} is used by the batch; named: {chosen}")
    return chosen


@cache
def compose(names: tuple[str, ...]) -> type:
    """The hooks of an engine compiled with the features ``names``: each hook from the one
    feature that replaces it, else the plain one."""
    mods = [_BY_NAME[n] for n in names]
    owner: dict[str, str] = {}
    for m in mods:
        for hook in vars(m.Hooks):
            if not hook.startswith("__"):
                if hook in owner:
                    raise TypeError(f"hook {hook}: replaced by both {owner[hook]} and {m.NAME}")
                owner[hook] = m.NAME
    return type("Hooks", tuple(m.Hooks for m in mods) + (Plain,),
                {"__doc__": "The hooks of " + (" + ".join(names) or "the plain engine") + "."})


def slots(names: tuple[str, ...], n: int, seats: int, nodes: int) -> dict:
    """The state's slots of the features ``names`` at the start of a simulation."""
    return {m: s for m in names if (s := _BY_NAME[m].init(n, seats, nodes)) is not None}
