"""Tests of the emulation harness (copyfix.emulation) itself.

Runs in whatever mode activate() selects (here, without GPU or XPU: cpu mode).  Every
test runs in every mode (the repository's pytest plugin counts skips as failures);
where a mode cannot do something, the test checks what that mode does instead.
"""

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import pytest

from copyfix import emulation, tracking

MODE = emulation.activate()  # before flag_gems is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402

import flag_gems  # noqa: E402

pytestmark = pytest.mark.harness
REPO = Path(__file__).resolve().parents[2]

COPY_OP = torch.ops.aten.copy_.default
DEV = emulation.device()
COPY_KERNELS = tracking.OP_KERNELS


@pytest.fixture
def spies():
    """Count torch fallbacks (redispatch) and Triton launches (instantiate) of copy_module()."""
    module = emulation.copy_module()
    launch = mock.Mock()  # one count over every scalar kernel copy_ picks from

    def counting(instantiate):
        def counted(rank):
            launch(rank)
            return instantiate(rank)

        return counted

    with contextlib.ExitStack() as stack:
        fallback = stack.enter_context(
            mock.patch.object(COPY_OP, "redispatch", wraps=COPY_OP.redispatch)
        )
        for name in COPY_KERNELS:
            kernel = getattr(tracking.kernel_home(module), name)
            stack.enter_context(
                mock.patch.object(kernel, "instantiate", counting(kernel.instantiate))
            )
        yield types.SimpleNamespace(module=module, fallback=fallback, launch=launch)


def kernel_copy(spies, src, dtype):
    """dst.copy_(src) done by the kunlunxin Triton kernel (asserted), never by torch."""
    dst = torch.empty(src.shape, dtype=dtype, device=DEV)
    launches = spies.launch.call_count
    spies.module.copy_(dst, src)
    assert spies.fallback.call_count == 0, (
        "copy went to torch's fallback, not the Triton kernel"
    )
    assert spies.launch.call_count == launches + 1
    return dst


def bits(t):
    return t.view(
        {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
            t.element_size()
        ]
    )


def assert_same_bits(out, ref):
    """Bit-for-bit equality; NaNs must be NaN at the same places (payloads are not
    comparable: torch's own CPU paths give 0xFFFF or 0x7FC0 for the same NaN)."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    nan_out, nan_ref = torch.isnan(out.float()), torch.isnan(ref.float())
    assert torch.equal(nan_out, nan_ref)
    keep = ~nan_ref
    mismatch = (bits(out) != bits(ref)) & keep
    if mismatch.any():
        i = mismatch.nonzero()[:5].flatten().tolist()
        raise AssertionError(
            f"{int(mismatch.sum())} mismatches, e.g. at {i}: {bits(out)[i]} != {bits(ref)[i]}"
        )


def fp32_from_bits(values):
    return torch.from_numpy(np.asarray(values, dtype=np.uint32).view(np.float32).copy())


def fp32_rounding_cases():
    rng = np.random.default_rng(1234)
    bf = (
        rng.integers(0, 0x10000, 400, dtype=np.uint32) << 16
    )  # random bf16 values, as fp32
    finite = bf[(bf & 0x7F800000) != 0x7F800000]
    cases = [
        finite | 0x8000,  # exact ties, both even and odd bf16 neighbours
        finite | 0x7FFF,  # just below a tie
        finite | 0x8001,  # just above a tie
        finite | rng.integers(0, 0x10000, finite.size, dtype=np.uint32),  # anything
        rng.integers(0, 0x800000, 50, dtype=np.uint32),  # fp32 subnormals
        rng.integers(0, 0x800000, 50, dtype=np.uint32)
        | 0x80000000,  # negative subnormals
        np.array(
            [
                0x00000000,
                0x80000000,  # +-0
                0x7F800000,
                0xFF800000,  # +-inf
                0x7FC00000,
                0xFFC00000,
                0x7F800001,
                0x7FFFFFFF,  # NaNs (quiet, signalling)
                0x7F7FFFFF,
                0xFF7FFFFF,  # fp32 max: rounds to inf
                0x7F7F7FFF,
                0x7F7F8000,
                0x7F7F8001,  # around the bf16 max
                0x00000001,
                0x00008000,
                0x00018000,
                0x007FFFFF,
                0x00800000,
                0x3F808000,
                0x3F818000,  # 1 + tie: to even down / up
                0x4B808000,
            ],
            dtype=np.uint32,
        ),
    ]
    return fp32_from_bits(np.concatenate(cases))


def test_activate_is_idempotent_and_reports():
    assert emulation.activate() == MODE
    assert emulation.activate(MODE) == MODE
    assert MODE == emulation.MODE
    other = next(m for m in emulation.MODES if m != MODE)
    with pytest.raises(RuntimeError, match="already active"):
        emulation.activate(other)
    info = emulation.versions()
    assert info["mode"] == MODE
    assert info["torch"] == torch.__version__
    assert info["flag_gems"] == emulation.BASE in emulation.FLAGGEMS_BASES
    if MODE != "native":
        assert os.environ["GEMS_VENDOR"] == "kunlunxin"


def test_dispatched_module_is_the_kunlunxin_copy_with_1d_tile_config():
    module = emulation.copy_module()
    assert module is sys.modules["_kunlunxin.ops.copy"]
    assert module.__file__.replace("\\", "/").endswith("_kunlunxin/ops/copy.py")
    # what flag_gems registers for aten::copy_ is this module's copy_
    assert flag_gems.copy_ is module.copy_
    assert tracking.kernel_home(module)._copy_kernel.config.prefer_1d_tile is True
    assert flag_gems.runtime.device.vendor_name == "kunlunxin"


def test_generated_wrapper_launches_12_ctas(spies):
    module = tracking.kernel_home(spies.module)
    # (PR 3 composed: instantiate returns the generated wrapper behind its launch cache)
    overload = module._copy_kernel.instantiate(2)
    overload = getattr(overload, "__wrapped__", overload)
    source = open(overload.__code__.co_filename).read()
    assert str(emulation.cache_dir()) in overload.__code__.co_filename
    assert "num_ctas = 12 # XPU BLOCK_NUM" in source
    kernel = overload.__globals__[
        f"{module._copy_kernel._scalar_fn.__name__}_kernel_rank_2"
    ]
    src = torch.randn(4, 128, device=DEV)
    dst = torch.empty(4, 128, device=DEV, dtype=torch.float16)
    with contextlib.ExitStack() as stack:
        launch = stack.enter_context(mock.patch.object(kernel, "run", wraps=kernel.run))
        if MODE == "cpu":  # count the programs the interpreter actually runs
            from triton.runtime import interpreter

            builder = interpreter.interpreter_builder
            programs = stack.enter_context(
                mock.patch.object(builder, "set_grid_idx", wraps=builder.set_grid_idx)
            )
        overload(src, out0=dst)
        assert launch.call_count == 1
        assert tuple(launch.call_args.kwargs["grid"]) == (12, 1, 1)
        if MODE == "cpu":
            assert programs.call_count == 12
    assert torch.equal(dst, src.to(torch.float16))


def test_fp32_to_bf16_rounds_to_nearest_even_like_torch(spies):
    src = fp32_rounding_cases().to(DEV)
    out = kernel_copy(spies, src, torch.bfloat16)
    assert_same_bits(out, src.to(torch.bfloat16))
    assert torch.isnan(out[src.isnan()].float()).all()


@pytest.mark.parametrize(
    "dtype",
    [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool],
)
def test_int_and_bool_to_bf16_like_torch(spies, dtype):
    rng = np.random.default_rng(7)
    if dtype == torch.bool:
        src = torch.from_numpy(rng.integers(0, 2, 64).astype(bool))
    else:
        info = torch.iinfo(dtype)
        values = [info.min, info.max, 0, 1, -1, 255, 257, 383, 385]
        if dtype in (torch.int32, torch.int64):
            # ties after the int->fp32 step: torch rounds int->fp32->bf16, which differs
            # from the single rounding of compiled Triton (and of the emulator:
            # test_conversions.py) here; the op converts through fp32 to match torch
            values += [0x1008001, 0x1018001, 0x7FFFFFC0, -0x1008001, 2**24 + 1]
        if dtype == torch.int64:
            values += [
                2**62 + 2**38 + 1,
                -(2**53) - 1,
                2**63 - 1,
                2**40 + 2**32 + 2**31,
            ]
        values = [v for v in values if info.min <= v <= info.max]
        randoms = rng.integers(info.min, info.max, 200, dtype=np.int64, endpoint=True)
        src = torch.tensor(values + randoms.tolist(), dtype=dtype)
    src = src.to(DEV)
    out = kernel_copy(spies, src, torch.bfloat16)
    assert_same_bits(out, src.to(torch.bfloat16))


def test_fp16_to_bf16_like_torch(spies):
    # (float64 is not a Triton dtype on KunlunXIN: the copy_ sends it to aten)
    src16 = torch.from_numpy(
        np.arange(0, 0x10000, 7, dtype=np.uint16).view(np.float16).copy()
    ).to(DEV)
    assert_same_bits(
        kernel_copy(spies, src16, torch.bfloat16), src16.to(torch.bfloat16)
    )


def test_bf16_to_other_types_is_exact(spies):
    every_bf16 = torch.from_numpy(
        np.arange(0, 0x10000, dtype=np.uint16).view(np.int16).copy()
    ).view(torch.bfloat16)
    every_bf16 = every_bf16.to(DEV)
    # includes bf16 subnormals, which the stock interpreter maps wrongly
    assert_same_bits(kernel_copy(spies, every_bf16, torch.float32), every_bf16.float())
    assert_same_bits(
        kernel_copy(spies, every_bf16, torch.float16), every_bf16.to(torch.float16)
    )
    in_range = every_bf16[
        every_bf16.float().abs() < 2**31
    ]  # float->int outside the range is UB
    assert torch.equal(
        kernel_copy(spies, in_range, torch.int32), in_range.to(torch.int32)
    )  # toward zero
    # (bf16 -> bool through the kernel goes via int8: see test_bool_store_truncation_...)


def test_other_conversions_are_exact(spies):
    src = fp32_rounding_cases().to(DEV)
    assert_same_bits(kernel_copy(spies, src, torch.float16), src.to(torch.float16))
    in_range = src[src.abs() < 2**31]
    assert torch.equal(
        kernel_copy(spies, in_range, torch.int32), in_range.to(torch.int32)
    )
    assert torch.equal(
        kernel_copy(
            spies, torch.tensor([-2.7, -0.5, 0.5, 2.7], device=DEV), torch.int64
        ).cpu(),
        torch.tensor([-2, 0, 0, 2]),
    )
    big = torch.tensor(
        [2**63 - 1, -(2**63), 2**53 + 1, -(2**62) - 3, 0x0123456789ABCDEF],
        dtype=torch.int64,
    )
    big = big.to(DEV)
    assert torch.equal(kernel_copy(spies, big, torch.int64), big)
    assert torch.equal(
        kernel_copy(spies, big, torch.int32), big.to(torch.int32)
    )  # wraps like torch
    flags = torch.tensor([True, False, True, True], device=DEV)
    assert torch.equal(kernel_copy(spies, flags, torch.bool), flags)
    assert torch.equal(kernel_copy(spies, flags, torch.int64), flags.long())
    assert torch.equal(kernel_copy(spies, flags, torch.float32), flags.float())


def test_bool_store_truncation_is_reproduced_not_hidden():
    """Triton stores to a bool pointer by casting to int8 (language/semantic.py store):
    int16 0x0100 becomes 0 -> False, where torch says True.  The emulation must show
    this wrong result, not mask it."""
    kernel = emulation.base_copy_module()._copy_kernel
    src = torch.tensor([0x0100, 1, 0, 0x0101], dtype=torch.int16, device=DEV)
    dst = torch.empty(4, dtype=torch.bool, device=DEV)
    kernel(src, out0=dst)
    assert dst.tolist() == [False, True, False, True]
    assert (src != 0).tolist() == [True, True, False, True]


def base_copy(base, dst, src):
    """dst.copy_(src) through the base module: via the dispatcher in cpu mode (the
    override can route any module), by calling base.copy_ elsewhere (use_gems() routes
    only the installed module)."""
    if MODE == "cpu":
        with emulation.cpu_dispatch(base):
            return dst.copy_(src)
    return base.copy_(dst, src)


def test_xpu_failure_reproduces_the_bug_with_the_base_module():
    base = emulation.base_copy_module()
    a = torch.randn(128, device=DEV)
    dst = torch.empty(4, 128, device=DEV)
    with (
        emulation.xpu_fallback_failure(),
        mock.patch.object(COPY_OP, "redispatch", wraps=COPY_OP.redispatch) as fallback,
        mock.patch.object(
            base._copy_kernel, "instantiate", wraps=base._copy_kernel.instantiate
        ) as launch,
    ):
        with pytest.raises(
            torch.AcceleratorError, match="invalid device function"
        ) as failure:
            base_copy(base, dst, a.expand(4, 128))
        if MODE != "native":
            assert failure.value.error_code == 98  # cudaErrorInvalidDeviceFunction
        assert fallback.call_count == 1 and launch.call_count == 0
        src = torch.randn(4, 128, device=DEV)
        base_copy(base, dst, src)  # contiguous: through the Triton kernel
        assert launch.call_count == 1 and fallback.call_count == 1
        assert torch.equal(dst, src)
    if MODE != "native":
        base_copy(base, dst, a.expand(4, 128))  # everything restored
        assert torch.equal(dst, a.expand(4, 128))


def test_xpu_fallback_failure_spares_contiguous_fallbacks_and_composes_with_mocks():
    module = emulation.copy_module()
    z = torch.randn(8, dtype=torch.complex64, device=DEV)
    out = torch.empty(8, dtype=torch.complex64, device=DEV)
    # mock outside, failure inside: the failing call is still counted
    with mock.patch.object(COPY_OP, "redispatch", wraps=COPY_OP.redispatch) as fallback:
        with emulation.xpu_fallback_failure():
            module.copy_(out, z)  # complex: kunlunxin falls back; contiguous: works
            assert torch.equal(out, z)
            with pytest.raises(torch.AcceleratorError):
                module.copy_(out[::2], z[::2])
            with pytest.raises(torch.AcceleratorError):
                COPY_OP.redispatch(
                    torch._C.DispatchKeySet(
                        torch._C.DispatchKey.CompositeExplicitAutograd
                    ),
                    torch.empty(3, 4, device=DEV).t(),
                    torch.ones(4, 3, device=DEV),
                    False,
                )
        assert fallback.call_count == 3
    assert not isinstance(
        COPY_OP.__dict__.get("_handle"), emulation.faults._FaultyHandle
    )
    if MODE != "native":
        module.copy_(out[::2], z[::2])  # restored
        assert torch.equal(out[::2], z[::2])


def test_cpu_dispatch_routes_tensor_copy_to_kunlunxin_and_unregisters(spies):
    module = spies.module
    src, dst = torch.randn(3, 5, device=DEV), torch.empty(3, 5, device=DEV)
    zeros = torch.zeros(3, 5, device=DEV)
    # cpu mode looks module.copy_ up at each call; use_gems() registered the function itself
    with mock.patch.object(module, "copy_", wraps=module.copy_) as spy:
        with emulation.cpu_dispatch():
            dst.copy_(src)
            assert spies.launch.call_count == 1 and spies.fallback.call_count == 0
            if MODE == "cpu":
                assert (
                    spy.call_count == 1
                )  # the interpreter's own write-back is not routed
                assert spy.call_args.args[0] is dst and spy.call_args.args[1] is src
                # isfinite copies the Python scalar inf into a 0-dim CPU tensor (a wrapped
                # number, handed to Python kernels as a float): CPU-internal, not routed
                assert torch.isfinite(dst).all()
                assert spy.call_count == 1
        assert torch.equal(dst, src)
        dst.copy_(zeros)
        assert spies.launch.call_count == 1 and spy.call_count == (
            1 if MODE == "cpu" else 0
        )
    assert torch.equal(dst, zeros)


def test_kunlunxin_fallback_inside_cpu_dispatch_does_not_recurse(spies):
    # complex -> real goes to torch's fallback in the base and in the overlay copy_
    a = torch.randn(4, 6, dtype=torch.complex64, device=DEV)
    dst = torch.empty(4, 6, device=DEV)
    with emulation.cpu_dispatch():
        dst.copy_(a)  # the fallback must not come back here
    assert spies.fallback.call_count == 1 and spies.launch.call_count == 0
    assert torch.equal(dst, a.real)


def test_base_copy_module_loads_the_recorded_base_file_separately(
    tmp_path, monkeypatch
):
    current = emulation.copy_module()
    base_file = tmp_path / "copy.py"
    kept = (
        Path(flag_gems.__file__).parent
        / "_overlay_preimages"
        / emulation.kunlunxin.KUNLUNXIN_COPY_RELPATH
    )
    # a pristine pre-image, moved elsewhere: the one the build kept, else the installed base
    shutil.copyfile(kept if kept.is_file() else current.__file__, base_file)
    info = types.ModuleType("flag_gems._overlay_info")
    info.BASE_COPY_PATH = str(base_file)
    monkeypatch.setitem(sys.modules, "flag_gems._overlay_info", info)
    monkeypatch.setattr(emulation.kunlunxin, "_base_copy_module", None)
    base = emulation.base_copy_module()
    assert base is not current and base.__file__ == str(base_file)
    assert base.copy_ is not current.copy_ and base.copy_.__globals__ is vars(base)
    assert sys.modules["_kunlunxin.ops.copy"] is current
    src, dst = (
        torch.randn(10, device=DEV),
        torch.empty(10, dtype=torch.bfloat16, device=DEV),
    )
    with mock.patch.object(
        base._copy_kernel, "instantiate", wraps=base._copy_kernel.instantiate
    ) as launch:
        base.copy_(dst, src)
    assert launch.call_count == 1
    assert_same_bits(dst, src.to(torch.bfloat16))


def test_base_copy_module_refuses_a_file_that_is_not_a_known_base(
    tmp_path, monkeypatch
):
    base_file = tmp_path / "copy.py"
    base_file.write_text(open(emulation.copy_module().__file__).read() + "\n# edited\n")
    info = types.ModuleType("flag_gems._overlay_info")
    info.BASE_COPY_PATH = str(base_file)
    monkeypatch.setitem(sys.modules, "flag_gems._overlay_info", info)
    monkeypatch.setattr(emulation.kunlunxin, "_base_copy_module", None)
    with pytest.raises(RuntimeError, match="not a known pristine base"):
        emulation.base_copy_module()


def test_base_copy_module_without_overlay_is_the_installed_module(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "flag_gems._overlay_info", None
    )  # as if not installed
    monkeypatch.setattr(emulation.kunlunxin, "_base_copy_module", None)
    current = emulation.copy_module()
    digest = hashlib.sha256(open(current.__file__, "rb").read()).hexdigest()
    if digest in emulation.kunlunxin.BASE_COPY_SHA256:  # a plain flag-gems install
        assert emulation.base_copy_module() is current
    else:  # the overlay's copy.py, with its record hidden: not mistaken for the base
        with pytest.raises(RuntimeError, match="not a known pristine base"):
            emulation.base_copy_module()


@pytest.mark.parametrize(
    "lib, fake",
    [("torch", "2.12.0+cpu"), ("triton", "3.7.0"), ("flag_gems", "5.1.0 at /x")],
)
def test_activate_refuses_versions_it_was_not_written_for(monkeypatch, lib, fake):
    real = emulation._installed_versions()
    monkeypatch.setattr(emulation, "_installed_versions", lambda: {**real, lib: fake})
    monkeypatch.setattr(emulation.state, "MODE", None)
    with pytest.raises(
        RuntimeError, match=rf"refuses to run.*{lib} {re.escape(fake)} \(written for"
    ):
        emulation.activate("cpu")
    assert emulation.state.MODE is None


def test_version_check_accepts_the_supported_versions(monkeypatch):
    for torch_version in ("2.13.0+cpu", "2.11.0+cu128", "2.11.1"):
        for base in emulation.FLAGGEMS_BASES:
            fake = {"torch": torch_version, "triton": "3.6.0", "flag_gems": base}
            monkeypatch.setattr(emulation, "_installed_versions", lambda f=fake: f)
            assert emulation._check_versions("cpu") == base
            assert emulation._check_versions("cuda") == base


def test_native_mode_patches_and_checks_nothing(monkeypatch):
    fake = {"torch": "9.9", "triton": "9.9", "flag_gems": "6.0 at /x"}
    monkeypatch.setattr(emulation, "_installed_versions", lambda: fake)
    assert emulation._check_versions("native") is None


def test_the_base_is_read_from_the_flag_gems_that_is_imported(tmp_path):
    """The version check identifies the base by the files `import flag_gems` loads,
    never by a distribution's metadata (a composed install carries the overlay's)."""
    import flag_gems

    package = Path(flag_gems.__file__).parent
    assert emulation.flag_gems_dir() == package.resolve()
    assert emulation.flag_gems_base() == emulation.BASE
    assert emulation.versions()["flag_gems"] == emulation.BASE
    # a package whose files match no known base is named by what it declares
    fake = tmp_path / "flag_gems"
    for rel in emulation.FLAGGEMS_BASES[emulation.BASE]:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        kept = package / "_overlay_preimages" / rel  # (a file PR 3 patches)
        shutil.copy(kept if kept.is_file() else package / rel, fake / rel)
    assert emulation.flag_gems_base(fake) == emulation.BASE
    (fake / "utils" / "libentry.py").write_text("# another LibEntry\n")
    (fake / "__init__.py").write_text('__version__ = "5.4.0"\n')
    assert emulation.flag_gems_base(fake) is None
    assert emulation._declared_flag_gems_version(fake) == "5.4.0"


def test_a_checkout_with_pr3_applied_is_still_its_base(tmp_path):
    """upstream-ci applies the launch-cache PR to a checkout (the generic
    pointwise_dynamic): the base is still recognised, and an edit of a file it reads
    is not."""
    import flag_gems
    from copyfix.compose import apply_patch

    package = Path(flag_gems.__file__).parent
    fake = tmp_path / "flag_gems"
    rel = "utils/pointwise_dynamic.py"
    for name in [*emulation.FLAGGEMS_BASES[emulation.BASE], rel]:
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        kept = package / "_overlay_preimages" / name
        shutil.copy(kept if kept.is_file() else package / name, fake / name)
    patch = (REPO / "src" / "flag_gems" / f"{rel}.patch").read_text()
    pre = (fake / rel).read_text()
    (fake / rel).write_text(apply_patch(pre, patch, rel))
    assert apply_patch((fake / rel).read_text(), patch, rel, reverse=True) == pre
    assert emulation.flag_gems_base(fake) == emulation.BASE
    kunlunxin = "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py"
    (fake / kunlunxin).write_text((fake / kunlunxin).read_text() + "# another edit\n")
    assert emulation.flag_gems_base(fake) is None


def test_xpu_libdevice_module_and_stubs():
    import triton.language as tl
    from triton.language.extra.xpu import libdevice

    if MODE != "native":
        from triton.language.extra.cuda import libdevice as cuda_libdevice

    assert tl.extra.xpu.libdevice is libdevice
    assert callable(libdevice.xpu_trunc_div) and callable(libdevice.rint)
    if MODE == "native":  # KunlunXIN's own Triton provides them
        return
    assert libdevice.rint is cuda_libdevice.rint and libdevice.tan is cuda_libdevice.tan
    # cpu mode: the interpreter's stand-ins (copyfix.emulation.xpu_libdevice) for the
    # names the kunlunxin ops reach; cuda mode: CUDA libdevice's own functions
    from copyfix.emulation import xpu_libdevice

    for name in xpu_libdevice.STAND_INS:
        stand_in = getattr(xpu_libdevice, name)
        expected = stand_in if MODE == "cpu" else getattr(cuda_libdevice, name)
        assert getattr(libdevice, name) is expected, name
    for name in emulation.shims.XPU_ONLY_LIBDEVICE:
        with pytest.raises(NotImplementedError, match=name):
            getattr(libdevice, name)(1, 2)


def test_xpu_launch_options_are_stripped_only_when_undeclared():
    kernel = types.SimpleNamespace(arg_names=["x", "unroll_num"])
    kwargs = {
        "num_warps": 4,
        "buffer_size_limit": 512,
        "isCloseOffsetAnalysis": True,
        "isOpenCmpNan": True,
        "unroll_num": 2,
        "tile_size": 64,
        # the ones the pattern misses
        "is_use_mask_zero": True,
        "isCLOSE_TTXPU_O_ATOMIC_SIM": True,
        "groups_per_cluster": 4,
        "is_sdnn": False,
    }
    assert emulation.shims.strip_xpu_launch_options(kernel, kwargs) == {
        "num_warps": 4,
        "unroll_num": 2,
        "tile_size": 64,
    }


def test_autotune_tolerates_generate_configs():
    import triton

    decorator = triton.autotune(configs=[], generate_configs="mm", key=["M"])
    assert callable(decorator)


def test_generate_configs_stand_in_gives_each_shape_its_tiles():
    if MODE == "native":  # FlagTree's own autotuner generates them
        return
    config = emulation.shims.generated_config
    shape = {"M": 3, "N": 100, "K": 32}
    # the keys each op's kernel reads; powers of two in [16, 64]; a dimension that is
    # not a power of two gets a tile that does not divide it (the masked paths run)
    assert config("mm", shape).kwargs == {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}
    assert config("bmm", shape).kwargs == {"TILE_M": 16, "TILE_N": 64, "TILE_K": 32}
    assert config("addmm", {"M": 1, "N": 17, "K": 4096}).kwargs == {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 32,
        "BLOCK_SIZE_K": 64,
    }
    with pytest.raises(NotImplementedError, match="index_add"):
        config("index_add", shape)


@pytest.mark.parametrize(
    "op, fn",
    [
        ("mm", lambda a, b, c: torch.mm(a, b)),
        ("bmm", lambda a, b, c: torch.bmm(a[None], b[None])[0]),
        ("addmm", lambda a, b, c: torch.addmm(c, a, b)),
    ],
)
def test_kunlunxin_matmuls_run_with_generated_configs(op, fn):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 24, generator=g), torch.randn(24, 40, generator=g)
    c = torch.randn(40, generator=g)
    a, b, c = a.to(DEV), b.to(DEV), c.to(DEV)
    with flag_gems.use_gems(include=[op]):
        got = fn(a, b, c)
    torch.testing.assert_close(got, fn(a, b, c), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "op, fn",
    [
        ("rsqrt", lambda x: torch.rsqrt(x.abs() + 0.5)),
        ("pow_tensor_scalar", lambda x: x.pow(2)),
        ("pow_tensor_scalar", lambda x: x.abs().pow(0.5)),
        ("argmax", lambda x: torch.argmax(x, dim=-1)),
        ("where_self", lambda x: torch.where(x > 0, x, torch.zeros_like(x))),
        ("full", lambda x: torch.full((3, 5), True, device=x.device)),
        (
            "fill_scalar_",
            lambda x: torch.empty(7, dtype=torch.bool, device=x.device).fill_(True),
        ),
        ("mean_dim", lambda x: x.mean(-1, keepdim=True)),
        (
            "embedding",
            lambda x: torch.nn.functional.embedding(
                torch.tensor([[1, 3]], device=x.device), x
            ),
        ),
    ],
)
def test_kunlunxin_ops_the_decode_reaches_match_torch(op, fn):
    # (each needed a shim in cpu mode: the libdevice stand-ins, dtype and
    # bool arguments, where's device pick, the CPU device object)
    x = torch.randn(4, 33, generator=torch.Generator().manual_seed(1)).to(DEV)
    with flag_gems.use_gems(include=[op]):
        got = fn(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-6, atol=1e-6)


def test_the_cpu_device_object_enters_the_no_device_guard():
    device = torch.device("cpu")
    if MODE != "cpu":  # torch's own check: a cuda device is expected
        with pytest.raises(ValueError, match="Expected a cuda device"):
            torch.cuda.device(device)
        return
    from copyfix.emulation.interpreter import no_device_index

    assert [no_device_index(d) for d in (None, device, "cpu", 0)] == [-1, -1, -1, 0]
    with torch.cuda.device(device), torch.cuda._DeviceGuard(None):
        pass


def test_where_keeps_the_emulated_device_only_where_every_operand_is_on_it():
    if MODE != "cpu":
        return
    from copyfix.emulation import interpreter

    pick = interpreter._emulated_device_filter
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    not_cpu = lambda k: k.type != "cpu"  # noqa: E731  (the where modules' predicate)
    assert list(pick(not_cpu, [cpu, cpu])) == [cpu, cpu]
    assert list(pick(not_cpu, [cpu, cuda])) == [cuda]
    assert list(pick(not_cpu, [])) == []
    assert list(pick(lambda k: False, [1, 2])) == []
    for name in interpreter.WHERE_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            assert module.filter is pick


def test_the_interpreter_benchmark_runs_each_config_once():
    if MODE != "cpu":
        return
    from copyfix.emulation.interpreter import interpreter_benchmark

    calls = []
    assert interpreter_benchmark(lambda: calls.append(1), quantiles=(0.5, 0.2)) == [
        0.0,
        0.0,
    ]
    assert interpreter_benchmark(lambda: calls.append(1), warmup=25, rep=100) == 0.0
    assert calls == [1, 1]


def test_strided_buffer_launch_through_the_pointwise_call_path():
    """pointwise_dynamic.__call__ passes StridedBuffer (not Tensor) arguments."""
    kernel = tracking.kernel_home(emulation.copy_module())._copy_kernel
    src = torch.randn(6, 5, device=DEV)
    dst = torch.empty(5, 6, dtype=torch.bfloat16, device=DEV)
    kernel(src.t(), out0=dst)
    assert_same_bits(dst, src.t().to(torch.bfloat16))


def assert_child_prints_ok(code, drop, **env_vars):
    """Run `code` in a fresh interpreter, with this process's environment less the
    `drop` variables plus `env_vars`: it must exit 0 and print 'ok'."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_vars, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_cuda_mode_activation_smoke():
    """cuda mode can only really run on a GPU box; here check that activating it applies
    exactly its patches (in a fresh interpreter, without importing flag_gems)."""
    if MODE == "native":  # the XPU box's torch/triton are not the emulated versions
        assert emulation.activate("native") == "native"
        return
    code = (
        "import sys\n"
        "from copyfix import emulation as e\n"
        "assert e.activate('cuda') == 'cuda'\n"
        "import triton\n"
        "from triton.runtime import interpreter\n"
        "from triton.runtime.jit import JITFunction\n"
        "import triton.language.extra.xpu.libdevice as x\n"
        "assert JITFunction.run._copyfix_patched and triton.autotune._copyfix_patched\n"
        "assert not getattr(interpreter, '_copyfix_patched', False)\n"
        "assert 'flag_gems' not in sys.modules\n"
        "print('ok')\n"
    )
    assert_child_prints_ok(code, drop=("TRITON_INTERPRET", "GEMS_VENDOR"))


def test_cpu_mode_in_a_child_that_inherits_triton_interpret():
    """An xdist worker inherits TRITON_INTERPRET=1 from a controller whose cpu-mode
    activation set it; activate('cpu') must still work there (Triton imported with
    it set turns its own @jit functions into stock InterpretedFunctions)."""
    if MODE == "native":  # the XPU box's torch/triton are not the emulated versions
        assert emulation.activate("native") == "native"
        return
    code = (
        "import torch\n"
        "from copyfix import emulation as e\n"
        "assert e.activate('cpu') == 'cpu'\n"
        "m = e.copy_module()\n"
        "a = torch.arange(12.0).reshape(3, 4)\n"
        "d = torch.empty(4, 3)\n"
        "m.copy_(d, a.t())\n"
        "assert torch.equal(d, a.t())\n"
        "print('ok')\n"
    )
    assert_child_prints_ok(
        code,
        drop=("GEMS_VENDOR", emulation.ENV_MODE),
        TRITON_INTERPRET="1",
        CUDA_VISIBLE_DEVICES="",  # cpu mode on a CUDA build of torch
    )


def test_a_launch_finishes_when_copy_sees_no_self_alias(monkeypatch):
    """cpu mode: after each launch the interpreter copies every argument's storage onto
    itself.  That self-copy must not reach the kunlunxin copy_ under use_gems(): a copy_
    that did not see it as a no-op would launch inside the running launch and deadlock
    on LibEntry's lock.  Here nothing is an alias, so copy_'s self-alias no-op never
    fires.  (cuda mode has no write-back: the copy simply runs.)"""
    import threading

    monkeypatch.setattr(torch._C, "_is_alias_of", lambda a, b: False)
    src = torch.arange(12.0).view(3, 4)
    dst = torch.zeros(4, 3, device=DEV)
    done = []

    def run():
        with flag_gems.use_gems(include=["copy_"]):
            dst.copy_(src.to(DEV).t())
        done.append(True)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert done, "the copy did not finish: the write-back re-entered copy_"
    assert torch.equal(dst.cpu(), src.t())
