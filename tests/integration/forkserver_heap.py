"""Imported last by the test forkserver (``tests/integration/forked.py``): freezes the heap it has built.

Every forked worker starts with ``freeze_startup_heap``, whose ``gc.collect()`` traverses every object that is
not frozen. Without this, that was the whole heap the forkserver had imported, in every child, and writing
the collector's bookkeeping into those objects copied their pages too: a quarter of a forked worker's start-up
CPU. Frozen here, before any fork, the inherited objects sit in the permanent generation (CPython's advice for
servers that fork: ``gc.freeze()`` right before ``fork()``), and a child's collection walks only what it made.
"""

from __future__ import annotations

import gc

gc.collect()
gc.freeze()
