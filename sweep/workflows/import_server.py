"""The server beside benchmark files: ``server.toml`` in their folder states the GPU, the model and
any other ``[hardware]`` or ``[levers]`` key, as a config's tables do, for ``sweep import``; its
flags (``--gpu``, ``--model``, ``--gpus``, ``--set``) override it key by key."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import UsageError, clip, listed, one_line
from sweep.files import FileRefused, read_text
from sweep.study.fields import KEYS

#: Its name, in the folder of the files it describes.
SERVER_FILE = "server.toml"
_ALLOWED = (f"{SERVER_FILE}: [hardware] and [levers] tables of config keys, [model] name or "
            "config_json")


@dataclass
class Server:
    """What a folder's ``server.toml`` states (nothing where there is none)."""

    path: Path | None = None
    gpu: str | None = None
    gpus: int | None = None
    model: str | None = None  # a catalog name, or a config.json's absolute path
    sets: list[str] = field(default_factory=list)  # every other key as ``KEY=VALUE``

    def sets_under(self, given) -> list[str]:
        """Its ``KEY=VALUE`` items but those ``given`` (the flags') set."""
        keys = {str(s).partition("=")[0].strip() for s in given}
        return [s for s in self.sets if s.partition("=")[0] not in keys]


def beside(folder: Path, toml_value) -> Server:
    """The ``server.toml`` of ``folder``, read and checked (``toml_value`` writes a value back as
    TOML); every refusal one line naming the file and the key."""
    p = folder / SERVER_FILE
    if not p.exists():
        return Server()
    try:
        doc = tomllib.loads(read_text(p, "a TOML file of the server"))
    except FileRefused as exc:
        raise UsageError(f"{p}: {exc.reason}; allowed: {_ALLOWED}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: not TOML ({clip(one_line(str(exc)), 80)}); allowed: "
                         f"{_ALLOWED}") from None
    if not all(k in ("hardware", "model", "levers") and isinstance(v, dict)
               for k, v in doc.items()):
        raise UsageError(f"{p}: {listed(doc)}: not tables of a server; allowed: {_ALLOWED}")
    out = Server(path=p)
    model = doc.get("model", {})
    if not set(model) <= {"name", "config_json"} or len(model) > 1 or not all(
            isinstance(v, str) and v for v in model.values()):
        raise UsageError(f"{p}: [model] {listed(model) or 'empty'}; allowed: name = a catalog "
                         "model, or config_json = a config.json's path")
    if "config_json" in model:
        out.model = str((p.parent / model["config_json"]).resolve())
    elif "name" in model:
        out.model = model["name"]
    for section in ("hardware", "levers"):
        for key, value in doc.get(section, {}).items():
            if key not in KEYS[section] or isinstance(value, (list, dict)):
                raise UsageError(f"{p}: {section}.{clip(key, 40)}: "
                                 + ("one value, not an array or a table" if key in KEYS[section]
                                    else "unknown key") + f"; allowed: {_ALLOWED}")
            if key == "gpu":
                out.gpu = value
            elif key == "gpus":
                out.gpus = value
            else:
                out.sets.append(f"{key}={toml_value(value)}")
    return out
