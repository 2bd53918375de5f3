"""End to end: a Hugging Face Llama decode under FlagGems.

    python -m copyfix.measure.decode [--configs small,large,single] [--processes 3]
        [--rounds 3] [--kunlunxin-configs small] [--out results/decode_h200.json]

transformers' ``LlamaForCausalLM.generate`` (random init, no download), greedy, exactly
``new_tokens`` per sequence, on the configs of :data:`CONFIGS` (``tiny``: the cpu
emulation's).  Each variant of :data:`VARIANTS` (``base``: the pinned base alone,
``build/base-only``; ``composed``; ``composed_cache_off``) runs in fresh worker
processes, alternating, every op under ``use_gems()`` on FlagGems' NVIDIA backend, eager
timed in the same process.  Per config and variant: the median tok/s and ``x_eager``
(the variant's time per token over eager's; each process's kept), the cache's counts,
and whether the tokens with the cache on equal those with it off.

``kunlunxin_emulated``: the decode with ``GEMS_VENDOR=kunlunxin`` in the emulation,
every op, the KunlunXIN device model recording each copy aten's missing strided kernel
would have run (``strided_aten_fallbacks``, 0 ideally), tokens against the model off
and the cache off; ops that raise are left out, named (``ops_excluded``).
``--nvidia-cpu``: the same on FlagGems' NVIDIA backend in the cpu emulation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from copyfix import records

from .model import CONFIGS, CPU_EXCLUDED, CPU_NVIDIA_EXCLUDED, VARIANTS  # noqa: F401
from .report import RESULT, report_lines
from .workers import kunlunxin_section, measure, nvidia_cpu_section, worker


def _names(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown config {unknown}; known: {sorted(CONFIGS)}"
        )
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="copyfix.measure.decode", description=__doc__.split("\n\n")[0]
    )
    add = parser.add_argument
    # fmt: off
    add("--configs", type=_names, default=["small", "large", "single"])
    add("--kunlunxin-configs", type=_names, default=["small"],
        help="configs of the kunlunxin_emulated section (empty: none)")
    add("--processes", type=int, default=3, help="worker processes per variant")
    add("--rounds", type=int, default=3, help="timed generates per column")
    add("--variants", type=lambda t: [v for v in t.split(",") if v], default=list(VARIANTS))
    add("--mode", choices=("nvidia", "cpu"), default="nvidia",
        help="nvidia: FlagGems' own NVIDIA backend (the GPU box); cpu: the cpu "
        "emulation (plumbing only, kunlunxin codegen)")
    add("--budget-s", type=float, default=None,
        help="seconds for the whole run: no worker starts that would not fit")
    add("--kunlunxin-reserve-s", type=float, default=150,
        help="seconds of --budget-s kept for the kunlunxin_emulated section")
    add("--out", type=Path, default=RESULT)
    for hidden in ("--kunlunxin", "--nvidia-cpu", "--every-op"):
        add(hidden, action="store_true", help=argparse.SUPPRESS)
    add("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    # fmt: on
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.configs, args.rounds, args.out)
    elif args.kunlunxin:  # (on its own: results/decode_kunlunxin_cpu.json)
        section = kunlunxin_section(args.configs)
        records.write(args.out, {**records.stamp("src/flag_gems"), **section})
    elif args.nvidia_cpu:
        records.write(args.out, nvidia_cpu_section(args.configs, args.every_op))
    else:
        # date and op commit; the machine is the workers' (this host's until one ran)
        stamp = records.stamp("src/flag_gems")  # every PR file: the model runs them all
        measure(args, lambda record: records.write(args.out, {**stamp, **record}))
        print("\n".join(report_lines(args.out)))
    return 0
