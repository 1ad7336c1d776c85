"""A validation's simulations saved as they finish, so that an interrupted ``sweep validate``
resumes (``--resume``): each study it runs keeps its parts in a folder of its own under the
report folder's ``validation-parts/``, which is removed once the report is written. A study's
results do not depend on how it is chunked, so a resumed validation gives the same report."""
from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from sweep.study.config import Study

#: The folder, inside the report's, of an unfinished validation's saved simulations.
PARTS_FOLDER = "validation-parts"


def identity(cases, seeds: list[int], kind: str, batch: int) -> dict:
    """What a study's saved simulations stand for: its cases' files and texts, the seeds, which
    of the validation's studies it is and servesweep's version (a resumed validation reuses
    them only where all of it matches)."""
    from sweep.version import __version__

    return {"cases": [[str(c.path), c.study.text] for c in cases], "seeds": list(seeds),
            "kind": kind, "batch": batch, "servesweep": __version__}


def _matches(work: Path, want: dict) -> bool:
    from sweep.analysis.results import ResultsError, read_manifest

    try:
        return read_manifest(work).get("identity") == want
    except (ResultsError, OSError, ValueError):
        return False


def resumable(study: Study, work: Path, want: dict, resume: bool, progress=None) -> pd.DataFrame:
    """The runs of ``study``, as ``runner.run_study`` gives them, each chunk saved in ``work``
    as it finishes; with ``resume``, those an interrupted validation of the same ``want``
    saved there are read, not simulated again (without it they are discarded)."""
    from sweep.analysis.results import next_part, read_parts, start_parts, write_part
    from sweep.analysis.tables import grid_table, runs_table
    from sweep.execution.runner import device_description, iter_chunks
    from sweep.execution.study_run import sweep_manifest

    grid = grid_table(study)
    if not (resume and _matches(work, want)):
        shutil.rmtree(work, ignore_errors=True)
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        manifest = sweep_manifest(study, False, started, device_description())
        start_parts(work, {**manifest, "identity": want}, grid)
    saved = read_parts(work, requests=False).metrics
    number = next_part(work, 0)
    for chunk in iter_chunks(study, study.chunk_size, per_request=False,
                             skip=set(zip(saved["design"], saved["seed"])), progress=progress):
        if len(chunk.metrics):
            write_part(work, 0, number, chunk.metrics, None, {"seconds": chunk.seconds})
            number += 1
    return runs_table(grid, read_parts(work, requests=False).metrics, study.seeds)
