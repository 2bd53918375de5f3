"""End to end: a Hugging Face Llama decode under FlagGems.

    python -m copyfix.measure.decode [--configs small,large,single] [--processes 3]
        [--rounds 3] [--kunlunxin-configs small] [--out results/decode_h200.json]

transformers' own ``LlamaForCausalLM.generate`` (random init, no download), bf16, greedy,
a fixed prompt (left-padded where batched), exactly ``new_tokens`` tokens per sequence.
Configs (:data:`CONFIGS`): ``small`` hidden 256, 4 layers, batch 2, 48 new tokens;
``large`` hidden 1024, 8 layers, batch 4, 32 new tokens; ``single`` the large model at
batch 1 (single-stream decode); ``tiny`` the cpu emulation's (2 layers, hidden 32, fp32).

Variants (:data:`VARIANTS`), each in its own fresh worker process, the processes
alternating (``--processes`` rounds of one process per variant), every FlagGems op under
``flag_gems.use_gems()`` on FlagGems' own NVIDIA backend (``--mode nvidia``:
``GEMS_VENDOR=nvidia``, no emulation), eager torch timed in the same process, in
alternating rounds:

``base``                the pinned base alone (flag-gems 5.0.2 without this overlay):
                        the composition with every pre-image put back
                        (``compose.decompose``) into ``build/base-only``, first on the
                        worker's ``PYTHONPATH``
``composed``            this composition, launch cache on
``composed_cache_off``  this composition, ``launch_cache.set_enabled(False)``

Per config and variant: tok/s (the median over processes), and ``x_eager``: the
variant's time per token over eager's in the same process (eager tok/s over the
variant's: 1.0 as fast as eager, 2.0 twice eager's time), the median over processes,
each process's own kept.  Cache-on processes
record the cache's hits, misses and recordings over their timed generates; the
composed processes each also generate once with the other cache setting, and the
tokens with the cache on must equal those with it off (in each process and across
them).  Tokens and logits against eager: information only (bf16 kernels differ).

``kunlunxin_emulated``: the same decode with ``GEMS_VENDOR=kunlunxin`` in the cuda
emulation (``COPYFIX_EMULATION=cuda``), every FlagGems op, the KunlunXIN device model
on in its recording form (``emulation.xpu_device_model(record=...)``: every copy aten
would have run with its missing strided kernel is listed, with the FlagGems op and the
call site, and then runs): ``strided_aten_fallbacks`` (0 ideally), the list, and
whether the tokens equal the same run with the device model off and with the cache off.
An op that raises is left out of ``use_gems`` and named with its error
(``ops_excluded``); in the cpu emulation (Triton's interpreter) the ops of
:data:`CPU_EXCLUDED` are left out from the start, each with the reason.

``--nvidia-cpu`` (:func:`nvidia_cpu_section`, ``make test``'s check of the generic
codegen): the same decode on FlagGems' default (NVIDIA) backend in the cpu emulation
(``COPYFIX_CPU_VENDOR=nvidia``), the ops of :data:`CPU_NVIDIA_EXCLUDED` left out, against
eager and with the cache off.

Modules: :mod:`.model` (the decode in its process), :mod:`.workers` (fresh processes,
schedule, budget, base rebuild, the record) and :mod:`.report`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from copyfix import records

from .model import CONFIGS, CPU_EXCLUDED, CPU_NVIDIA_EXCLUDED, VARIANTS  # noqa: F401
from .report import RESULT, report_lines
from .workers import kunlunxin_section, measure, nvidia_cpu_section, worker

# every PR file: the whole model runs through all of them
OP_FILES = ("src/flag_gems",)


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
    elif args.kunlunxin:
        records.write(args.out, kunlunxin_section(args.configs))
    elif args.nvidia_cpu:
        records.write(args.out, nvidia_cpu_section(args.configs, args.every_op))
    else:
        # date and op commit; the machine is the workers' (this host's until one ran)
        stamp = records.stamp(*OP_FILES)
        measure(args, lambda record: records.write(args.out, {**stamp, **record}))
        print("\n".join(report_lines(args.out)))
    return 0
