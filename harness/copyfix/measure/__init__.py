"""Measurements of PR 7 (the launch cache) and of the conversions (the generic PR 5, the KunlunXIN PR 2).

:mod:`.base_twins` (the base's own ``pointwise_dynamic``: "before"), :mod:`.timing`,
:mod:`.floors` (the launch floors); :mod:`.launch_cost` (host µs per call,
``results/launch_cache_h200.json``), :mod:`.miss_cost` (calls that do not hit,
``results/launch_cache_misses_h200.json``), :mod:`.decode` (a Llama decode,
``results/decode_h200.json``); :mod:`.generic_conversions` (every dtype pair of
``copy_`` / ``_to_copy`` against torch, for the overlay tests) and
:mod:`.probe_conversions` (raw Triton conversions, ``results/conversions_h200.json``).
"""
