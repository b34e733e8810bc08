"""The design space: schedule rules (CPU and GPU) that turn a function into traces of sampled
decisions, the rule registry a descriptor's ``search:`` section names, the :class:`~.design.DesignSpace`
and its candidates, and the analytic traces (:mod:`.heuristics`) the search starts from.

Its modules import nothing else of the search but the postprocessors (:mod:`..postproc`), which
the design space applies to every sample.
"""
