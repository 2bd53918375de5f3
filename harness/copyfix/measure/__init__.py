"""Measurements of PR 3 (the launch cache), one concern per module.

:mod:`.base_twins`   the same op on the base's own ``pointwise_dynamic`` (without PR 3),
                     in the same process: what "before" means
:mod:`.timing`       wall and device time per call (``Timer``), for these and ``copyfix.bench``
:mod:`.launch_cost`  host µs per call, eager / before / after and the launch floor:
                     ``results/launch_cache_h200.json``
:mod:`.miss_cost`    calls that do not hit (new signatures, a round robin over more
                     than the cap), cache on vs off: ``results/launch_cache_misses_h200.json``
"""
