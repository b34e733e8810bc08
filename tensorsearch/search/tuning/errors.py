"""The errors of a tuning run: :class:`TuneError` (tuning could not run) and :class:`TuneInputError`
(its arguments cannot work). Every module of the tuning loop raises them, the work dir's hold included."""

from __future__ import annotations


class TuneError(RuntimeError):
    """Tuning could not run (bad arguments, an empty design space, no valid candidate)."""


class TuneInputError(TuneError, ValueError):
    """The arguments of :func:`tune` cannot work (the CLI exits with code 2: a mistake in the input)."""
