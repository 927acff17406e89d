"""A Python program that drives the fake libcudart the way PyTorch drives the real one.

The library is loaded as Python extensions load theirs (ctypes.CDLL: dlopen with
RTLD_LOCAL), and every call is made through ctypes, which releases the GIL around it,
as PyTorch does around its operators. The lines that make the calls are marked with
`# SITE:<name>` comments: the tests find the expected file:line there.

Usage: pystack_app.py sites [steps] | stress [rounds] | bench [calls] [depth] | idle [ms]
       | sampled [ms] [depth] | loader [steps] [ms] | hang MARKER | gil [ms]
"""

import ctypes
import os
import sys
import threading

lib = ctypes.CDLL(os.environ["FAKE_CUDART"])
lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
DEVICE_TO_HOST = 2
HOST_TO_DEVICE = 1


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


lib.cudaLaunchKernel.argtypes = [
    ctypes.c_char_p,
    Dim3,
    Dim3,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
]
KERNEL = b"_Z7forwardPf"


def forward():
    # The fake takes the kernel's name for its function pointer.
    for _ in range(4):
        lib.cudaLaunchKernel(KERNEL, Dim3(64, 1, 1), Dim3(128, 1, 1), None, 0, None)


def device_buffer(n):
    p = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(p), n) == 0  # SITE:malloc
    return p


def read_loss(dev, host, n):
    # Like loss.item(): a blocking device-to-host copy.
    return lib.cudaMemcpy(host, dev, n, DEVICE_TO_HOST)  # SITE:item


def wait_for_gpu():
    # Like torch.cuda.synchronize() on the current stream.
    return lib.cudaStreamSynchronize(None)  # SITE:sync


def train_step(dev, host, n):
    upload = ctypes.create_string_buffer(n)
    lib.cudaMemcpy(dev, upload, n, HOST_TO_DEVICE)  # SITE:upload
    forward()
    wait_for_gpu()
    return read_loss(dev, host, n)


def sites(steps):
    n = 4096
    dev = device_buffer(n)
    host = ctypes.create_string_buffer(n)
    for _ in range(steps):
        assert train_step(dev, host, n) == 0
    print("done", steps)


# ---- gil: a pure-Python thread holds the GIL while the main thread makes CUDA calls ----


def hog(stop):
    # Pure Python, never a blocking call: holds the GIL but at the switch interval.
    x = 0
    while not stop.is_set():
        x += 1  # SITE:hog
    return x


def gil(ms):
    import time

    stop = threading.Event()
    t = threading.Thread(target=hog, args=(stop,), name="metrics")
    t.start()
    while t.native_id is None:
        time.sleep(0.001)
    print("hog tid", t.native_id, flush=True)
    end = time.perf_counter() + ms / 1000
    calls = 0
    while time.perf_counter() < end:
        # Each return from a call (ctypes released the GIL) waits for the hog.
        forward()
        wait_for_gpu()
        calls += 1
    stop.set()
    t.join()
    print("done gil", calls, flush=True)


# ---- idle: the host busy, then asleep, between two CUDA calls ----


def busy_host(ms):
    # Computing on the CPU with no CUDA call (a transform in the main process).
    import time

    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def sleepy_host(ms):
    # Off the CPU with no CUDA call (waiting for input).
    import time

    time.sleep(ms / 1000)


def idle(ms):
    wait_for_gpu()  # the thread makes a call, so the sampler knows it
    busy_host(ms)
    sleepy_host(ms)
    wait_for_gpu()
    print("done idle")


def sampled(ms, depth):
    # The cost of being sampled: a busy loop `depth` frames down for `ms`, after one
    # CUDA call (so the sampler knows the thread); prints the loop's iterations and the
    # CPU time of the library's sampler thread.
    def loop():
        wait_for_gpu()
        return busy_host(ms)

    iters = deep(depth, loop)
    cpu = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                if f.read().strip() != "gputrace-sample":
                    continue
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                cpu = int(f.read().split()[0])
        except OSError:
            pass
    print("iters %d" % iters)
    print("sampler_cpu_ns %d" % cpu)


# ---- loader: a training loop starved by its data loader's worker ----


def loader(steps, ms):
    # The loader lives in a package (site-packages/fakeloader.py beside this script):
    # while the loop waits in it, the user's line is ten frames up.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
    import fakeloader

    # One kernel a step (four back to back would make each burst look like steps).
    for _ in fakeloader.Loader(steps, ms):  # SITE:loader
        lib.cudaLaunchKernel(b"_Z4stepv", Dim3(64, 1, 1), Dim3(128, 1, 1), None, 0, None)
        wait_for_gpu()
    print("done loader")


# ---- hang: a kernel that never completes, the host waiting for it ----


def hang(marker):
    # With FAKE_CUDA_STUCK=_Z5stuckv the kernel never completes and the wait never ends.
    forward()
    lib.cudaLaunchKernel(b"_Z5stuckv", Dim3(7, 1, 1), Dim3(128, 1, 1), None, 0, None)
    with open(marker, "w") as f:
        f.write("stuck\n")
    wait_for_gpu()
    print("done hang")


# ---- stress: frames that change under other threads' captures ----


def deep(k, f):
    # Deep recursion: the innermost frames are far from the thread's first.
    if k == 0:
        return f()
    return deep(k - 1, f)


def gen_syncs(n):
    # A generator's frame lives in the generator object, not on the thread's stack.
    for _ in range(n):
        yield lib.cudaStreamSynchronize(None)  # SITE:gen


def worker(rounds, depth):
    for i in range(rounds):
        deep(depth + i % 7, wait_for_gpu)
        for r in gen_syncs(3):
            assert r == 0


def churn(stop):
    # Threads starting and ending while others are captured.
    while not stop.is_set():
        t = threading.Thread(target=worker, args=(2, 5))
        t.start()
        t.join()


def forever():
    # A daemon thread still in calls while the interpreter finalises.
    while True:
        deep(50, wait_for_gpu)


def stress(rounds):
    stop = threading.Event()
    churner = threading.Thread(target=churn, args=(stop,))
    churner.start()
    workers = [threading.Thread(target=worker, args=(rounds, 200 + 50 * i)) for i in range(4)]
    for w in workers:
        w.start()
    for _ in range(3):
        threading.Thread(target=forever, daemon=True).start()
    # The main thread recurses deeper than the stack depth kept.
    sys.setrecursionlimit(10000)
    deep(2000, wait_for_gpu)
    for w in workers:
        w.join()
    stop.set()
    churner.join()
    print("done stress")
    # Exit with the daemon threads mid-call: the interpreter finalises under them.


def bench(calls, depth):
    # ns per cudaStreamSynchronize made `depth` Python frames down (the fake returns
    # at once: what is left is the call's own cost, ctypes', and the tracer's).
    import time

    def loop():
        sync = lib.cudaStreamSynchronize
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            sync(None)  # SITE:bench
        return time.perf_counter_ns() - t0

    ns = deep(depth, loop)
    print("ns_per_call %.1f" % (ns / calls))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "sites"
    if mode == "sites":
        sites(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    elif mode == "stress":
        stress(int(sys.argv[2]) if len(sys.argv) > 2 else 50)
    elif mode == "idle":
        idle(int(sys.argv[2]) if len(sys.argv) > 2 else 300)
    elif mode == "gil":
        gil(int(sys.argv[2]) if len(sys.argv) > 2 else 400)
    elif mode == "sampled":
        sampled(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "loader":
        loader(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "bench":
        bench(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "hang":
        hang(sys.argv[2])
    else:
        sys.exit("unknown mode " + mode)
