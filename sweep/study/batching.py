"""The batching policies a design may name (``[levers] batching``), each as what it means to the
rules (docs/model.md, "One step" and below it): the seats it fills and when it may admit."""
from __future__ import annotations

from typing import NamedTuple


class Policy(NamedTuple):
    one_seat: bool  # serves one request at a time, whatever max_batch says
    empty_only: bool  # admits only into an empty server (the batch runs to its end)


#: name -> policy, in the order the config's choices list them.
POLICIES = {
    "one_at_a_time": Policy(one_seat=True, empty_only=True),  # static batching with one seat
    "static": Policy(one_seat=False, empty_only=True),  # a batch forms when the server is empty
    "continuous": Policy(one_seat=False, empty_only=False),  # a free seat is filled every pass
}
