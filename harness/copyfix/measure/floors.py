"""The launch floors: what any Python op pays to launch one Triton kernel, no FlagGems.

Each is a ``torch.library`` op on the CUDA key that launches an already compiled
kernel through ``CompiledKernel.run`` (current device and stream read at each call):
:func:`sigmoid_floor` allocates its output (NVIDIA's floor), :func:`copy_floor` copies
in place (the KunlunXIN ``copy_``'s).
"""

from __future__ import annotations

import functools

BLOCK = 1024
_LIBRARIES = []  # a torch.library.Library unregisters its op when it is collected


@functools.cache
def _kernels() -> dict:
    import triton
    import triton.language as tl

    @triton.jit
    def sigmoid(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x_ptr + offs, mask=m).to(tl.float32)
        tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-v)), mask=m)

    @triton.jit
    def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)

    return {"sigmoid": sigmoid, "copy": copy}


def _compiled(torch, name: str, x):
    """Kernel ``name`` compiled for ``x`` (and an output like it), and its grid."""
    import triton

    grid = (triton.cdiv(x.numel(), BLOCK), 1, 1)
    k = _kernels()[name].warmup(x, torch.empty_like(x), x.numel(), BLOCK, grid=grid)
    k._init_handles()
    return k, grid, triton.runtime.driver.active


def _register(torch, namespace: str, schema: str, impl):
    lib = torch.library.Library(namespace, "DEF")
    lib.define(schema)
    name = schema.split("(", 1)[0]
    lib.impl(name, impl, "CUDA")
    _LIBRARIES.append(lib)
    return getattr(getattr(torch.ops, namespace), name)


def sigmoid_floor(torch, x):
    """``copyfix_floor::sigmoid``, compiled for tensors like ``x``."""
    k, grid, driver = _compiled(torch, "sigmoid", x)

    def impl(t):
        out = torch.empty_like(t)
        dev = driver.get_current_device()
        k.run(*grid, driver.get_current_stream(dev), k.function, k.packed_metadata,
              None, None, None, t, out, t.numel(), BLOCK)  # fmt: skip
        return out

    return _register(torch, "copyfix_floor", "sigmoid(Tensor x) -> Tensor", impl)


def copy_floor(torch, x):
    """``copyfix_floor_copy::copy_(dst, src)``, compiled for tensors like ``x``, and
    its Python body alone (the launch without torch's dispatch)."""
    k, grid, driver = _compiled(torch, "copy", x)

    def launch(d, src):
        dev = driver.get_current_device()
        k.run(*grid, driver.get_current_stream(dev), k.function, k.packed_metadata,
              None, None, None, src, d, src.numel(), BLOCK)  # fmt: skip
        return d

    schema = "copy_(Tensor(a!) dst, Tensor src) -> Tensor(a!)"
    return _register(torch, "copyfix_floor_copy", schema, launch), launch
