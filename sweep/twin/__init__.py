"""The engine's event-driven twin: a plain-Python simulator of docs/model.md, by the same rules
as the ``lax.scan`` engine (``sweep.engine``), compared with it request by request.

- ``state``: the twin's state and results;
- ``rules``: the rules of one step, one function each;
- ``prefills``, ``kv_offload``, ``closed_loop``, ``sessions``: each feature's rule, named as
  the engine's feature (``sweep.engine.features``);
- ``simulate``: the entries, one server and several;
- ``metrics``: a result's summary metrics, written apart from the engine's.
"""
from sweep.twin.simulate import (RefResult, simulate_disaggregated_reference,
                                 simulate_mixed_reference, simulate_reference,
                                 simulate_replicas_reference, summarize_reference)

__all__ = ["RefResult", "simulate_disaggregated_reference", "simulate_mixed_reference",
           "simulate_reference", "simulate_replicas_reference", "summarize_reference"]
