"""The installable overlay: composition, pre-image checks, editability (harness tests)."""

import shutil
from pathlib import Path
from unittest import mock

import pytest

from copyfix import compose, emulation

pytestmark = pytest.mark.harness

REPO = Path(__file__).resolve().parents[2]
COPY_REL = "runtime/backend/_kunlunxin/ops/copy.py"


def _pristine_base_copy() -> Path:
    import flag_gems

    kept = Path(flag_gems.__file__).parent / "_overlay_preimages" / COPY_REL
    assert kept.is_file(), "the build keeps the replaced pre-image"
    return kept


def _fake_checkout(root: Path, copy_text: bytes) -> Path:
    """src/flag_gems: the copy.py given, the base's pre-images of the other files."""
    import flag_gems

    pkg = root / "src" / "flag_gems"
    (pkg / COPY_REL).parent.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / COPY_REL).write_bytes(copy_text)
    kept = Path(flag_gems.__file__).parent / "_overlay_preimages"
    for path in kept.rglob("*.py"):
        rel = path.relative_to(kept).as_posix()
        if rel != COPY_REL:
            (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, pkg / rel)
    return root


def _project(tmp_path, monkeypatch, edit=b""):
    """(a copy of the overlay; FLAGGEMS_BASE, a checkout: the base's copy.py + edit)"""
    proj = tmp_path / "proj"
    shutil.copytree(REPO / "src", proj / "src")
    shutil.copy(REPO / "pyproject.toml", proj / "pyproject.toml")
    copy_text = _pristine_base_copy().read_bytes() + edit
    base = _fake_checkout(tmp_path / "upstream", copy_text)
    monkeypatch.setenv("FLAGGEMS_BASE", str(base))
    return proj, base


def test_installed_flag_gems_is_the_composed_overlay():
    import flag_gems
    from flag_gems import _overlay_info as info

    mod = emulation.copy_module()
    assert "src/flag_gems/runtime/backend/_kunlunxin/ops/copy.py" in info.OVERLAY_FILES
    assert COPY_REL in info.REPLACED
    assert (
        Path(mod.__file__).parent.parent.parent.parent.parent
        == Path(flag_gems.__file__).parent
    )
    if info.EDITABLE:  # edits to the overlay file are what gets imported
        assert Path(mod.__file__).resolve() == REPO / "src" / "flag_gems" / COPY_REL


def test_info_entry_point_reports_base_and_overlay(capsys):
    from copyfix import info

    info.main()
    out = capsys.readouterr().out
    assert "base: " in out and "overlay active" in out and "replaces base file" in out


def test_compose_over_a_checkout_and_edits_are_live(tmp_path, monkeypatch):
    proj, base = _project(tmp_path, monkeypatch)
    out = compose.compose(proj, editable=True)
    composed = out / "flag_gems" / COPY_REL
    assert composed.is_symlink()
    info = (out / "flag_gems" / "_overlay_info.py").read_text()
    assert f"FLAGGEMS_BASE={base}" in info
    # an edit to the overlay file shows through without composing again
    overlay_file = proj / "src" / "flag_gems" / COPY_REL
    overlay_file.write_text(overlay_file.read_text() + "\nEDITED_MARKER = 1\n")
    assert "EDITED_MARKER" in composed.read_text()
    assert (
        out / "flag_gems" / "_overlay_preimages" / COPY_REL
    ).read_bytes() == _pristine_base_copy().read_bytes()


def test_wheel_compose_copies_instead_of_linking(tmp_path, monkeypatch):
    proj, base = _project(tmp_path, monkeypatch)
    composed = compose.compose(proj, editable=False) / "flag_gems" / COPY_REL
    assert not composed.is_symlink()
    assert composed.read_bytes() == (proj / "src" / "flag_gems" / COPY_REL).read_bytes()


def test_compose_command_composes_the_project_given(tmp_path, monkeypatch, capsys):
    # python -m copyfix.compose [--project DIR] [--no-editable], as the device scripts run it
    proj, base = _project(tmp_path, monkeypatch)
    assert compose.main(["--project", str(proj), "--no-editable"]) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out == proj.resolve() / "build" / "composed"
    assert not (out / "flag_gems" / COPY_REL).is_symlink()
    assert compose.main(["--project", str(proj)]) == 0
    assert (out / "flag_gems" / COPY_REL).is_symlink()


def test_wrong_base_stops_with_both_hashes_and_leaves_nothing(tmp_path, monkeypatch):
    proj, base = _project(tmp_path, monkeypatch, b"\n# someone else's change\n")
    with pytest.raises(RuntimeError) as err:
        compose.compose(proj, editable=True)
    msg = str(err.value)
    assert "pre-image mismatch" in msg and "src/flag_gems/" + COPY_REL in msg
    assert compose.sha256(base / "src" / "flag_gems" / COPY_REL) in msg
    assert "43886a575ea4b819b531686608e90c0d3439811584a28b2ab5355555dfa2baa1" in msg
    assert not (proj / "build").exists() or not any((proj / "build").iterdir())


def test_base_path_without_flag_gems_is_refused(tmp_path, monkeypatch):
    proj, _ = _project(tmp_path, monkeypatch)
    monkeypatch.setenv("FLAGGEMS_BASE", str(tmp_path / "nothing-here"))
    with pytest.raises(RuntimeError, match="no flag_gems package found"):
        compose.compose(proj, editable=True)


def test_failure_during_layout_removes_the_temporary_tree(tmp_path, monkeypatch):
    proj, base = _project(tmp_path, monkeypatch)
    monkeypatch.setattr(
        compose.shutil, "copy2", mock.Mock(side_effect=OSError("disk full"))
    )
    with pytest.raises(OSError):
        compose.compose(proj, editable=False)
    assert not any((proj / "build").iterdir())


def test_emulation_knows_the_recorded_pre_images():
    text = (REPO / "pyproject.toml").read_text()
    for digest in emulation.kunlunxin.BASE_COPY_SHA256:
        assert digest in text, (
            "emulation.kunlunxin.BASE_COPY_SHA256 drifted from pyproject's pre-images"
        )


def test_decompose_only_puts_back_the_named_files(tmp_path):
    # a composition without one PR's files: those back to the base, the rest composed
    import flag_gems

    composed = Path(flag_gems.__file__).parent
    added = "runtime/backend/_kunlunxin/ops/strided_copy.py"
    kept = "utils/launch_cache.py"
    out = compose.decompose(composed, tmp_path / "flag_gems", only=[COPY_REL, added])
    pre = composed / "_overlay_preimages" / COPY_REL
    assert (out / COPY_REL).read_bytes() == pre.read_bytes()
    assert (out / COPY_REL).read_bytes() != (composed / COPY_REL).read_bytes()
    assert not (out / added).exists()
    assert (out / kept).read_bytes() == (composed / kept).read_bytes()
    assert (out / "_overlay_info.py").is_file()
    whole = compose.decompose(composed, tmp_path / "base" / "flag_gems")
    assert not (whole / kept).exists() and not (whole / "_overlay_info.py").exists()
