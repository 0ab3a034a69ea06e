"""Object writers (polylines, streamlines, lines; graphs, skeletons, meshes): in memory (:mod:`.memory`),
streamed from batches (:mod:`.stream`) and split into tasks for many workers (:mod:`.tasks`), all writing
the same bytes; :mod:`.inputs` checks what they take, :mod:`.cells` holds their chunk-local steps."""
