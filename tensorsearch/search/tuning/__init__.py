"""The tuning loop: :func:`~.tuner.tune` (one function), :func:`~.scheduler.tune_model` (a budget
spread over a model's tasks), the hold on a work dir that keeps one run at a time
(:mod:`.workdir`), and the errors a run raises (:mod:`.errors`).
"""
