"""`make demo`: the seed's repro through the base kunlunxin copy_ and through ours.

(a) the base's original module (flag-gems 5.0.2 kunlunxin copy.py): non-contiguous
    sources go to aten's strided copy, which on KunlunXIN dies with
    `invalid device function` (reproduced here by the harness's XPU-failure switch,
    or for real in native mode);
(b) this repository's module: the Triton kernel, bit-exact against torch.
"""

import sys
from unittest import mock

from copyfix import emulation


def _cases(torch, device):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, generator=gen)
    x = torch.randn(64, 48, generator=gen)
    mask = torch.rand(2, 1, 1, 16, generator=gen) > 0.5

    def case(name, src_cpu, view, dst_dtype):
        shape = view(src_cpu).shape
        return name, src_cpu, view, shape, dst_dtype

    return [
        case("a.expand(4,128) -> fp32", a, lambda t: t.expand(4, 128), torch.float32),
        case("a.expand(4,128) -> bf16", a, lambda t: t.expand(4, 128), torch.bfloat16),
        case("x.t() -> fp32", x, lambda t: t.t(), torch.float32),
        case("SDPA mask (2,1,1,16)->(2,8,16,16) bool", mask, lambda t: t.expand(2, 8, 16, 16), torch.bool),
    ]


def _run(torch, module, device, cases):
    """Run each case through module.copy_; report path and bit-exactness."""
    rows = []
    for name, src_cpu, view, shape, dst_dtype in cases:
        launches, fallbacks = [], [0]
        real_inst = module._copy_kernel.instantiate
        real_redispatch = torch.ops.aten.copy_.default.redispatch

        def inst(rank, _real=real_inst, _l=launches):
            _l.append(rank)
            return _real(rank)

        def redispatch(*args, _real=real_redispatch, **kwargs):
            fallbacks[0] += 1
            return _real(*args, **kwargs)

        dst = torch.zeros(shape, dtype=dst_dtype, device=device)
        src = view(src_cpu.to(device))
        try:
            with mock.patch.object(module._copy_kernel, "instantiate", inst), mock.patch.object(
                torch.ops.aten.copy_.default, "redispatch", redispatch
            ), emulation.xpu_fallback_failure():
                module.copy_(dst, src)
        except Exception as exc:  # the bug we reproduce
            rows.append((name, f"aten fallback x{fallbacks[0]}", f"FAILED: {type(exc).__name__}: {exc}"))
            continue
        ref = torch.zeros(shape, dtype=dst_dtype)
        ref.copy_(view(src_cpu))
        got = dst.cpu()
        exact = torch.equal(got.view(torch.uint8) if dst_dtype is torch.bool else got, ref.view(torch.uint8) if dst_dtype is torch.bool else ref)
        path = f"Triton kernel x{len(launches)} (rank {launches})" if launches else "no launch"
        if fallbacks[0]:
            path += f", aten fallback x{fallbacks[0]}"
        rows.append((name, path, "bit-exact vs torch" if exact else "MISMATCH vs torch"))
    return rows


def main() -> int:
    mode = emulation.activate()
    import torch

    import flag_gems  # noqa: F401  (after activate)
    from copyfix.info import describe

    v = emulation.versions()
    print(f"mode={mode}  torch={v['torch']}  triton={v['triton']}  flag_gems={v['flag_gems']}")
    print(describe())
    device = emulation.device()
    cases = _cases(torch, device)
    ours, base = emulation.copy_module(), emulation.base_copy_module()
    failures = 0
    sections = [("(a) before: base kunlunxin copy_ (flag-gems 5.0.2)", base, True)]
    if ours is base or getattr(ours, "__file__", None) == getattr(base, "__file__", None):
        print("\n(b) after: not there yet: no overlay copy.py is installed over the base.")
    else:
        sections.append(("(b) after: this repository's kunlunxin copy_", ours, False))
    for title, module, expect_failure in sections:
        print(f"\n{title}  [{module.__file__}]")
        for name, path, outcome in _run(torch, module, device, cases):
            print(f"  {name:42s} {path:32s} {outcome}")
            bad = outcome.startswith("FAILED") or outcome.startswith("MISMATCH")
            if not expect_failure and bad:
                failures += 1
    if failures:
        print(f"\n{failures} case(s) failed on the overlay module")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
