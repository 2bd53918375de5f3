"""Probe: does FlagGems' generic NVIDIA ``mul`` of an RMSNorm's (B, 1, H) fp32 by its
(B, 1, 1) rsqrt fault the CUDA context, and is it the block-pointer codegen?

    python mul_fault.py iso BPTR B H ITERS      # the one mul, fresh operands each time
    python mul_fault.py decode BPTR TOKENS      # the small Llama decode, every op

BPTR 1 leaves the NVIDIA codegen config as the base has it (prefer_block_pointer=True),
0 turns block pointers off for every pointwise op (before any kernel is generated).
Prints one JSON line: what ran, how far, and the error with the FlagGems frames."""

import json
import sys
import traceback

import torch

import flag_gems
from flag_gems.utils.codegen_config_utils import get_codegen_config


def frames(error):
    return [
        f"{f.name} ({f.filename.rsplit('/', 2)[-1]}:{f.lineno})"
        for f in traceback.extract_tb(error.__traceback__)
        if "/flag_gems/" in f.filename or "pointwise_dynamic" in f.filename
    ][-4:]


def iso(B, H, iters):
    g = torch.Generator(device="cuda").manual_seed(0)
    done = 0
    for i in range(iters):
        pad = torch.empty(int(torch.randint(1, 4096, (1,))), device="cuda")  # noqa: F841
        x = torch.randn(B, 1, H, device="cuda", generator=g)
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        ref = x * r
        with flag_gems.use_gems():
            out = x * r
        torch.cuda.synchronize()
        if not torch.equal(out, ref):
            bad = (out != ref).nonzero()[:4].tolist()
            return {
                "iters_ok": done,
                "mismatch_at": i,
                "out_dtype": str(out.dtype),
                "out_stride": out.stride(),
                "n_bad": int((out != ref).sum()),
                "max_diff": float((out - ref).abs().max()),
                "bad_idx": bad,
                "out_vals": [float(out[tuple(j)]) for j in bad],
                "ref_vals": [float(ref[tuple(j)]) for j in bad],
                "cpu_ref_equal": bool(torch.equal(ref.cpu(), x.cpu() * r.cpu())),
            }
        done += 1
    return {"iters_ok": done}


def table():
    """mul (and add) on several broadcast patterns: equal to torch or not."""
    cases = {
        "rmsnorm (2,1,256)x(2,1,1)": ((2, 1, 256), (2, 1, 1)),
        "rmsnorm (4,1,1024)x(4,1,1)": ((4, 1, 1024), (4, 1, 1)),
        "rows (4,1024)x(4,1)": ((4, 1024), (4, 1)),
        "weight (2,1,256)x(256,)": ((2, 1, 256), (256,)),
        "same (2,1,256)x(2,1,256)": ((2, 1, 256), (2, 1, 256)),
        "same (4,1024)x(4,1024)": ((4, 1024), (4, 1024)),
        "noncontig (64,64).t()x(64,64)": ((64, 64), (64, 64)),
    }
    out = {}
    for name, (sa, sb) in cases.items():
        for dtype in (torch.float32, torch.int64):
            a = torch.randint(-50, 50, sa, device="cuda").to(dtype)
            b = torch.randint(-50, 50, sb, device="cuda").to(dtype)
            if name.startswith("noncontig"):
                a = a.t()
            ref_mul, ref_add = a * b, a + b
            with flag_gems.use_gems():
                got_mul, got_add = a * b, a + b
            torch.cuda.synchronize()
            out[f"{name} {dtype}"] = {
                "mul_equal": bool(torch.equal(got_mul, ref_mul)),
                "add_equal": bool(torch.equal(got_add, ref_add)),
                "mul_bad": int((got_mul != ref_mul).sum()),
            }
    return {"table": out}


def decode(tokens, exclude=()):
    from copyfix.measure.decode.model import CONFIGS, build, generate

    config = CONFIGS["small"]
    model, ids, mask = build(torch, config, "cuda")
    ref = generate(torch, model, ids, mask, tokens)
    with flag_gems.use_gems(exclude=list(exclude)):
        out = generate(torch, model, ids, mask, tokens)
    torch.cuda.synchronize()
    return {"tokens": tokens, "tokens_equal_eager": bool(torch.equal(out, ref))}


def main():
    what, bptr = sys.argv[1], sys.argv[2] == "1"
    get_codegen_config().prefer_block_pointer = bptr
    row = {
        "what": what,
        "prefer_block_pointer": bptr,
        "args": sys.argv[3:],
        "flag_gems": flag_gems.__file__,
        "triton": __import__("triton").__version__,
    }
    try:
        if what == "table":
            row.update(table())
        elif what == "iso":
            row.update(iso(*map(int, sys.argv[3:6])))
        else:
            row.update(
                decode(
                    int(sys.argv[3]), [e for e in sys.argv[4:5] for e in e.split(",")]
                )
            )
        row["ok"] = True
    except Exception as e:  # the fault: which FlagGems op and kernel
        row.update(
            ok=False, error=f"{type(e).__name__}: {str(e)[:300]}", frames=frames(e)
        )
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
