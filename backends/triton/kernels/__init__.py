"""The ``@triton.jit`` kernels of the triton backend, by family: :mod:`.primitives` and
:mod:`.row16` (shared building blocks), :mod:`.tile` (generic 2-D tiles, the tensor amax),
:mod:`.rowwise`, :mod:`.columnwise`, :mod:`.rht` (the butterfly RHT), :mod:`.rht_mma` (the
RHT on the tensor cores), :mod:`.gemm`. Host code (arguments, grids, checks) is one level up.

Nothing is imported here: ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, so the
kernel modules are imported at first use, after a test or a script has set it.
"""
