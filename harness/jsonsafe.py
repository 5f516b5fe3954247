"""Strict JSON out of rows that may hold NaN or infinity.

JSON has no NaN: ``clean(obj)`` replaces every non-finite float by ``null`` and, inside a mapping,
adds ``"<key>_nonfinite": "nan" | "inf" | "-inf"`` beside it, so that the value is not lost.
``dumps`` writes with ``allow_nan=False``: a non-finite number that slipped through is an error
here, not a file that strict parsers reject.
"""
from __future__ import annotations

import json
import math


def _tag(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def clean(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                out[f"{k}_nonfinite"] = _tag(v)
            else:
                out[k] = clean(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    try:
        import numpy as np
        if isinstance(obj, np.generic):
            return clean(obj.item())
    except ImportError:  # pragma: no cover
        pass
    return obj


def _default(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def dumps(obj, **kw) -> str:
    return json.dumps(clean(obj), allow_nan=False, default=_default, **kw)
