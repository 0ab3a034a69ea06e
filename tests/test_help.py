"""help(zvf), dir(zvf) and help(zvf.open) show the real API, and asking costs no heavy import."""

from __future__ import annotations

import pydoc
import subprocess
import sys

import zvf

PUBLIC = ["open", "write_points", "write_polylines", "write_lines", "write_graph", "write_mesh", "validate",
          "build_pyramid", "rechunk", "convert", "Dataset", "Selection", "StorageOptions", "WriteSummary",
          "aio", "config", "errors", "__version__"]


def test_dir_lists_the_public_api_only():
    names = dir(zvf)
    assert set(PUBLIC) <= set(names)
    assert not {"Any", "TYPE_CHECKING", "annotations", "_LAZY"} & set(names)


def test_help_zvf_summarises_the_api():
    text = pydoc.render_doc(zvf, renderer=pydoc.plaintext)
    for name in ("open(target", "write_points", "write_mesh", "build_pyramid", "convert", "Selection",
                 "storage_options", 'getLogger("zvf")'):
        assert name in text, name


def test_help_open_documents_its_parameters():
    text = pydoc.render_doc(zvf.open, renderer=pydoc.plaintext)
    assert "open(target" in text and "storage_options" in text
    for param in ("target:", "mode:", "storage_options:"):
        assert param in text, param
    assert "s3://bucket/prefix" in text and "endpoint" in text and "StoreNotFoundError" in text


def test_dir_and_docstring_stay_light():
    code = "import sys, zvf; dir(zvf); zvf.__doc__; print(sorted({'numpy', 'anyio', 'obstore'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
