"""attention: O = softmax(Q K^T * scale + mask) V per head, the FlashAttention-style forward.

Q is [B, Hq, Sq, D]; K and V are [B, Hkv, Sk, D]; O is [B, Hq, Sq, D] in the input dtype (fp16 or
bf16). D is 64 or 128 and ``scale = 1/sqrt(D)``. Hq is a multiple of Hkv: query head h reads K/V
head ``h // (Hq // Hkv)`` (grouped-query attention; Hkv = Hq is plain multi-head attention).

Parameters of a case:
- ``causal``: 0 or 1. The mask is **bottom-right aligned** (FlashAttention 2's convention and
  torch's ``causal_lower_right``): query i attends key j iff ``j <= i + (Sk - Sq)``, so the last
  query sees every key, as when a chunk of Sq new tokens attends a cache of Sk. (torch's
  ``scaled_dot_product_attention(is_causal=True)`` is top-left aligned, ``j <= i``; the two agree
  only when Sq == Sk.) A causal case needs ``Sq <= Sk``: then every query sees at least one key,
  so no output row is fully masked and every output element is defined.
- ``layout``: ``bhsd`` (each tensor contiguous [B, H, S, D]) or ``bshd`` (Q, K and V each a
  [B, S, H, D] tensor viewed as [B, H, S, D], as a fused projection writes them: H * D elements
  between consecutive positions). The output is always contiguous [B, Hq, Sq, D].

The check (``reference_and_bound``) follows the arithmetic every flash kernel does: S = Q K^T with
fp32 accumulation over D, exp / sums in fp32, and P rounded to the input dtype before the P V
product (allowed explicitly, the same for every layer); see ``_bound``.
"""
from __future__ import annotations

import math

import torch

from . import Kernel, Problem, Tolerance, awkward_size, elem_size, generator, randn, register_problem

HEAD_DIMS = (64, 128)
LAYOUTS = ("bhsd", "bshd")
U32 = 2.0 ** -24
LAM = 6.0                       # the probabilistic bound's lambda (as gemm_epilogue's ACC_LAMBDA)
TC_STEP, TC_DRIFT = 16, 0.5     # tensor-core accumulation drift toward zero (gemm_epilogue)
EXP2_REL = 2.0 ** -21           # relative error of a hardware exp2 (ex2.approx: about 2 ulps)
#: unit roundoff of the input dtype (P is rounded to it) and half its smallest subnormal step
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
TINY = {"bfloat16": 2.0 ** -134, "float16": 2.0 ** -25}
#: the reference is float64 up to this many score elements (B Hq Sq Sk), float32 above
REF64_MAX_SCORES = 1 << 27
CHUNK = 1 << 24                 # score elements a reference step holds at most


def unmasked_pairs(Sq: int, Sk: int, causal: int) -> int:
    """(query, key) pairs a head computes: Sq Sk, or under the bottom-right causal mask
    sum over i of (i + 1 + Sk - Sq) = Sq (Sk - Sq) + Sq (Sq + 1) / 2."""
    if not causal:
        return Sq * Sk
    return Sq * (Sk - Sq) + Sq * (Sq + 1) // 2


class Attention(Problem):
    name = "attention"
    description = ("O = softmax(Q K^T / sqrt(D) + causal mask) V per head, grouped-query heads; "
                   "fp32 softmax, P rounded to the input dtype before P V")
    dim_names = ("B", "Hq", "Hkv", "Sq", "Sk", "D")
    dtypes = ("float16", "bfloat16")
    input_names = ("q", "k", "v")
    metric = "TFLOP/s"
    #: the vendor kernel of ``vendor_launch`` (the LOC figure's attention panel is % of it)
    vendor_name = "cuDNN"
    derives_bound = True
    param_choices = {"causal": (0, 1), "layout": LAYOUTS}
    param_defaults = {"causal": 0, "layout": "bhsd"}

    def case(self, dtype="bfloat16", **kw):
        c = super().case(dtype=dtype, **kw)
        if c.D not in HEAD_DIMS:
            raise ValueError(f"D: head dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {c.D}")
        if c.Hq % c.Hkv:
            raise ValueError(f"Hq: must be a multiple of Hkv (grouped-query heads), got Hq={c.Hq}, Hkv={c.Hkv}")
        if c.params["causal"] and c.Sq > c.Sk:
            raise ValueError(f"Sq: a causal case needs Sq <= Sk (bottom-right mask: rows above the "
                             f"diagonal would see no key), got Sq={c.Sq}, Sk={c.Sk}")
        return c

    def cases(self, suite):
        c = self.case
        if suite == "smoke":
            return [c(B=1, Hq=2, Hkv=1, Sq=33, Sk=47, D=64),
                    c(B=1, Hq=2, Hkv=2, Sq=17, Sk=17, D=128, dtype="float16", causal=1),
                    c(B=2, Hq=2, Hkv=1, Sq=5, Sk=40, D=64, causal=1, layout="bshd")]
        if suite == "verify":
            return self._verify_cases()
        if suite == "models":
            # prefill at about 16k tokens a batch, causal, bf16: Llama 3 8B (32 query heads, 8 KV
            # heads, D 128) at three context lengths; Llama 3 70B (64 / 8 heads); Llama 3.2 1B
            # (32 / 8 heads, D 64); and the 8B shape without the mask in fp16 (a full-attention
            # prefix)
            return [c(B=16, Hq=32, Hkv=8, Sq=1024, Sk=1024, D=128, causal=1),
                    c(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, causal=1),
                    c(B=1, Hq=32, Hkv=8, Sq=16384, Sk=16384, D=128, causal=1),
                    c(B=2, Hq=64, Hkv=8, Sq=8192, Sk=8192, D=128, causal=1),
                    c(B=8, Hq=32, Hkv=8, Sq=2048, Sk=2048, D=64, causal=1),
                    c(B=4, Hq=32, Hkv=8, Sq=4096, Sk=4096, D=128, dtype="float16")]
        if suite == "edge":
            # batch 1 with a very long sequence; many short sequences of a ragged length (ViT-B/16:
            # 197 tokens, 12 heads of 64, no mask); a chunk of 64 new tokens against 8k cached
            # keys (few query blocks: 4 x 32 heads); one decode token against 4k keys
            return [c(B=1, Hq=32, Hkv=8, Sq=32768, Sk=32768, D=128, causal=1),
                    c(B=256, Hq=12, Hkv=12, Sq=197, Sk=197, D=64, dtype="float16"),
                    c(B=4, Hq=32, Hkv=8, Sq=64, Sk=8192, D=128, causal=1),
                    c(B=8, Hq=32, Hkv=8, Sq=1, Sk=4096, D=128, causal=1, layout="bshd")]
        if suite == "bench":
            # the FlashAttention papers' sweep: 16k tokens a batch, 16 heads of 128
            return [c(B=16384 // s, Hq=16, Hkv=16, Sq=s, Sk=s, D=128, causal=cz)
                    for cz in (0, 1) for s in (512, 1024, 2048, 4096, 8192, 16384)]
        if suite == "full":
            return [c(B=16384 // s, Hq=2048 // d, Hkv=2048 // d, Sq=s, Sk=s, D=d, causal=cz, dtype=dt)
                    for dt in self.dtypes for d in HEAD_DIMS for cz in (0, 1)
                    for s in (512, 1024, 2048, 4096, 8192, 16384)]
        if suite == "awkward":
            return self.awkward_cases()
        raise ValueError(f"suite: unknown suite {suite!r}")

    def draw(self, rng):
        """An awkward attention case: grouped-query heads, Sq != Sk, causal or not, both layouts,
        at most 2^30 (query, key) pairs."""
        hkv = rng.choice((1, 2, 8))
        hq, b = hkv * rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 3, 16))
        causal = rng.random() < 0.5
        sk = awkward_size(rng, 8192)
        sq = rng.randint(1, sk) if causal else awkward_size(rng, 8192)
        if b * hq * sq * sk > 2 ** 30:
            return None
        return self.case(B=b, Hq=hq, Hkv=hkv, Sq=sq, Sk=sk, D=rng.choice(HEAD_DIMS), causal=int(causal),
                         dtype=rng.choice(self.dtypes), layout=rng.choice(LAYOUTS))

    def _verify_cases(self):
        c = self.case
        out = []
        for dt in self.dtypes:
            out += [
                # ragged lengths (no multiple of any tile), GQA, both head dims, causal and not
                c(B=2, Hq=4, Hkv=2, Sq=77, Sk=131, D=64, dtype=dt),
                c(B=1, Hq=4, Hkv=1, Sq=100, Sk=257, D=128, dtype=dt, causal=1),
                c(B=1, Hq=2, Hkv=2, Sq=255, Sk=255, D=128, dtype=dt, causal=1),
                # one query (decode), one key, one of each
                c(B=3, Hq=8, Hkv=2, Sq=1, Sk=300, D=128, dtype=dt, causal=1),
                c(B=2, Hq=2, Hkv=1, Sq=9, Sk=1, D=64, dtype=dt),
                c(B=1, Hq=1, Hkv=1, Sq=1, Sk=1, D=64, dtype=dt, causal=1),
                # [B, S, H, D] storage (rows H * D apart), causal with Sq < Sk
                c(B=2, Hq=4, Hkv=2, Sq=65, Sk=190, D=64, dtype=dt, causal=1, layout="bshd"),
            ]
        out += [
            # many query rows (a grid or a loop that stops early is caught), the diagonal of a long
            # causal square crossing many tiles, multi-head (Hkv = Hq) with the [B, S, H, D] layout
            c(B=1, Hq=2, Hkv=1, Sq=2053, Sk=2053, D=64, causal=1),
            c(B=1, Hq=2, Hkv=2, Sq=1030, Sk=1030, D=128, dtype="float16", layout="bshd"),
            # few queries against a long key axis (decode-like chunks), causal and not
            c(B=1, Hq=8, Hkv=1, Sq=16, Sk=4099, D=128, causal=1),
            c(B=2, Hq=4, Hkv=4, Sq=3, Sk=2500, D=64, dtype="float16"),
        ]
        return out

    # -- data --------------------------------------------------------------------------------
    def make_inputs(self, case, device, seed):
        g = generator(device, seed)
        dt = case.torch_dtype
        B, D = case.B, case.D

        def tensor(h, s):
            if case.params.get("layout", "bhsd") == "bshd":
                return randn((B, s, h, D), g, device, dt).transpose(1, 2)
            return randn((B, h, s, D), g, device, dt)
        return tensor(case.Hq, case.Sq), tensor(case.Hkv, case.Sk), tensor(case.Hkv, case.Sk)

    def out_shape(self, case):
        return (case.B, case.Hq, case.Sq, case.D)

    def reference(self, inputs, case):
        return _attend(inputs, case, bound=False)[0]

    def reference_and_bound(self, inputs, case, roundings: int = 0):
        """The reference (float64; float32 above ``REF64_MAX_SCORES`` score elements, whose own
        error the bound then covers too), the per-element bound before the output rounding, and
        its systematic part (the tensor cores' drift; ``roundings``: the scores rounded to the
        input dtype that many times, as an unfused eager chain does)."""
        return _attend(inputs, case, bound=True, roundings=roundings)

    def tolerance(self, dtype):
        # only for checks without inputs (tools comparing two outputs); the verifier uses the
        # per-element bound of reference_and_bound
        return {"float16": Tolerance(rel_norm=2e-3, rtol=4e-3, atol_floor=1e-5, atol_rms=4e-3),
                "bfloat16": Tolerance(rel_norm=1.2e-2, rtol=1.6e-2, atol_floor=1e-4, atol_rms=3e-2)}[dtype]

    def vendor_launch(self, case, inputs):
        """cuDNN's attention (torch's CUDNN_ATTENTION backend) on the same Q, K, V: the vendor
        kernel at this very shape (``pct_vendor_same_shape``), timed beside the rows; None where
        cuDNN declines the case."""
        q = inputs[0]
        if q.device.type != "cuda":
            return None
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def launch():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch_sdpa(*inputs, case.params["causal"])
        try:
            launch()
        except RuntimeError:   # no cuDNN kernel for this case (torch says which check failed)
            return None
        return launch

    # -- counts ------------------------------------------------------------------------------
    def traffic(self, case):
        s = elem_size(case.dtype)
        return (2 * case.B * case.Hq * case.Sq + 2 * case.B * case.Hkv * case.Sk) * case.D * s

    def flops(self, case):
        """4 D FLOPs per unmasked (query, key) pair and head: Q K^T and P V, 2 D each."""
        return 4 * case.B * case.Hq * case.D * unmasked_pairs(case.Sq, case.Sk, case.params["causal"])

    def variants(self, case):
        s = elem_size(case.dtype)
        B, Hq, Sq, Sk, D = case.B, case.Hq, case.Sq, case.Sk, case.D
        pairs = B * Hq * unmasked_pairs(Sq, Sk, case.params["causal"])
        q_bytes, kv_bytes = B * Hq * Sq * D * s, B * case.Hkv * Sk * D * s
        scores = B * Hq * Sq * Sk   # the unfused chain materialises every score, masked or not
        return {
            "fused": [Kernel("flash attention", 4 * D * pairs + 5 * pairs, q_bytes + 2 * kv_bytes, q_bytes)],
            "unfused": [Kernel("S = Q K^T", 2 * D * scores, q_bytes + kv_bytes, scores * s),
                        Kernel("softmax(S * scale + mask)", 5 * scores, scores * s, scores * s),
                        Kernel("O = P V", 2 * D * scores, scores * s + kv_bytes, q_bytes)],
        }


def torch_sdpa(q, k, v, causal: int) -> torch.Tensor:
    """torch's ``scaled_dot_product_attention`` with this problem's conventions: grouped heads
    (``enable_gqa``) and the bottom-right causal mask (``is_causal`` where Sq == Sk, where both
    conventions agree; torch's ``causal_lower_right`` bias otherwise)."""
    import torch.nn.functional as F
    Sq, Sk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if causal and Sq != Sk:
        from torch.nn.attention.bias import causal_lower_right
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(Sq, Sk), enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=gqa)


# -- the reference and its bound ----------------------------------------------------------------
class _exact_fp32:
    """float32 matmuls as float32 (no TF32) for the length of a reference."""

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old)
        return False


def _steps(case):
    """(b, h0, h1, i0, i1): blocks of heads and query rows holding at most CHUNK scores."""
    qc = max(1, min(case.Sq, CHUNK // case.Sk))
    hc = max(1, min(case.Hq, CHUNK // (qc * case.Sk)))
    for b in range(case.B):
        for h0 in range(0, case.Hq, hc):
            for i0 in range(0, case.Sq, qc):
                yield b, h0, min(case.Hq, h0 + hc), i0, min(case.Sq, i0 + qc)


def _attend(inputs, case, bound: bool, roundings: int = 0):
    """(O, bound or None, systematic or None), every tensor float64 [B, Hq, Sq, D]."""
    q, k, v = inputs
    cd = torch.float64 if case.B * case.Hq * case.Sq * case.Sk <= REF64_MAX_SCORES else torch.float32
    group = case.Hq // case.Hkv
    shape = (case.B, case.Hq, case.Sq, case.D)
    f64 = dict(dtype=torch.float64, device=q.device)
    out = torch.empty(shape, **f64)
    err = torch.empty(shape, **f64) if bound else None
    sys_ = torch.empty(shape, **f64) if bound else None
    with _exact_fp32():
        for b, h0, h1, i0, i1 in _steps(case):
            kv = torch.arange(h0, h1, device=q.device) // group
            terms = _block(q[b, h0:h1, i0:i1].to(cd), k[b, kv].to(cd), v[b, kv].to(cd),
                           case, i0, bound)
            out[b, h0:h1, i0:i1] = terms["o"]
            if bound:
                e, s = _bound(terms, case, cd == torch.float32, roundings)
                err[b, h0:h1, i0:i1], sys_[b, h0:h1, i0:i1] = e, s
    return out, err, sys_


def _block(qf, kf, vf, case, i0: int, bound: bool) -> dict:
    """Attention of one block of heads [hc] and query rows [i0, i0 + qc) against every key, in
    the compute dtype, and (``bound``) the sums the error bound reads, as float64."""
    scale = 1.0 / math.sqrt(case.D)
    s = torch.matmul(qf, kf.transpose(1, 2)).mul_(scale)           # [hc, qc, Sk]
    qc, Sk = s.shape[1], s.shape[2]
    rows = torch.arange(i0, i0 + qc, device=s.device)
    keys = (rows + 1 + Sk - case.Sq if case.params["causal"] else torch.full_like(rows, Sk)).clamp(max=Sk)
    masked = torch.arange(Sk, device=s.device)[None, :] >= keys[:, None]   # [qc, Sk]
    s.masked_fill_(masked, float("-inf"))
    m = s.amax(-1, keepdim=True)
    smax = torch.where(masked, 0.0, s.abs()).amax(-1, keepdim=True) if bound else None
    p = s.sub_(m).exp_()
    l = p.sum(-1, keepdim=True)
    w = p.div_(l)
    o = torch.matmul(w, vf)
    if not bound:
        return {"o": o}
    w2 = w * w
    d = lambda t: t.to(torch.float64)  # noqa: E731
    return {"o": d(o), "t1": d(torch.matmul(w2, vf * vf).sqrt_()), "r2": d(w2.sum(-1, keepdim=True).sqrt_()),
            "a1": d(torch.matmul(w, vf.abs())), "m": d(m), "smax": d(smax), "l": d(l),
            "qk": d(qf.norm(dim=-1, keepdim=True) * kf.norm(dim=-1).amax(-1)[:, None, None] * scale),
            "vmax": d(vf.abs().amax(1, keepdim=True)), "keys": d(keys)[None, :, None]}


def _bound(t: dict, case, ref32: bool, roundings: int):
    """The per-element error bound (before the output rounding) and its systematic part.

    A flash kernel's O differs from the exact one by (u: the input dtype's unit roundoff, u32 =
    2^-24, lam = 6 as in gemm_epilogue, w_j = p_j / l the exact weights, a1 = sum w_j |V_j|,
    t1 = sqrt(sum w_j^2 V_j^2), r2 = sqrt(sum w_j^2)):
    - P rounded to the input dtype before P V, and (if the kernel sums the rounded P) in l:
      independent relative errors <= u per key, so lam u (t1 + |O| r2) (Hoeffding, as Higham
      and Mary's bound), plus half the smallest subnormal step per key where fp16 P underflows;
    - the scores: fp32 accumulation of Q K^T over D, random per key: lam sqrt(D) u32
      scale |q| max|k| (Cauchy-Schwarz for sum |q_d k_d|), through the weights as above; and
      what may act alike on every key (the tensor cores' drift, the exp2 approximation, the
      scale, the max subtracted) in the worst case, times (a1 + |O|);
    - P V accumulated in fp32 over Sk keys, rescaled by the running max's correction once a
      block (lam sqrt(Sk) u32 a1, lam sqrt(Sk / 16) u32 (a1 + |O|)), l's sum and the division;
    - the tensor cores' drift toward zero of the P V accumulator (gemm_epilogue's TC_DRIFT):
      systematic, and allowed as such.
    A float32 reference makes errors of the same kinds: those terms count twice then.
    ``roundings``: scores rounded to the input dtype, u (scale |q| max|k| + |s|) each, per key."""
    u, D, Sk = UNIT[case.dtype], case.D, case.Sk
    o = t["o"].abs()
    twice = 2.0 if ref32 else 1.0
    spread = t["t1"] + o * t["r2"]
    e_p = LAM * u * spread + LAM * TINY[case.dtype] * t["keys"].sqrt() * t["vmax"] / t["l"]
    s_rand = twice * LAM * math.sqrt(D) * U32 * t["qk"] + roundings * u * (t["qk"] + t["smax"])
    s_alike = twice * ((D / TC_STEP) * U32 * t["qk"] + 8 * U32 * (t["smax"] + t["m"].abs()) + EXP2_REL)
    e_s = LAM * s_rand * spread + s_alike * (t["a1"] + o)
    steps = math.ceil(Sk / TC_STEP)
    e_acc = twice * U32 * (LAM * math.sqrt(Sk) * t["a1"] + LAM * math.sqrt(steps) * (t["a1"] + o)
                           + (LAM * math.sqrt(Sk) + 4) * o)
    drift = TC_DRIFT * steps * U32 * torch.maximum(t["t1"], o)
    systematic = drift + s_alike * (t["a1"] + o)
    return e_p + e_s + e_acc + drift, systematic


register_problem(Attention())
