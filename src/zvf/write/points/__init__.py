"""Point-cloud writers: in memory (:mod:`.memory`), streamed from batches (:mod:`.stream`) and split into
tasks for many workers (:mod:`.tasks`), all writing the same bytes; :mod:`.level` is what they write after
the cells, :mod:`.categories` the attribute-chunked layout."""
