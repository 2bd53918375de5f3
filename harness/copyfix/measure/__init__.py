"""Measurements, one concern per module: PR 3 (the launch cache) and the conversions
of PR 2 and PR 4.

:mod:`.base_twins`   the same op on the base's own ``pointwise_dynamic`` (without PR 3),
                     in the same process: what "before" means
:mod:`.timing`       wall and device time per call (``Timer``), for these and ``copyfix.bench``
:mod:`.floors`       the launch floors (``torch.library`` ops launching compiled Triton
                     kernels) that launch_cost measures against
:mod:`.launch_cost`  host µs per call, eager / before / after and the launch floor, and the
                     strided ``copy_`` rows' median over machine starts (``starts``):
                     ``results/launch_cache_h200.json``
:mod:`.miss_cost`    calls that do not hit (new signatures, a round robin over more
                     than the cap), cache on vs off: ``results/launch_cache_misses_h200.json``
:mod:`.decode`       end to end: a Hugging Face Llama decode under FlagGems, with and
                     without PR 3: ``results/decode_h200.json``
:mod:`.generic_conversions`  every (src, dst) dtype pair of ``copy_`` / ``_to_copy``, op vs
                     torch (results keep the cells that are not torch's):
                     ``results/{generic,to_copy}_conversions_*.json``
:mod:`.probe_conversions`    raw Triton conversions on the device (kernel in
                     :mod:`._probe_kernels`): ``results/conversions_h200.json``
"""
