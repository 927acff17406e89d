"""A jitted JAX loop: traced with no code change."""
import json, time
import jax, jax.numpy as jnp

@jax.jit
def f(w, x):
    return jnp.tanh(x @ w) @ w.T

k = jax.random.PRNGKey(0)
w = jax.random.normal(k, (2048, 2048))
x = jax.random.normal(k, (512, 2048))
for _ in range(50):
    x = f(w, x)
x.block_until_ready()
host = jnp.asarray(list(range(1000)), dtype=jnp.float32)  # a pageable host->device copy
print(json.dumps({"workload": "jax", "devices": str(jax.devices()), "checksum": float(x.sum() + host.sum())}))
