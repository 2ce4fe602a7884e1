"""PyTorch's side of the TCPStore interop tests (comm/tests/store_torch_interop.rs).

    torch_peer.py version                  print torch's version
    torch_peer.py server libuv|legacy      start torch's TCPStore server, print "PORT <n>"
    torch_peer.py client <port>            connect torch's TCPStore client to our server

Either way the script then plays its part of the exchange with the Rust test
through the store itself: it waits for the keys the Rust client sets, checks
their values, sets its own for the Rust side to check, and exits 0 when all
is well, once the Rust test closes its standard input (a failed check exits
non-zero with the reason on stderr).
"""

import sys
import threading
import time
import warnings
from datetime import timedelta

# The CPU-only use of a CUDA wheel warns about NumPy, which is not installed.
warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT = timedelta(seconds=60)


def expect(what, got, want):
    if got != want:
        sys.exit(f"torch_peer: {what}: got {got!r}, want {want!r}")


def check_rust_side(store):
    """The keys the Rust client set before it set rust/ready."""
    store.wait(["rust/ready"])
    expect("get rust/set", store.get("rust/set"), b"from-rust")
    expect("get rust/counter", store.get("rust/counter"), b"7")
    expect("get rust/cas", store.get("rust/cas"), b"v2")
    expect("get rust/bin", store.get("rust/bin"), bytes(range(256)))
    expect("get rust/empty", store.get("rust/empty"), b"")
    expect("get rust/app", store.get("rust/app"), b"abcd")
    expect("multi_get rust/m*", store.multi_get(["rust/m2", "rust/m1"]), [b"two", b"one"])
    expect("check rust/set+counter", store.check(["rust/set", "rust/counter"]), True)
    expect("check rust/deleted", store.check(["rust/deleted"]), False)
    # rust/num_keys holds the count the Rust client saw; rust/ready came after.
    expect("num_keys", store.num_keys(), int(store.get("rust/num_keys")) + 1)
    expect("add to rust/counter", store.add("rust/counter", 10), 17)


def set_python_side(store):
    """The keys the Rust client checks after py/ready."""
    store.set("py/set", "from-python")
    expect("add py/counter", store.add("py/counter", 3), 3)
    expect("compare_set py/cas (missing)", store.compare_set("py/cas", "", "a"), b"a")
    expect("compare_set py/cas (mismatch)", store.compare_set("py/cas", "zzz", "b"), b"a")
    store.set("py/bin", bytes(reversed(range(256))))
    store.set("py/tmp", "gone soon")
    expect("delete_key py/tmp", store.delete_key("py/tmp"), True)
    expect("delete_key py/tmp again", store.delete_key("py/tmp"), False)
    store.multi_set(["py/m1", "py/m2"], ["uno", "dos"])
    store.append("py/app", "x")
    store.append("py/app", "yz")
    store.set("py/ready", "1")
    # py/late comes later, so that the Rust client's WAIT usually has to wait
    # for it (its outcome is the same either way).
    time.sleep(0.5)
    store.set("py/late", "late")


def wait_times_out_then_works(store):
    start = time.monotonic()
    try:
        store.wait(["py/never"], timedelta(milliseconds=200))
    except Exception as e:  # DistStoreError
        took = time.monotonic() - start
        # How much later than 0.2 s depends on the machine: not checked.
        if took < 0.19:
            sys.exit(f"torch_peer: wait timed out after {took:.3f}s, before its 0.2s")
        if "timeout" not in str(e).lower():
            sys.exit(f"torch_peer: unexpected wait error: {e}")
    else:
        sys.exit("torch_peer: wait for a key nobody sets returned")
    store.set("py/after-timeout", "ok")
    expect("get after a cancelled wait", store.get("py/after-timeout"), b"ok")


def extended_api(store):
    """Queues, list_keys and barrier against our server."""
    expect("queue_len empty", store.queue_len("py/q"), 0)
    store.queue_push("py/q", "first")
    store.queue_push("py/q", "second")
    expect("queue_len", store.queue_len("py/q"), 2)
    expect("queue_pop", store.queue_pop("py/q"), b"first")
    expect("queue_pop", store.queue_pop("py/q", False), b"second")

    other = store.clone()
    # The push comes late, so that the pop usually blocks first (daemon: a
    # failure exits without waiting for it).
    pusher = threading.Thread(target=lambda: (time.sleep(0.3), other.queue_push("py/q2", "x")), daemon=True)
    pusher.start()
    expect("blocking queue_pop", store.queue_pop("py/q2", True), b"x")
    pusher.join()

    keys = store.list_keys()
    for k in ("py/set", "rust/set", "rust/ready"):
        if k not in keys:
            sys.exit(f"torch_peer: list_keys lacks {k}: {sorted(keys)}")

    store.barrier("py/b1", 1)
    arrived = []
    peer = store.clone()
    # daemon: a failure exits without waiting for the barrier.
    t = threading.Thread(target=lambda: (peer.barrier("py/b2", 2), arrived.append(1)), daemon=True)
    t.start()
    # Gives a wrong barrier the time to let the first rank through alone (a
    # right one never does, however long this lasts).
    time.sleep(0.2)
    expect("barrier released early", arrived, [])
    store.barrier("py/b2", 2)
    t.join(timeout=30)
    expect("barrier released", arrived, [1])


def shared_with_rust(store, queues):
    """A queue each way and a barrier, shared with the Rust client."""
    if queues:
        expect("queue_pop from rust", store.queue_pop("rust/q", True), b"r1")
        expect("queue_pop from rust", store.queue_pop("rust/q", True), b"r2")
        store.queue_push("py/to-rust", "p1")
    store.barrier("both/b", 2)


def exchange(store, extended, queues):
    check_rust_side(store)
    set_python_side(store)
    wait_times_out_then_works(store)
    if extended:
        extended_api(store)
    shared_with_rust(store, queues)
    store.set("py/done", "1")
    # A server must outlive the Rust client's last request: the Rust test
    # closes our stdin when it is done with the store.
    sys.stdin.read()


def main():
    cmd = sys.argv[1]
    if cmd == "version":
        print(torch.__version__, flush=True)
        return
    if cmd == "server":
        use_libuv = sys.argv[2] == "libuv"
        store = dist.TCPStore(
            "127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False, use_libuv=use_libuv
        )
        expect("libuvBackend", store.libuvBackend, use_libuv)
        print(f"PORT {store.port}", flush=True)
        # torch's legacy server has no queues.
        exchange(store, extended=False, queues=use_libuv)
    elif cmd == "client":
        store = dist.TCPStore("127.0.0.1", int(sys.argv[2]), None, False, TIMEOUT)
        exchange(store, extended=True, queues=True)
    else:
        sys.exit(f"torch_peer: unknown command {cmd}")


if __name__ == "__main__":
    main()
