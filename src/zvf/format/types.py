"""Type aliases shared by the format layer (for type checkers only; nothing here exists at run time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from typing_extensions import Buffer

    #: Anything whose bytes can be viewed without a copy: bytes, memoryview, obstore Bytes, numpy arrays.
    BytesLike: TypeAlias = Buffer | NDArray[Any]
