"""jax_dispatch: a JAX loop whose Python thread does per-step host work before dispatching a small
jitted step. XLA launches from its own runtime threads, which wait while the Python thread
computes: cpu_bound (the dispatching thread), never data_starvation."""
import json, time
import numpy as np
import jax, jax.numpy as jnp


@jax.jit
def step(w, x):
    h = jnp.tanh(x @ w)
    return w - 1e-3 * (x.T @ h) / x.shape[0]


rng = np.random.default_rng(0)
w = jnp.asarray(rng.standard_normal((512, 512), dtype=np.float32))
w = step(w, jnp.ones((256, 512), jnp.float32))
w.block_until_ready()
t0 = time.perf_counter()
steps = 0
while time.perf_counter() - t0 < 8.0:
    batch = np.sort(rng.standard_normal((256, 512), dtype=np.float32), axis=1)  # host work per step
    w = step(w, jnp.asarray(batch))
    steps += 1
w.block_until_ready()
print(json.dumps({"workload": "jax_dispatch", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
