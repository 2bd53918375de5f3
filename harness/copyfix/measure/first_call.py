"""Where PR 3's first-call gap comes from: one signature's first three calls, each timed
alone between two ``torch.cuda.synchronize()``, in variants of the cache's work.

Harness file (not part of the upstream PR)::

    GEMS_VENDOR=nvidia python -m copyfix.measure.first_call [ROUNDS] [--out F.json]

Stock NVIDIA backend, ``torch.add`` of a (64, 64) fp32 view with row stride w (one
signature per w, as in :mod:`copyfix.measure.miss_cost`) and a contiguous (64, 64)
tensor under ``flag_gems.use_gems()``; 20 new signatures per variant and round, the
variants in a rotating order; medians per call index (first, second, third call):

* ``off`` / ``on``: the cache off / on (the third call records when on);
* ``on_key_none``: on, ``_key`` answering None (every call through ``_uncached``);
* ``on_no_admit``: on, ``ADMIT_AFTER`` patched to 0 and ``LaunchCache._admit``
  answering False (key and lookup, no count of the signature);
* ``on_no_record``: on, ``ADMIT_AFTER`` patched to 99 (the bookkeeping runs, no call
  records: on against it is what the third calls' recordings leave to the next
  signature's calls);
* ``off_key_inline``: off, the same key computed inside the timed region first;
* ``on_key_pre``: on, the key computed once before the timed region;
* ``off_gc_off`` / ``on_gc_off``: off / on with the garbage collector disabled.

``key_fresh_us`` / ``key_again_us``: the key of such a call in a loop of 2000 (new
tensors, then the same ones again).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from unittest import mock

VARIANTS = {
    "off": dict(on=False),
    "on": dict(on=True),
    "on_key_none": dict(on=True, key_none=True),
    "on_no_admit": dict(on=True, no_admit=True),
    "on_no_record": dict(on=True, no_record=True),
    "off_key_inline": dict(on=False, inline=True),
    "on_key_pre": dict(on=True, pre=True),
    "off_gc_off": dict(on=False, gc=False),
    "on_gc_off": dict(on=True, gc=False),
}


def measure(rounds: int = 12, variants=tuple(VARIANTS)) -> dict:
    os.environ["GEMS_VENDOR"] = "nvidia"
    import torch

    import flag_gems
    from flag_gems.utils import launch_cache as lc

    y = torch.randn(64, 64, device="cuda")
    views = {}

    def view(w):
        if w not in views:
            views[w] = torch.empty(64, w, device="cuda")[:, :64]
        return views[w]

    widths = iter(range(65, 10**6))
    key = lc._key
    salt = (False, torch.float32)  # (what pointwise_dynamic adds: not timed here)
    res = {v: [[], [], []] for v in variants}
    with flag_gems.use_gems():
        torch.add(view(64), y)
        torch.cuda.synchronize()
        names = list(variants)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                v = VARIANTS[name]
                lc.set_enabled(v["on"])
                patches = []
                if v.get("key_none"):
                    patches.append(mock.patch.object(lc, "_key", lambda a, k, s: None))
                if v.get("no_admit"):
                    patches.append(mock.patch.object(lc, "ADMIT_AFTER", 0))
                    patches.append(
                        mock.patch.object(lc.LaunchCache, "_admit", lambda s, k: False)
                    )
                if v.get("no_record"):
                    patches.append(mock.patch.object(lc, "ADMIT_AFTER", 99))
                for p in patches:
                    p.start()
                if v.get("gc") is False:
                    gc.disable()
                ws = [next(widths) for _ in range(20)]
                for w in ws:
                    view(w)
                for w in ws:
                    for i in range(3):
                        a = view(w)
                        if v.get("pre"):
                            key((a, y, 1), {}, salt)
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        if v.get("inline"):
                            key((a, y, 1), {}, salt)
                        torch.add(a, y)
                        torch.cuda.synchronize()
                        res[name][i].append((time.perf_counter() - t0) * 1e6)
                gc.enable()
                for p in patches:
                    p.stop()
                lc.set_enabled(True)
        fresh = [view(next(widths)) for _ in range(2000)]
        t0 = time.perf_counter()
        for a in fresh:
            key((a, y, 1), {}, salt)
        t1 = time.perf_counter()
        for a in fresh:
            key((a, y, 1), {}, salt)
        t2 = time.perf_counter()
    from copyfix.measure.launch_cost import PR3_FILES, _op_commit

    return {
        # torch.add on the stock NVIDIA backend: PR 3's files are the op measured
        "op_commit": _op_commit(PR3_FILES),
        "machine": torch.cuda.get_device_name(0),
        "versions": {
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
        },
        "rounds": rounds,
        "us_by_call_index": {
            n: [round(statistics.median(x), 1) for x in v] for n, v in res.items()
        },
        "key_fresh_us": round((t1 - t0) / 2000 * 1e6, 2),
        "key_again_us": round((t2 - t1) / 2000 * 1e6, 2),
    }


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = None
    if "--out" in argv:
        i = argv.index("--out")
        out = argv[i + 1]
        del argv[i : i + 2]
    record = measure(int(argv[0]) if argv else 12)
    text = json.dumps(record, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
