"""TileLang kernels (tilelang 0.1.15): one twin file per problem, variants <problem>_<algorithm>.py,
one dispatch.py (the planner).

This file holds the plumbing every kernel module shares and nothing problem-specific:

- ``unavailable()``: why TileLang cannot compile here (``None`` when it can);
- ``target()``: the CUDA target a kernel is compiled for (the GPU's own architecture, ``sm_90a``
  on a Hopper GPU and on a machine without one: TileLang compiles with ``nvcc``, no GPU needed);
- ``compile_kernel(key, build)``: ``tilelang.compile`` once per key (kernel, shape class, dtype),
  kept in memory; on disk, TileLang's own kernel cache, pointed at the project's cache folder
  (``kltools.cache.cache_dir("tilelang")``), keeps the compiled library keyed by the lowered
  kernel's text (the source and the plan's constants), the target (the arch), the pass
  configuration and TileLang's version, so a later process loads it instead of recompiling.
  The first-call compile seconds of this process are kept beside the kernel;
- ``Compiled.facts()`` (compile-only): registers, spills and shared memory from ``ptxas -v`` on
  the PTX of the generated CUDA source (the same tool the other layers use; the PTX that
  TileLang's own nvcc compile keeps in its cubin, so no second nvcc run), plus
  ``compile_s``; ``Compiled.launch_facts()`` (a launch on a GPU): registers and stack bytes
  read from the cubin TileLang built (no second compile).

Kernels use dynamic dimensions (``T.dynamic``): one compile serves every size of a shape class.
"""
from __future__ import annotations

import importlib.util
import threading
import time

_LOCK = threading.Lock()
_CACHE: dict = {}
_REASON: list = []
ARCH = "sm_90a"

TL_DTYPE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def unavailable() -> str | None:
    """None when TileLang can compile here, else the reason (one line)."""
    if _REASON:
        return _REASON[0] or None
    reason = None
    if importlib.util.find_spec("tilelang") is None:
        reason = "tilelang is not installed (pip install 'kernel-layers[tilelang]')"
    else:
        try:
            import tilelang  # noqa: F401
            import tilelang.language  # noqa: F401
        except Exception as e:  # a broken install must not take the harness down
            reason = f"tilelang failed to import: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        else:
            if _nvcc() is None:
                reason = "TileLang compiles with nvcc, which is neither on PATH nor in CUDA_HOME/bin"
    _REASON.append(reason or "")
    return reason


def _nvcc() -> str | None:
    import os
    import shutil

    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def arch() -> str:
    """sm_XY of the GPU in this process (``a`` for Hopper's wgmma/TMA features), else sm_90a."""
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}" + ("a" if major == 9 else "")
    except Exception:
        pass
    return ARCH


def target() -> dict:
    return {"kind": "cuda", "arch": arch()}


def dtype_name(torch_dtype) -> str:
    name = str(torch_dtype).replace("torch.", "")
    if name not in TL_DTYPE:
        raise TypeError(f"dtype: TileLang kernels here take float32, float16 or bfloat16, not {name}")
    return TL_DTYPE[name]


class Compiled:
    """A compiled kernel and what is known about it."""

    def __init__(self, kernel, compile_s: float, key):
        self.kernel = kernel
        self.compile_s = compile_s
        self.key = key
        self._facts = None

    def source(self) -> str:
        return self.kernel.get_kernel_source()

    def launch_facts(self) -> dict:
        """compile_s, and registers and stack bytes from the cubin in TileLang's binary cache."""
        info = {"compile_s": round(self.compile_s, 3)}
        try:
            info.update(_cubin_facts(_cubin(self.kernel)))
        except Exception as e:  # the facts are reported, never needed to run
            info["facts_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        return info

    def facts(self) -> dict:
        """compile_s, registers, spills, smem (ptxas's static figure; TileLang's shared buffers
        are dynamic shared memory, sized at launch), from ``ptxas -v`` on the PTX that TileLang's
        own nvcc compile left in its cubin (``_ptx``); kept on disk per generated source
        (``cache_dir("tilelang", "facts")``)."""
        if self._facts is None:
            info = {"compile_s": round(self.compile_s, 3)}
            info.update(_ptxas_facts(self.kernel))
            self._facts = info
        return dict(self._facts)


def _cubin(kernel) -> bytes:
    """The cubin TileLang built for ``kernel``: its compile callback, which finds it in TileLang's
    binary cache (keyed by the source, the arch and the nvcc options) instead of compiling again."""
    from tilelang.cuda.backend import tilelang_callback_cuda_compile

    return bytes(tilelang_callback_cuda_compile(kernel.get_kernel_source(), kernel.target, kernel.pass_configs))


def _sections(cubin: bytes) -> dict[bytes, tuple[int, int]]:
    """The sections of a cubin (an ELF file): name -> (offset, size)."""
    import struct

    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * size) for i in range(count)]
    base = heads[names][4]
    return {cubin[base + h[0]: cubin.index(b"\0", base + h[0])]: (h[4], h[5]) for h in heads}


def _ptx(cubin: bytes) -> str | None:
    """The PTX a cubin was assembled from, where nvcc kept it: TileLang compiles with ``-lineinfo``,
    which leaves the PTX text in the ``.nv_debug_ptx_txt`` section (lines ended by NUL bytes).
    None where it is not there (a fatbin: several targets), then nvcc makes the PTX."""
    if not cubin.startswith(b"\x7fELF"):
        return None
    at = _sections(cubin).get(b".nv_debug_ptx_txt")
    if at is None or not at[1]:
        return None
    return cubin[at[0]: at[0] + at[1]].replace(b"\0", b"\n").decode()


def _cubin_facts(cubin: bytes) -> dict:
    """registers and stack (local memory) bytes of the kernel in a cubin: the EIATTR_REGCOUNT and
    EIATTR_FRAME_SIZE attributes of its ``.nv.info`` section (what cuobjdump reports)."""
    import struct

    regs, stack = 0, 0
    for name, (p, size) in _sections(cubin).items():
        if name != b".nv.info":
            continue
        end = p + size
        while p < end:
            fmt, attr, val = cubin[p], cubin[p + 1], struct.unpack_from("<H", cubin, p + 2)[0]
            if fmt == 4 and attr in (0x2F, 0x11):        # (symbol, value) pairs
                v = struct.unpack_from("<I", cubin, p + 8)[0]
                regs, stack = (max(regs, v), stack) if attr == 0x2F else (regs, max(stack, v))
            p += 4 + (val if fmt == 4 else 0)
    return {"registers": regs, "stack": stack}


def _ptxas_facts(kernel) -> dict:
    import hashlib
    import json
    import os

    src = kernel.get_kernel_source()
    key = hashlib.sha256((arch() + "\0" + src).encode()).hexdigest()[:32]
    from kltools.cache import cache_dir

    path = os.path.join(str(cache_dir("tilelang", "facts")), key + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    try:
        from kltools.ptxas import ptxas_info, summarize
        # the PTX of TileLang's own compile (no nvcc run); else nvcc -ptx of the source
        ptx = _ptx(_cubin(kernel)) or kernel._get_ptx()
        facts = summarize(ptxas_info(ptx, arch()))
    except Exception as e:  # the facts are reported, never needed to run
        return {"facts_error": f"{type(e).__name__}: {str(e)[:200]}"}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(facts, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return facts


def compile_kernel(key, build, pass_configs: dict | None = None) -> Compiled:
    """``tilelang.compile(build())`` once per ``key`` in this process (TileLang's kernel cache keeps
    it on disk for the next one)."""
    full = (key, arch(), tuple(sorted((pass_configs or {}).items())))
    with _LOCK:
        hit = _CACHE.get(full)
        if hit is not None:
            return hit
        import tilelang
        from kltools.cache import cache_dir

        tilelang.env.TILELANG_CACHE_DIR = str(cache_dir("tilelang", "kernels"))
        t0 = time.perf_counter()
        kernel = tilelang.compile(build(), target=target(), execution_backend="tvm_ffi",
                                  pass_configs=dict(pass_configs or {}))
        entry = Compiled(kernel, time.perf_counter() - t0, full)
        _CACHE[full] = entry
        return entry
