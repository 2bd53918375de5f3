"""Stand-ins for upstream FlagGems' ``benchmark/base.py``, ``consts.py`` and ``utils.py``
(harness only; not in the wheel, and their text must not be copied here).

:mod:`copyfix.pytest_plugin` registers them as ``benchmark.base`` / ``.consts`` /
``.utils`` when the repository has no ``benchmark/base.py``.  As upstream's (main,
2026-08-21), ``Benchmark.run()`` times ``torch_op`` outside ``use_gems`` as the
baseline, then ``gems_op`` if ``set_gems`` gave one, else ``torch_op`` under
``use_gems``: a baseline of aten's strided copy meets the device model as on the XPU.
Timing is a few wall-clock repeats; ``make upstream-ci`` runs upstream's real base.py.
"""

import time
import types

import torch

import flag_gems

FLOAT_DTYPES = [torch.float16, torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int16, torch.int32]
BOOL_DTYPES = [torch.bool]

consts = types.SimpleNamespace(
    FLOAT_DTYPES=FLOAT_DTYPES, INT_DTYPES=INT_DTYPES, BOOL_DTYPES=BOOL_DTYPES
)


def generate_tensor_input(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype, device=device)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, dtype=dtype, device="cpu").to(device)
    info = torch.iinfo(dtype)
    t = torch.randint(info.min, info.max, shape, dtype=dtype, device="cpu")
    return t.to(device)


utils = types.SimpleNamespace(generate_tensor_input=generate_tensor_input)


def _latency_ms(fn, reps=3):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


class Benchmark:
    DEFAULT_SHAPES = [(64, 64)]

    def __init__(self, op_name, torch_op, dtypes=None, is_inplace=False, **kwargs):
        self.op_name, self.torch_op = op_name, torch_op
        self.dtypes = list(dtypes or FLOAT_DTYPES)
        self.is_inplace = is_inplace
        self.device = flag_gems.device
        # the interpreter (cpu mode) runs small shapes only: it walks every element
        # in Python
        self.shapes = [(16, 16)] if self.device == "cpu" else list(self.DEFAULT_SHAPES)
        self.gems_op = None
        self.results = []  # (dtype, latency_base ms, latency ms) per input

    def set_gems(self, gems_op):
        self.gems_op = gems_op

    def get_input_iter(self, dtype):
        raise NotImplementedError

    def run(self):
        for dtype in self.dtypes:
            for args in self.get_input_iter(dtype):
                args = args if isinstance(args, tuple) else (args,)
                base = _latency_ms(lambda: self.torch_op(*args))
                if self.gems_op is not None:
                    latency = _latency_ms(lambda: self.gems_op(*args))
                else:
                    with flag_gems.use_gems(include=[self.op_name]):
                        latency = _latency_ms(lambda: self.torch_op(*args))
                self.results.append((dtype, base, latency))
                print(
                    f"{self.op_name} {dtype}: base {base:.3f} ms, "
                    f"gems {latency:.3f} ms, speedup {base / latency:.2f}"
                )


base = types.SimpleNamespace(Benchmark=Benchmark)
