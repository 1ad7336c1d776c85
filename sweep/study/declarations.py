"""What a config key's declaration holds (``Field``), where a key applies (``Applies``), and
the check of one value against its declaration (``check``); the declarations themselves are
``sweep.study.fields``."""
from __future__ import annotations

import typing
from typing import NamedTuple

from sweep.errors import FieldError, listed, show
from sweep.study.lengths import LENGTH_KEYS
from sweep.study.ranges import Range


class Applies(NamedTuple):
    """Where a key has an effect: ``test(design keywords, workload keywords)``, and the same in
    words, for the refusal of a key given where it has none."""

    test: typing.Callable[[dict, dict], bool]
    says: str

    def __call__(self, d: dict, w: dict) -> bool:
        return self.test(d, w)


class Field(NamedTuple):
    """One config key. Kinds: ``num`` (a finite number, kept as float), ``int``, ``bool``,
    ``str``, ``path`` (a file read into another key), ``lengths`` (a length table), ``pauses``
    (a number or a length table of seconds, ``lengths.Pauses``) and ``trace`` (a trace file)."""

    key: str
    section: str  # the config table that holds it (``fields.SECTIONS``)
    kind: str
    default: object = None  # the Design's or Workload's; None: unset
    help: str = ""  # what it means (docs/config.md)
    short: str = ""  # the same in a few words (README.md)
    unit: str = ""
    choices: tuple = ()  # every allowed value, where there are few
    range: Range | None = None  # what a value must be, where there are many
    unset: bool = False  # a config that omits it leaves it unset (None), whatever the default
    gpu_default: bool = False  # unset, the GPU's own value is used and shown in its column
    fitted: str = ""  # "gpu": fitted per GPU on its real runs; "engine": the serving engine's
    engine: str = ""  # the dtype under which the engine's rules read the lever as it is
    draw: int = -1  # may be uncertain (a distribution); its draws' stream, never reused
    #: (Design keywords, Workload keywords) -> whether the key applies; where it does not, its
    #: column is empty (and a workload key takes its default: the sampler ignores it).
    when: Applies | None = None
    values: str = ""  # the tables' "values" where kind, choices, range and unit do not say it
    shown: str = ""  # the tables' "default" where the default does not say it

    @property
    def attr(self) -> str | None:
        """The Design or Workload attribute it sets (a path is read into another key's)."""
        if self.kind == "path":
            return None
        return "model" if self.section == "model" else self.key

    @property
    def columns(self) -> tuple[str, ...]:
        """Its results columns: a length table's every key, the attribute's otherwise."""
        if self.kind == "lengths":
            return tuple(f"{self.key}_{k}" for k in LENGTH_KEYS)
        return (self.attr,) if self.attr else ()

    @property
    def may_be_unset(self) -> bool:
        return self.unset or self.default is None

    @property
    def config_default(self):
        """What a config that omits the key gets."""
        return None if self.unset else self.default



def check(f: Field, value, scope: str) -> None:
    """Refuse ``value`` for ``f`` alone with a ``FieldError`` naming ``scope.attr``; the
    combinations of values are the Design's and the Workload's to check."""
    if value is None and f.may_be_unset:
        return
    key = f"{scope}.{f.attr}"
    if f.choices and value not in f.choices:
        raise FieldError(key, f"{show(value)} is not allowed", listed(f.choices), value)
    if f.range is not None and not f.range.holds(value, f.kind):
        raise FieldError(key, f"must be {f.range.text(f.kind)}, got {value!r}", value=value)
    if f.kind == "bool" and not isinstance(value, bool):
        raise FieldError(key, f"must be true or false, got {value!r}", value=value)
