"""The search strategy: the evolutionary search that proposes each round's candidates from the
measured ones, the mutators' weights (:class:`~.strategy.evolutionary.SearchConfig`), and where candidates
are replayed (:mod:`.parallel`: in this process or on Ray actors).
"""
