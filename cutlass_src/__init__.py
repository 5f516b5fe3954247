"""CuTe DSL kernels (nvidia-cutlass-dsl 4.8), and the plumbing they share.

Per problem a teaching twin (``<problem>.py``), the tuned kernels (``<problem>_<algorithm>.py``;
the GEMM family's base in ``gemm_base.py``, its host side in ``gemm_launch.py``) and one planner
per problem in ``dispatch.py``.

This file holds what every kernel module needs and nothing problem-specific:

- ``unavailable()``: why the DSL cannot be used here (``None`` when it can);
- ``cutlass_dtype(torch_dtype)``: the element type a kernel is compiled for;
- ``compile_kernel(key, fn, *args)``: ``cute.compile`` once per signature, cached in-process and
  on disk (``~/.cache/kernel-layers/cute``, exported objects reloaded by later runs), with the
  compile seconds, the PTX and (through ``ptxas -v``) the register/spill facts kept beside it;
- ``use_tvm_ffi()``: whether the compiled functions are called through apache-tvm-ffi
  (torch tensors passed straight in; the cheaper call) or through ``from_dlpack`` tensors made in
  ``prepare``;
- ``stream_arg()`` / ``fake_stream()``: the stream argument for either calling convention.

Kernels are compiled against *fake* tensors with symbolic sizes (``cute.sym_int``), so one
compile serves every size of a signature, and the same compile works on a machine with no GPU
(``CUTE_DSL_ARCH=sm_90a``).
"""
from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import time

from kltools.loc_marks import compile_step

_REASON: list = []
_LOCK = threading.Lock()
_CACHE: dict = {}
_DUMP: list = []
ARCH = "sm_90a"
#: whether compile_kernel reads and writes kernels kept on disk (``inspect`` turns it off: it wants
#: the compiler's own artifacts)
DISK_CACHE = True


def unavailable() -> str | None:
    """None when the CuTe DSL can compile here, else the reason."""
    if _REASON:
        return _REASON[0]
    reason = None
    if importlib.util.find_spec("cutlass") is None:
        reason = "nvidia-cutlass-dsl is not installed (pip install 'kernel-layers[cute]')"
    else:
        try:
            os.environ.setdefault("CUTE_DSL_ARCH", _arch_from_device())
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
            ver = getattr(cutlass, "__version__", "?")
            if not str(ver).startswith("4."):
                reason = f"nvidia-cutlass-dsl {ver} found; these kernels target 4.8"
        except Exception as e:  # a broken install must not take the harness down
            reason = f"nvidia-cutlass-dsl failed to import: {type(e).__name__}: {e}"
    _REASON.append(reason)
    return reason


def _arch_from_device() -> str:
    """sm_90a unless a GPU of another generation is present (its own arch then)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    except Exception:
        pass
    return ARCH


# the DSL reads its target when it is first imported: sm_90a unless a GPU says otherwise
os.environ.setdefault("CUTE_DSL_ARCH", _arch_from_device())


@functools.lru_cache(maxsize=None)
def use_tvm_ffi() -> bool:
    """Call through apache-tvm-ffi when it is installed: torch tensors go straight in and the
    stream is torch's current one, the cheaper call; else ``from_dlpack`` tensors made in prepare."""
    return importlib.util.find_spec("tvm_ffi") is not None


def cutlass_dtype(torch_dtype):
    import cutlass
    import torch

    table = {torch.float32: cutlass.Float32, torch.float16: cutlass.Float16,
             torch.bfloat16: cutlass.BFloat16}
    if torch_dtype not in table:
        raise TypeError(f"dtype: {torch_dtype} is not one of float32, float16, bfloat16")
    return table[torch_dtype]


def fake_stream():
    from cutlass.cute.runtime import make_fake_stream

    return make_fake_stream(use_tvm_ffi_env_stream=use_tvm_ffi())


def stream_args() -> tuple:
    """Trailing stream argument of a call: none through tvm-ffi (it uses torch's current stream)."""
    if use_tvm_ffi():
        return ()
    import cuda.bindings.driver as cuda
    import torch

    return (cuda.CUstream(torch.cuda.current_stream().cuda_stream),)


def to_cute(t, align: int, leading_dim: int | None = None):
    """A torch tensor as the compiled function takes it: itself through tvm-ffi, else a
    from_dlpack tensor with a dynamic layout (made once, in prepare, outside the timed call)."""
    if use_tvm_ffi():
        return t
    from cutlass.cute.runtime import from_dlpack

    ct = from_dlpack(t.detach(), assumed_align=align)
    if leading_dim is None:
        leading_dim = t.dim() - 1
    return ct.mark_layout_dynamic(leading_dim=leading_dim)


class Compiled:
    """A compiled CuTe function and its facts."""

    def __init__(self, fn, compile_s: float, ptx: str | None, key):
        self.fn = fn
        self.compile_s = compile_s
        self.ptx = ptx
        self.key = key
        self.from_disk = False
        self._facts = None

    def facts(self) -> dict:
        """compile_s, registers, spills, smem (ptxas -v on the generated PTX) for sm_90a."""
        if self._facts is None:
            facts = {"compile_s": round(self.compile_s, 3), "arch": os.environ.get("CUTE_DSL_ARCH", ARCH),
                     "call": "tvm-ffi" if use_tvm_ffi() else "from_dlpack"}
            if self.from_disk:
                facts["from_disk"] = True
            if self.ptx:
                try:
                    facts.update(ptx_facts(self.ptx, facts["arch"]))
                except Exception as e:
                    facts["ptxas_error"] = f"{type(e).__name__}: {e}"[:300]
            else:
                facts["ptxas_error"] = "no PTX kept by the compiler"
            self._facts = facts
        return dict(self._facts)


def ptx_facts(ptx: str, arch: str) -> dict:
    """``ptxas -v`` facts of the DSL's PTX. The DSL (4.8.1) writes PTX ISA 9.4, newer than some
    installed ptxas accept; the retry restates the ISA version as the newest this ptxas takes (the
    kernels use no instruction newer than sm_90a's), and the facts say so."""
    from kltools.ptxas import ptxas_info, summarize

    try:
        return summarize(ptxas_info(ptx, arch))
    except RuntimeError as e:
        m = re.search(r"current version is '(\d+\.\d+)'", str(e))
        if not m:
            raise
        old = re.search(r"^\.version (\S+)", ptx, flags=re.M)
        out = summarize(ptxas_info(re.sub(r"^\.version \S+", f".version {m.group(1)}", ptx,
                                          count=1, flags=re.M), arch))
        out["ptx_isa_restated"] = f"{old.group(1) if old else '?'} -> {m.group(1)}"
        return out


def _dump_dir() -> str:
    """The folder the DSL writes kept PTX to (this process's compiles; the PTX is read into memory
    right after each compile). Removed when the process exits, so runs leave nothing in /tmp."""
    if not _DUMP:
        path = tempfile.mkdtemp(prefix="kl-cute-ptx-")
        _DUMP.append(path)
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return _DUMP[0]


def _source_digest() -> str:
    """What a compiled kernel depends on besides its key: every source of this package, the DSL's
    version, the target arch and the calling convention."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    try:
        h.update(metadata.version("nvidia-cutlass-dsl").encode())
    except metadata.PackageNotFoundError:
        pass
    h.update(os.environ.get("CUTE_DSL_ARCH", ARCH).encode())
    h.update(b"tvm-ffi" if use_tvm_ffi() else b"dlpack")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _disk_dir() -> str | None:
    """The folder of compiled kernels kept across processes (``~/.cache/kernel-layers/cute/<digest>``),
    or None where it cannot be used. Only the tvm-ffi calling convention is kept: a loaded object
    is then called exactly like the compiled function (torch tensors in)."""
    if not use_tvm_ffi():
        return None
    from kltools.cache import cache_dir
    path = str(cache_dir("cute", _source_digest()[:24]))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path


def _disk_name(key) -> str:
    import hashlib

    return "k" + hashlib.sha256(repr(key).encode()).hexdigest()[:24]


def _load_from_disk(key):
    """(function, ptx) of a kernel compiled by an earlier process, or None."""
    folder = _disk_dir() if DISK_CACHE else None
    if folder is None:
        return None
    name = _disk_name(key)
    obj = os.path.join(folder, name + ".o")
    if not os.path.isfile(obj):
        return None
    try:
        import cutlass.runtime as rt

        fn = rt.load_module(obj, enable_tvm_ffi=True)[name]
    except Exception:
        return None                       # unreadable or stale: compile again (and overwrite)
    ptx = None
    try:
        with open(os.path.join(folder, name + ".ptx")) as f:
            ptx = f.read()
    except OSError:
        pass
    return fn, ptx


def _save_to_disk(key, fn_c, ptx) -> None:
    """Export the compiled function's host code and cubin as one object file (atomic rename: a
    parallel worker compiling the same key writes the same bytes)."""
    folder = _disk_dir() if DISK_CACHE else None
    if folder is None:
        return
    name = _disk_name(key)
    try:
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}")
        fn_c.export_to_c(tmp + ".o", name)
        os.replace(tmp + ".o", os.path.join(folder, name + ".o"))
        if ptx:
            with open(tmp + ".ptx", "w") as f:
                f.write(ptx)
            os.replace(tmp + ".ptx", os.path.join(folder, name + ".ptx"))
    except Exception:
        pass                              # the cache is an optimisation: never fail a compile on it


@compile_step
def compile_kernel(key, fn, *args) -> Compiled:
    """``cute.compile(fn, *args)`` once per ``key`` (a hashable signature): cached in-process, and
    on disk across processes (the DSL's own file cache does not cover ``cute.compile``). A kernel
    loaded from disk reports ``compile_s`` as the load time and ``from_disk``."""
    unavailable()
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        t0 = time.perf_counter()
        hit = _load_from_disk(key)
        if hit is not None:
            c = Compiled(hit[0], time.perf_counter() - t0, hit[1], key)
            c.from_disk = True
            _CACHE[key] = c
            return c
        import cutlass.cute as cute

        opts = f"--keep-ptx --dump-dir {_dump_dir()}"
        if use_tvm_ffi():
            opts += " --enable-tvm-ffi"
        t0 = time.perf_counter()
        fn_c = cute.compile(fn, *args, options=opts)
        dt = time.perf_counter() - t0
        ptx = None
        try:
            ptx = fn_c.__ptx__
        except Exception:
            ptx = None
        _save_to_disk(key, fn_c, ptx)
        c = Compiled(fn_c, dt, ptx, key)
        _CACHE[key] = c
        return c


@compile_step
def cached(key) -> Compiled | None:
    return _CACHE.get(key)


def align_of(*ptrs_and_bytes: int) -> int:
    """Largest power of two (<= 16) dividing every address / byte stride given."""
    a = 16
    for p in ptrs_and_bytes:
        while a > 1 and int(p) % a:
            a //= 2
    return a
