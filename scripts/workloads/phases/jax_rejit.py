"""JAX re-jitting: a jitted step called with 8 shapes, each new shape traced and compiled again,
then 40 steps at that shape. Marks as recompile.py."""
import time
import jax
import jax.numpy as jnp
from marks import mark, note

with mark("start-up"):
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (1024, 1024))


@jax.jit
def step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(x @ w) ** 2)
    return w - 1e-3 * jax.grad(loss)(w)


for size in range(8):
    x = jax.random.normal(key, (256 + 64 * size, 1024))
    a = time.time_ns()
    w = step(w, x).block_until_ready()
    b = time.time_ns()
    w = step(w, x).block_until_ready()
    c = time.time_ns()
    note("compilation", a, b - (c - b))
    note("loop", b - (c - b), b)
    with mark("loop"):
        for _ in range(40):
            w = step(w, x)
        w.block_until_ready()
