"""Measurement: building candidates and timing them on Ray (:mod:`.measurer`: the cluster's set-up,
the builds, one runner actor per node, the reference outputs and the tolerance check, the runner
pool), and the latency statistic, the reference kernel and the host's conditions (:mod:`.noise`).
"""
