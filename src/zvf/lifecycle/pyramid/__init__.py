"""Multi-resolution pyramids: coarser levels built chunk block by chunk block (see docs/LIFECYCLE.md).

One coarsening step (level ``s`` -> ``s + 1``) is split so that an engine can map its work:

* :mod:`.plan` (pure) fixes the target grids and cuts the source level into blocks that never share an
  output, and reads back what a rebuild needs from the levels' metadata;
* :mod:`.coarsen` (pure numpy) turns one block's source cells into its target cells and link rows;
* :mod:`.tasks` is the map step, one code path for every engine: picklable block tasks that fetch,
  coarsen and upload blocks and return small summaries (``zvf.dask.build_pyramid`` runs them on workers);
* :mod:`.commit` writes each step's documents and object index from those summaries alone;
* :mod:`.writer` is the store writer whose publication replaces the root last, under the store's lock;
* :mod:`.build` is ``build_pyramid``: the steps in order, then the publication.

Exported here: what other packages use (the API's ``build_pyramid``, the Dask engine's task units, the
append's rebuild).
"""

from .build import PyramidSummary, build_locked, build_pyramid
from .plan import ChunkScales, Factors, pyramid_spec
from .tasks import BlockSummary, BlockTask, StepJob, run_block_task
from .writer import seed_section

__all__ = [
    "BlockSummary",
    "BlockTask",
    "ChunkScales",
    "Factors",
    "PyramidSummary",
    "StepJob",
    "build_locked",
    "build_pyramid",
    "pyramid_spec",
    "run_block_task",
    "seed_section",
]
