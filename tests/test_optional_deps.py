"""The core install is jax, numpy, scipy and jaxtyping: without numba, h5py, scikit-learn and
tqdm (the extras kernels, io, data, progress) the linear algebra runs, progress bars are
silent and the readers that need an extra say how to install it. Checked in a fresh
interpreter where those four modules cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rdr_jax._src.optional import EXTRAS, progress_bar, require

SCRIPT = textwrap.dedent(r"""
    import sys, warnings
    for name in ("numba", "h5py", "sklearn", "tqdm"):
        sys.modules[name] = None          # "import name" now raises ImportError
    import jax, numpy as np
    import rdr_jax as R
    A = np.random.default_rng(0).standard_normal((60, 40)).astype(np.float32)
    key = jax.random.key(0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d = R.interpolative(key, A, 5, method=R.Method("lupp", sketch="sparse_sign"))
    print("sparse_sign cols", sorted(np.asarray(d.cols).tolist()))
    print("fallback warned", any("numba" in str(x.message) for x in w))
    np.save(sys.argv[1] + "/A.npy", A)
    M = R.DiskMatrix.open(sys.argv[1] + "/A.npy")
    c = R.streaming_cur(key, M, 5, progress=True)
    print("streaming_cur", c.C.shape)
    for call in (lambda: R.datasets.load_digits_matrix(),
                 lambda: R.DiskMatrix.open(sys.argv[1] + "/A.h5")):
        try:
            call()
        except ImportError as e:
            print("ImportError:", e)
""")


def test_core_runs_without_the_extras(tmp_path):
    (tmp_path / "A.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(x.startswith("sparse_sign cols") for x in lines), out.stdout
    assert "fallback warned True" in lines
    assert "streaming_cur (60, 5)" in lines
    errors = [x for x in lines if x.startswith("ImportError:")]
    assert len(errors) == 2, out.stdout
    assert "needs scikit-learn" in errors[0] and "pip install scikit-learn" in errors[0]
    assert '".[data]"' in errors[0]
    assert "needs h5py" in errors[1] and '".[io]"' in errors[1]


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"reading x needs h5py.*pip install h5py.*\[io\]"):
        require("h5py", "reading x")
    assert require("tqdm", "bars").__name__ == "tqdm"
    assert set(EXTRAS) == {"numba", "h5py", "sklearn", "tqdm"}


def test_progress_bar_without_tqdm_is_silent(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    bar = progress_bar(range(3), total=3, desc="x", disable=False)
    assert list(bar) == [0, 1, 2]
    bar.update(1)
    bar.set_postfix(loss=1.0)
    bar.close()
    assert capsys.readouterr().err == ""
    assert list(progress_bar(np.arange(2))) == [0, 1]
