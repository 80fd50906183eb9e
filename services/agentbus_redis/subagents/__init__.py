"""Sub-agents on the bus (agent-loop.md §A): the glue around ``agents``.

``store`` (the Redis keys of children), ``launcher`` (the ``Agent`` tool run by a tool worker),
``relay`` (progress and the final result from a child to its parent, cancellation, limits),
``ingestion_hooks`` (the few calls the ingestion worker makes into the relay), ``tree`` (session trees).
"""
