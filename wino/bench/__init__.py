"""Benchmark, compare and tune: ``wino bench``, ``wino tune`` and ``wino plot``.

One concern per module: ``cases`` (case inputs, sharding), ``candidates`` (the grid's fitting
binaries per stage), ``select`` (a stage's binary by timing), ``stages`` (one stage's launches
alone), ``timing`` (host clock, CUDA-graph replays), ``host`` and ``cuda`` (the devices:
operands, reference, rates), ``accuracy`` (tolerances), ``roofline``, ``compare`` (cuDNN),
``results`` (the CSV), ``sweep`` (the case loop and the Best line), ``tune``, ``plot``,
``progress`` and ``cli`` (the subcommands' arguments and handlers).

Importing this package imports nothing heavy: ``wino grid`` stays light.
"""
