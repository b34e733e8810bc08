"""The Ray cluster measurement runs on: starting or joining it (:func:`init_ray`), the node labels
that say what a node is for, the nodes builds may use (:func:`work_nodes`), whether a node may time a
descriptor's candidates (:func:`timing_refusal`), a worker's niceness, and short error lines.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

from ...target import CpuIdentity, Hardware

HARDWARE_LABEL = "tensorsearch.hardware"  # a node label: the descriptors timed there, comma-separated
EMULATES_LABEL = "tensorsearch.emulates"  # a node label: architectures it runs under qemu ("aarch64")
ROLE_LABEL = "tensorsearch.role"  # a node label: "timing" sets the node apart for timing (no builds, no search)


def ray_started() -> bool:
    """Whether this process is connected to Ray already."""
    import ray

    return ray.is_initialized()


def resolve_address(address: str | None) -> str | None:
    """The Ray cluster a run joins: ``address``; when None, the ``RAY_ADDRESS`` environment
    variable (as ``ray job submit`` sets it); None (a new private local cluster) when neither is
    set or ``address`` is "local"."""
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    return None if address in (None, "local") else address


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Connect to Ray once per process: the cluster :func:`resolve_address` names, else a new
    embedded local cluster (without dashboard, quiet logging). Later calls do nothing.

    ``num_cpus`` limits the local cluster's CPUs (all of the machine's by default). A SIGTERM
    handler the caller installed stays in place (Ray installs one of its own when it starts).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    if ray.is_initialized():
        return
    in_main = threading.current_thread() is threading.main_thread()
    caller_handler = signal.getsignal(signal.SIGTERM) if in_main else None
    _start_ray(resolve_address(address), num_cpus)
    if callable(caller_handler):
        signal.signal(signal.SIGTERM, caller_handler)


def _start_ray(address: str | None, num_cpus: int | None) -> None:
    import ray

    if address is None:
        ray.init(
            address="local",  # a new private cluster ("local" given, or no RAY_ADDRESS)
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            num_cpus=num_cpus,
            # Ray starts its workers this much nicer than its own processes, which inherit the
            # driver's niceness: 0 runs builds, search and timing at the command's priority
            # (Ray's default, 15, left them ~2% of a core beside a busy neighbour)
            _system_config={"worker_niceness": 0},
        )
    else:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


_MAX_ERROR_CHARS = 1000


def short_error(e: BaseException | str) -> str:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    text = text.strip()
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def ray_error_line(e: BaseException) -> str:
    """The first line of a Ray error, or the wrapped cause's ``Type: message``."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, type(e)):
        return f"{type(cause).__name__}: {cause}"
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(e).__name__


def take_niceness(niceness: int | None) -> str | None:
    """Set every thread of this process (a Ray worker's) to ``niceness``, the driver's: None when
    it is at that niceness now (or ``niceness`` is None), else why it could not be (lowering a
    niceness takes root or CAP_SYS_NICE)."""
    if niceness is None:
        return None
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if now == niceness:
        return None
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]  # Linux keeps a niceness per thread
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except OSError as e:
            return (
                f"its Ray workers run at niceness {now} and may not change it to the driver's {niceness} "
                f"({e.strerror or e}: lowering it takes root or CAP_SYS_NICE)"
            )
    return None


def work_nodes(nodes: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The alive nodes with CPUs that builds and search actors may use, and the Ray options that
    keep a task there: every such node but those labelled ``tensorsearch.role=timing`` (all of
    them, and no options, when every node is so labelled)."""
    alive = [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    free = [n for n in alive if (n.get("Labels") or {}).get(ROLE_LABEL) != "timing"]
    if not free or len(free) == len(alive):
        return alive, {}
    return free, {"label_selector": {ROLE_LABEL: "!timing"}}


def label_list(labels: dict[str, str], key: str) -> list[str]:
    """A node label's comma-separated values."""
    return [v.strip() for v in labels.get(key, "").split(",") if v.strip()]


def other_cpu(hw: Hardware, node: dict[str, Any]) -> str | None:
    """Why the node's CPU, as its runner reported it (:meth:`Runner.ready`), is not the one
    ``hw`` describes (``Hardware.why_not_machine``); None when it is, or the report has none."""
    if "identity" not in node:
        return None
    return hw.why_not_machine(CpuIdentity.from_json(node["identity"]), node.get("present"))


def timing_refusal(hw: Hardware, node: dict[str, Any], allow_other_cpu: bool = False) -> tuple[str | None, bool]:
    """(why a node may not time ``hw``'s candidates, or None; whether it runs them under qemu),
    from what its runner reported (:meth:`Runner.ready`): its ``tensorsearch.hardware`` label
    must name ``hw`` when it has one; its triple and CPU must run the code, or its
    ``tensorsearch.emulates`` label must name the architecture (with qemu installed there); and
    a node that runs the code natively must be the machine ``hw`` describes (:func:`other_cpu`),
    unless ``allow_other_cpu``."""
    if node["hardware"] and hw.name not in node["hardware"]:
        return f"its label {HARDWARE_LABEL}={','.join(node['hardware'])} does not name {hw.name}", False
    native = hw.why_not_runnable_on(node["triple"], node["absent"])
    if native is None and not allow_other_cpu and (other := other_cpu(hw, node)) is not None:
        return f"{other} (--allow-other-cpu, or allow_other_cpu=True, times there anyway)", False
    if native is None or hw.arch not in node["emulates"]:
        return native, False
    missing = node["emulation_missing"].get(hw.arch)
    if missing:
        return f"{native}, and it cannot emulate {hw.arch} ({missing})", False
    return None, True
