"""Issue 27: a mistyped keyword is reported as itself, with the closest name the writer takes, before anything
else -- ``chunk_shap=`` used to read as a missing ``chunk_shape`` -- by every writer, given arrays or batches,
blocking, async or on Dask."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import UnknownArgumentError

P = np.zeros((4, 3))
E = np.array([[0, 1], [1, 2]])
F = np.array([[0, 1, 2]])

CALLS = {
    "write_points": lambda w, t, **kw: w(t, P, **kw),
    "write_points batches": lambda w, t, **kw: w(t, iter([P]), **kw),
    "write_polylines": lambda w, t, **kw: w(t, [P], **kw),
    "write_polylines batches": lambda w, t, **kw: w(t, iter([[P]]), **kw),
    "write_lines": lambda w, t, **kw: w(t, P.reshape(2, 2, 3), **kw),
    "write_graph": lambda w, t, **kw: w(t, P, E, **kw),
    "write_mesh": lambda w, t, **kw: w(t, P, F, **kw),
}


def _writer(api, name: str):
    return getattr(api, name.split()[0])


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(("given", "named", "closest"), [
    ({"chunk_shap": (1.0,) * 3}, "chunk_shap", "chunk_shape"),  # and no chunk_shape: not "missing chunk_shape"
    ({"chunk_shape": (1.0,) * 3, "bin_shap": (0.5,) * 3}, "bin_shap", "bin_shape"),
    ({"chunk_shape": (1.0,) * 3, "compresion": "zstd"}, "compresion", "compression"),
])
def test_unknown_keyword_is_named_with_the_closest(tmp_path, call, given, named, closest):
    with pytest.raises(UnknownArgumentError, match=rf"unexpected keyword argument '{named}'; did you mean "
                                                   rf"'{closest}'\?"):
        CALLS[call](_writer(zvf, call), tmp_path / "s", **given)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_async_writers_too(tmp_path, call):
    with pytest.raises(UnknownArgumentError, match="'chunk_shap'; did you mean 'chunk_shape'"):
        await CALLS[call](_writer(zvf.aio, call), tmp_path / "s", chunk_shap=(1.0,) * 3)


def test_a_missing_chunk_shape_is_still_said(tmp_path):
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'chunk_shape'"):
        zvf.write_points(tmp_path / "s", P, bin_shape=(0.5,) * 3)


def test_the_unknown_keyword_is_a_type_error_too(tmp_path):
    with pytest.raises(TypeError, match="'chunk_shap'"):
        zvf.write_polylines(tmp_path / "s", [P], chunk_shap=(1.0,) * 3)


@pytest.mark.parametrize("name", ["write_points", "write_polylines", "write_lines", "write_graph", "write_mesh"])
def test_dask_writers_too(tmp_path, name):
    zd = pytest.importorskip("zvf.dask")
    with pytest.raises(UnknownArgumentError, match="'chunk_shap'; did you mean 'chunk_shape'"):
        getattr(zd, name)(str(tmp_path / "s"), [], chunk_shap=(1.0,) * 3)
