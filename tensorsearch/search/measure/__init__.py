"""Measurement: building candidates and timing them on Ray, failures kept as results.

:mod:`.measurer` (the :class:`~.measurer.Measurer`: a batch built, then checked and timed; its
docstring tells the whole flow) over :mod:`.builder` (a candidate compiled in a Ray task),
:mod:`.pool` (one runner actor per node, lent to batches) and :mod:`.runner` (the actor: load,
check, time), :mod:`.check` (the reference outputs and the tolerance rule), :mod:`.cluster`
(starting or joining Ray, node labels, which nodes may build or time), :mod:`.results` (what a
build, a runner and a measurement give back), :mod:`.config` (:class:`~.config.MeasureConfig`, the
settings), :mod:`.interfaces` (the ``Builder`` and ``Runner`` seams), and :mod:`.noise` (the latency statistic, the reference kernel, the
host's conditions).
"""
