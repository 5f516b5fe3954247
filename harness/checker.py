"""The checker: a separate process that owns the float64 references.

An implementation's code runs in the worker; the reference it is judged against never exists
there. For each check the worker sends the checker the case, the seed, the implementation's
inputs and its output (CUDA tensors through CUDA IPC, CPU tensors through shared memory; no copy).
The checker regenerates the pristine inputs from the seed, compares them with the ones the
implementation held (a mutated input fails, padding included), computes the reference and the
per-element bound in float64 (cached per case and seed: every seed of the case in hand, as
memory allows), and returns the verdict. An output whose fingerprint (``output_check.fingerprint``)
equals that of an output it passed on the same case and seed passes without the reference: the
timing's checks of its first and last timed launch, bit for bit what the parallel phase verified,
compute no float64 reference (other bits: the whole check). The process is a fresh interpreter (``python -m
harness.checker``) that imports only the harness's problems and checks - so nothing a plugin or a
backend does to the worker (walking frames, patching harness functions) reaches the verdict.
"""
from __future__ import annotations

import threading
import time
import traceback

CHECK_TIMEOUT_S = 900.0


class CheckerError(RuntimeError):
    """The checker process died or failed on a request."""


class CheckerDied(CheckerError):
    """The checker process is gone or died during a request (killed and reaped: the next
    ``get`` starts a fresh one)."""


def _bytes(t):
    import torch
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _mutation(names, got, pristine) -> str | None:
    import torch

    from .output_check import same_bits
    for name, t, p in zip(names, got, pristine):
        if not isinstance(t, torch.Tensor):
            continue
        if t.dtype != p.dtype or tuple(t.shape) != tuple(p.shape) or t.stride() != p.stride():
            return f"input {name!r} changed its dtype, shape or strides"
        a, b = _bytes(t), _bytes(p)
        if a.numel() != b.numel() or not torch.equal(a, b):
            inside = same_bits(t, p)
            where = " outside its view (in the padding of its storage)" if inside else ""
            return f"input {name!r} was modified by the implementation{where}"
    return None


def serve(conn, device: str) -> None:
    """The checker's loop: one request, one answer, until ``None`` arrives. A request that cannot
    even be unpacked (the GPU out of memory as the worker's tensors are opened) is answered with
    the error: the checker goes on."""
    import torch
    import torch.multiprocessing  # noqa: F401  (tensor reductions for the pipe)
    from multiprocessing.reduction import ForkingPickler

    if device == "cuda":
        torch.cuda.init()
    threads = __import__("os").environ.get("KL_CHECKER_THREADS")
    if threads:  # the worker's share of the cores (parallel workers each have a checker)
        torch.set_num_threads(int(threads))
    cache: dict = {}
    while True:
        try:
            buf = conn.recv_bytes()
        except EOFError:
            return
        try:
            msg = ForkingPickler.loads(buf)
            if msg is None:
                return
            res = _release(cache, device) if msg.get("release") else _answer(msg, device, cache)
        except Exception as e:
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        msg = buf = None  # let go of the worker's tensors before answering
        conn.send(res)


def _release(cache: dict, device: str) -> dict:
    """Drop the cached reference and give the allocator's cached GPU memory back (the worker asks
    after a large case, and before a retry after running out of memory)."""
    import gc

    import torch
    cache.clear()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"ok": True}


def _entry_bytes(entry) -> int:
    """The bytes one cached reference holds (pristine inputs, reference, bound, systematic part)."""
    import torch

    n = 0
    for x in entry:
        for t in (x if isinstance(x, (tuple, list)) else (x,)):
            if isinstance(t, torch.Tensor):
                n += t.numel() * t.element_size()
    return n


def _free_bytes(device: str) -> int:
    if device == "cuda":
        import torch
        return int(torch.cuda.mem_get_info()[0])
    import os
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _make_room(cache: dict, key: tuple, device: str) -> None:
    """Before a new reference: keep the other seeds of the same case (every row of a case checks
    the same seeds, so each seed's float64 reference is computed once a case, not once a row)
    while they and one more entry of their size fit in a quarter of the free memory (parallel
    workers share the device, and the reference of the largest cases takes ~10 GB); drop every
    entry of another case."""
    same = [k for k in cache if k[:2] == key[:2]]
    if len(same) != len(cache):
        cache.clear()
    elif cache:
        per = max(_entry_bytes(v) for v in cache.values())
        if (len(cache) + 1) * per > _free_bytes(device) // 4:
            cache.clear()
    if not cache and device == "cuda":
        import torch
        torch.cuda.empty_cache()


def _answer(msg: dict, device: str, cache: dict) -> dict:
    """The verdict on one output: the implementation's inputs against the pristine ones, then
    its output (when one is sent) against the float64 reference (cached per case, seed and
    declared roundings). ``expect``: the fingerprint of an output this case and seed already
    passed with - an output of exactly those bits passes without the reference (computed only
    when needed); ``fingerprint``: return a passing output's fingerprint (``details["bits"]``)."""
    from . import problems
    from .case import Case
    from .output_check import check_output, fingerprint, reference_stats

    problem = problems.get(msg["problem"])
    case = Case.from_json(msg["case"])
    key = (problem.name, case.id, int(msg["seed"]), int(msg.get("roundings", 0)))
    times = {}   # where the check's seconds went (no reference_s: the reference was in hand)
    t = time.perf_counter()
    if key not in cache:
        _make_room(cache, key, device)
        cache[key] = (problem.make_inputs(case, device, int(msg["seed"])),)
    pristine = cache[key][0]
    res = {"ok": True}
    if msg.get("inputs") is not None:
        m = _mutation(problem.input_names, msg["inputs"], pristine)
        if m:
            res = {"ok": False, "reason": m}
    times["inputs_s"], t = _since(t, device)
    out = msg.get("output")
    if res["ok"] and out is not None:   # None: a check of the inputs alone
        if msg.get("expect") and fingerprint(out) == msg["expect"]:
            times["fingerprint_s"], t = _since(t, device)
            res["details"] = {"checker_s": times, "same_bits": True}
            return res
        if len(cache[key]) == 1:   # the reference, its bound and figures, once a case, seed and roundings
            ref, bound, systematic = problem.reference_and_bound(pristine, case, key[3])
            cache[key] = (pristine, ref, bound, systematic, reference_stats(case, ref))
            times["reference_s"], t = _since(t, device)
        _, ref, bound, systematic, stats = cache[key]
        res = check_output(problem, case, out, ref, bound=bound, systematic=systematic, stats=stats).to_dict()
        times["compare_s"], t = _since(t, device)
        if res["ok"] and msg.get("fingerprint"):
            res.setdefault("details", {})["bits"] = fingerprint(out)
            times["fingerprint_s"], t = _since(t, device)
    res.setdefault("details", {})["checker_s"] = times
    return res


def _since(t0: float, device: str) -> tuple[float, float]:
    """Seconds since ``t0`` with the device's work finished (a synchronize on the GPU), and now."""
    if device == "cuda":
        import torch
        torch.cuda.synchronize()
    t = time.perf_counter()
    return round(t - t0, 4), t


class Checker:
    """The worker's handle on one checker process (started on first use).

    The checker is ``python -m harness.checker`` - a fresh interpreter, whatever the worker's own
    main module is (a script, stdin, a notebook) - connected back over a local socket with a
    one-time key."""

    def __init__(self, device: str):
        import secrets
        import subprocess
        import sys
        from multiprocessing.connection import Listener

        import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

        self.device = device
        key = secrets.token_bytes(32)
        listener = Listener(family="AF_UNIX", authkey=key)
        root = str(__import__("pathlib").Path(__file__).resolve().parent.parent)
        env = dict(__import__("os").environ)
        env["PYTHONPATH"] = root + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.checker", device],
                                     stdin=subprocess.PIPE, env=env, cwd=root)
        import multiprocessing
        # CPU tensors travel as file descriptors, fetched from this process's resource sharer,
        # which admits processes that hold its authentication key
        share_key = multiprocessing.current_process().authkey
        self.proc.stdin.write(f"{listener.address}\n{key.hex()}\n{share_key.hex()}\n".encode())
        self.proc.stdin.close()
        listener._listener._socket.settimeout(120)
        try:
            self.conn = listener.accept()
        except Exception as e:
            self.proc.kill()
            raise CheckerError(f"the checker process did not start: {e}") from None
        finally:
            listener.close()
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the checker process has used so far (Linux's /proc; None
        elsewhere): a row's verification cost without trusting the wall clock of a loaded machine."""
        return process_cpu_s(self.proc.pid)

    def check(self, problem: str, case, seed: int, inputs, output, roundings: int = 0,
              expect: str | None = None, fingerprint: bool = False) -> dict:
        import torch
        if isinstance(output, torch.Tensor) and output.device.type == "cpu" and not output.is_shared():
            output = output.clone().share_memory_()
        ins = []
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and not t.is_shared():
                t.share_memory_()
            ins.append(t)
        with self.lock:
            res = self._ask({"problem": problem, "case": case.to_json(), "seed": int(seed),
                             "roundings": int(roundings), "inputs": ins, "output": output,
                             "expect": expect, "fingerprint": bool(fingerprint)})
        if "error" in res:
            raise CheckerError(f"the checker failed: {res['error']}")
        return res

    def release(self) -> None:
        """The checker drops its cached reference and gives its cached GPU memory back."""
        with self.lock:
            if self.alive():
                self._ask({"release": True})

    def _ask(self, msg: dict) -> dict:
        """One request, one answer (under the lock). A checker that is gone, dies or breaks the
        connection is killed and reaped (``get`` then starts a fresh one) and the request raises
        ``CheckerError`` - never a BrokenPipeError on the next request."""
        if not self.alive():
            raise CheckerDied(f"the checker process is gone (exit code {self.proc.returncode})")
        try:
            self.conn.send(msg)
            if not self.conn.poll(CHECK_TIMEOUT_S):
                self._end()
                raise CheckerError(f"the checker gave no verdict in {CHECK_TIMEOUT_S:g} s")
            return self.conn.recv()
        except (EOFError, OSError):   # BrokenPipeError and ConnectionError are OSErrors
            code = self.proc.poll()
            self._end()
            raise CheckerDied(f"the checker process died (exit code {code})") from None

    def _end(self) -> None:
        self.proc.kill()
        self.proc.wait()
        try:
            self.conn.close()
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(10)
        except Exception:
            pass
        if self.alive():
            self.proc.kill()


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` from /proc/<pid>/stat, or None."""
    import os
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


_CHECKERS: dict[str, Checker] = {}


def get(device: str) -> Checker:
    """This process's checker for ``device`` ('cuda' or 'cpu'), started on first use."""
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    c = _CHECKERS.get(dev)
    if c is None or not c.alive():
        c = _CHECKERS[dev] = Checker(dev)
    return c


def _main() -> None:
    import multiprocessing
    import sys
    from multiprocessing.connection import Client

    address = sys.stdin.readline().strip()
    key = bytes.fromhex(sys.stdin.readline().strip())
    multiprocessing.current_process().authkey = bytes.fromhex(sys.stdin.readline().strip())
    conn = Client(address, family="AF_UNIX", authkey=key)
    serve(conn, sys.argv[1] if len(sys.argv) > 1 else "cpu")


if __name__ == "__main__":
    _main()
