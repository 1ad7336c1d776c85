"""One engine call on every device: a call's simulations sharded over a 1-D mesh, the same
single-device executable on each shard, and the results gathered and summarized on the host."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sweep.engine import simulate_batch
from sweep.engine import topology
from sweep.execution.batch import stack, summarize_batch
from sweep.execution.planning import Shape
from sweep.physics.numerics import float64
from sweep.study.metric_names import METRICS
from sweep.study.workload import SHARED_PATHS, Workload, sample_batch_shape, workload_params

#: A workload with no requests: padding that ends at once. No user asks for one, so it is made
#: past the checks (at least one request) rather than through them.
NOTHING = Workload(arrival_rate=1.0, duration_s=None, num_requests=1)
object.__setattr__(NOTHING, "num_requests", 0)


def dispatch(params: list, reqs, seats: int, k_max: int, lanes: int, devices,
             max_steps, widest: int = 1, real: int | None = None) -> tuple:
    """Shard a call's simulations (their ``topology.Plan``s) over a 1-D mesh of ``devices``
    (axis ``sims``), run the same single-device compiled engine on every shard (asynchronously:
    the devices work at once), gather the EngineOutput on the host in mesh order, merge the
    servers of each simulation (``topology.run``), and summarize the same way.

    Not one SPMD program over the mesh: ``jit`` of the sharded batch and ``shard_map`` both
    compile a different HLO module, whose fusions (FMA contraction) changed the last bit of
    finish times for some simulations (measured; openxla/xla#41579); the same executable per
    shard keeps the rows byte-identical to one device.

    Simulations after the first ``real`` (default all) are padding: with plain designs only
    (one server each, the requests as given) they are not simulated, and their rows are zero."""
    def call(server_params, server_reqs, real=None):
        # Requests as device arrays, whichever composition stacked them (see ``warm``).
        server_reqs = jax.tree_util.tree_map(jnp.asarray, server_reqs)
        outs = _engine(_shards([stack(server_params), server_reqs], devices), seats, k_max,
                       lanes, max_steps, real=real)
        return jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]),
                                      *outs)

    # ``widest`` servers per simulation whatever the chunk holds: one compiled shape.
    out = topology.run(params, reqs, call, len(params) * widest, real)
    parts = [summarize_batch(o_d, r_d, p_d) for o_d, r_d, p_d in
             _shards([out, reqs, stack([p.system for p in params])], devices)]
    mets = {k: np.concatenate([np.asarray(m[k]) for m in parts]) for k in METRICS}
    return out, mets


def warm(shape: Shape, seats: int, k_max: int, devices, max_steps, plans: list, widest: int,
         paths: tuple[int, int] = SHARED_PATHS, closed: bool = False, sessions: bool = False,
         pauses: bool = False):
    """Compile a group's engine and summaries for the shapes of its calls (``widest`` servers
    per simulation, requests' paths of shape ``paths``; with the features of its first call's
    ``plans``' servers, and the closed loop's, sessions' or drawn pauses' where its requests
    have them) without simulating: compiled functions are cached, so its calls find them."""
    width = shape.size * widest
    shaped = sample_batch_shape(shape.slots, stack([workload_params(NOTHING, 0, 2, shape.slots,
                                                                    paths)] * width))

    def zeros(tree, m: int, xp=np):
        return jax.tree_util.tree_map(lambda x: xp.zeros((m,) + x.shape[1:], x.dtype), tree)

    # The features the requests switch on (``features.active``), as the call's will.
    reqs = zeros(shaped, width, jnp)
    reqs = reqs._replace(clients=reqs.clients.at[0].set(int(closed)),
                         turn=reqs.turn.at[0, 0].set(int(sessions)),
                         think=reqs.think.at[0, 0].set(float(pauses)))
    # Requests come as device arrays (sampled), plans and results as host arrays, as in the
    # calls: a sharded device array's shards have a type of their own, another compilation.
    # The first call's servers in its order, padded as it is (``topology.run``).
    servers = [x for p in plans for x in p.first][:width]
    servers += [plans[0].first[0]] * (width - len(servers))
    shards = _shards([stack(servers), reqs], devices)
    engine = _engine(shards, seats, k_max, shape.lanes, max_steps, compile_only=True)[0]
    # The summaries see whole simulations (servers merged), as in the calls.
    for o_d, r_d, p_d in _shards([zeros(engine.out_info, shape.size),
                                  zeros(shaped, shape.size, jnp),
                                  stack([plans[0].system] * shape.size)], devices):
        summarize_batch(o_d, r_d, p_d, compile_only=True)


def _shards(trees: list, devices) -> list[list]:
    """Every device's shard of each tree, split along the leading axis over a 1-D mesh."""
    sharding = NamedSharding(Mesh(np.array(devices), ("sims",)), PartitionSpec("sims"))
    placed = [jax.device_put(t, sharding) for t in trees]
    return [[jax.tree_util.tree_map(lambda x: _shard_on(x, d), t) for t in placed]
            for d in devices]


def _engine(shards: list, seats: int, k_max: int, lanes: int, max_steps,
            compile_only: bool = False, real: int | None = None) -> list:
    """The engine on every device's (params, requests) shard at once: each device compiles
    its own executable, on threads. Rows after the first ``real`` of all shards together
    are padding, not simulated. ``compile_only`` compiles (into the same cache a call uses)
    without simulating."""
    per = shards[0][0].max_batch.shape[0]

    @float64()
    def run_on(i, trees):
        count = per if real is None else min(max(real - i * per, 0), per)
        return simulate_batch(*trees, seats=seats, k_max=k_max, lanes=lanes,
                              max_steps=max_steps, count=count, compile_only=compile_only)

    with ThreadPoolExecutor(len(shards)) as pool:
        return list(pool.map(run_on, range(len(shards)), shards))


def _shard_on(x: jax.Array, device) -> jax.Array:
    return next(s.data for s in x.addressable_shards if s.device == device)
