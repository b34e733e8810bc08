"""torchvision's ResNet-50, MobileNet-V2, ViT-B/16 and EfficientNet-B0 exported to ONNX by torch itself.

Run from the repository root:

    python experiments/torchvision_models.py --setup             # once: torch + torchvision in .torch-env/
    python experiments/torchvision_models.py --export [--out DIR] [--models resnet50,vit_b_16]
    python experiments/torchvision_models.py --report [--out DIR]   # their ONNX ops, and what import makes of them

**The side environment.** torch and torchvision are never dependencies of tensorsearch or of CI.
``--setup`` makes a virtual environment in ``.torch-env/`` (git-ignored; ``--env DIR`` for another
place) with the project's Python and installs torch 2.14.1 and torchvision 0.29.1 (the release
built against it): the CPU-only builds (``+cpu``) from PyTorch's CPU wheel index where that index
answers, else the default builds from the ordinary index (CUDA-enabled, about 3 GB more, the same
code on the CPU; the default torchvision cannot run on a CPU-only torch); plus ``onnx`` and
``onnxscript`` (``torch.onnx`` imports it). Only ``--export`` uses that environment: this script
re-runs itself there (``--worker``); tensorsearch never imports torch.

**What ``--export`` writes**, into ``--out`` (default ``tensorsearch.graph.models.cache_dir() /
"torchvision"``, where ``tests/test_graph_torchvision.py`` looks): ``resnet50.onnx``,
``mobilenet_v2.onnx``, ``vit_b_16.onnx`` and ``efficientnet_b0.onnx``, each ``torchvision.models.NAME(weights=None)`` with
the random initialization of ``torch.manual_seed(0)``, in eval mode, traced on one 1x3x224x224
image by the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) at opset 17 with
constant folding, static shapes, input ``input`` and output ``output``; and ``export.json``: the
torch, torchvision and onnx versions, the opset, and each file's size, sha256 and weights. Every
file is written to a temporary name and renamed, so a reader never sees half of one.

**Weights.** torchvision's initialization alone makes poor test models: ViT-B/16's classification
head is all zeros (its output is exactly 0), and with BatchNorm statistics of mean 0 and variance
1 MobileNet-V2's output is of order 1e-9. So, unless ``--torchvision-init``, two changes follow
it: every parameter that is all zeros (biases, BatchNorm shifts, ViT's head) is drawn from
N(0, 0.02), so a dropped term shows in a comparison; and every BatchNorm's running statistics are
measured in train mode on 4 batches of 8 random images (a cumulative average, seeded), so eval
mode normalizes as in a trained network. The outputs are then of order 1 (on N(0, 1) images the
largest logit is about 1.9, 0.5 and 1.8; every intermediate activation peaks between 0.04 and 8).
The graphs are the same either way.

**What ``--report`` prints** (in the project's environment, no torch needed): a table of the ONNX
operator types per file, the attributes that decide lowerings (Conv padding, Gemm transposes, Clip
bounds, Flatten axis, ...), then each file through ``tensorsearch.graph.from_onnx`` with every
operator accepted (``supported_ops`` patched), so that shape inference and constant folding run
whatever lowerings exist: the operator counts of the imported graph, or the import's error, and
which of the remaining operators have no lowering yet; ``--detail`` adds every distinct node form
of the imported graphs (op, attributes, input and output shapes, small constants by value).

Errors are one line (``--debug`` for the traceback); without the side environment ``--export``
says to run ``--setup`` first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import outputs  # noqa: E402  (stdlib only: the side environment imports it too)

ENV_DIR = ROOT / ".torch-env"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH, TORCHVISION = "2.14.1", "0.29.1"  # a torchvision release is built against one torch release
CPU_PINS = [f"torch=={TORCH}+cpu", f"torchvision=={TORCHVISION}+cpu"]  # CPU-only: from CPU_INDEX only
DEFAULT_PINS = [f"torch=={TORCH}", f"torchvision=={TORCHVISION}"]  # the CUDA-enabled builds (~3 GB more)
EXTRAS = ["onnx", "onnxscript"]  # torch.onnx imports onnxscript; onnx checks what it wrote
SETUP_CMD = "python experiments/torchvision_models.py --setup"
MODELS = ("resnet50", "mobilenet_v2", "vit_b_16", "efficientnet_b0")
OPSET = 17
IMAGE = (1, 3, 224, 224)
SEED = 0
MANIFEST = "export.json"
ZERO_STD = 0.02  # what the all-zero parameters are drawn with
CALIBRATION = (4, 8)  # batches, images per batch: the BatchNorm statistics


class Failure(Exception):
    """An error a person can act on: printed in one line (a traceback only with --debug)."""


# ---------------------------------------------------------------- the side environment


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def setup_env(env: Path) -> None:
    """Create ``env`` with the project's Python; install torch and torchvision (CPU-only where that index answers)."""
    python = env_python(env)
    if not python.exists():
        print(f"creating {outputs.show(env)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    # git ignores the whole folder wherever it is (what Python 3.13's venv writes by itself)
    (env / ".gitignore").write_text("# created by experiments/torchvision_models.py --setup\n*\n")
    if reachable(CPU_INDEX):
        pins, index = CPU_PINS, ["--extra-index-url", CPU_INDEX]
    else:
        print(
            f"{CPU_INDEX} cannot be reached: installing the default torch builds instead "
            "(CUDA-enabled, about 3 GB more; they run on the CPU all the same)",
            file=sys.stderr,
        )
        pins, index = DEFAULT_PINS, []
    pip = [str(python), "-m", "pip", "install", *index, *pins, *EXTRAS]
    if subprocess.run(pip).returncode != 0:
        raise Failure(f"pip could not install {' '.join(pins + EXTRAS)} into {outputs.show(env)}")
    print(f"{side_versions(env)} in {outputs.show(python)}")


def reachable(url: str) -> bool:
    """Whether ``url`` answers at all (pip retries an unreachable index for minutes per package)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/torch/", timeout=15):
            return True
    except OSError:  # URLError, timeouts, refused connections, HTTP errors
        return False


def side_versions(env: Path) -> str:
    """torch's and torchvision's versions in ``env``, or :class:`Failure` saying to run --setup."""
    python = env_python(env)
    if not python.exists():
        raise Failure(f"no torch side environment at {outputs.show(env)}; run --setup first: {SETUP_CMD}")
    code = "import torch, torchvision; print(f'torch {torch.__version__}, torchvision {torchvision.__version__}')"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=_side_env())
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise Failure(f"{outputs.show(python)} cannot import torch and torchvision ({last}); run --setup first")
    return out.stdout.strip()


def _side_env() -> dict[str, str]:
    """The environment for the side Python: nothing from ours leaks into its imports."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def export_in_side_env(env: Path, out: Path, models: list[str], debug: bool, torchvision_init: bool) -> None:
    """Run :func:`worker_export` in the side environment's Python (one process, models in turn)."""
    side_versions(env)
    cmd = [str(env_python(env)), str(Path(__file__).resolve()), "--worker", "--out", str(out), "--models"]
    cmd.append(",".join(models))
    if debug:
        cmd.append("--debug")
    if torchvision_init:
        cmd.append("--torchvision-init")
    if subprocess.run(cmd, env=_side_env(), cwd=str(ROOT)).returncode != 0:
        raise Failure("the export in the side environment failed (its message is above)")


# ---------------------------------------------------------------- inside the side environment


def worker_export(out: Path, models: list[str], torchvision_init: bool = False) -> None:
    """Export each model with torch's TorchScript exporter; write the files and the manifest atomically."""
    import warnings

    import onnx
    import torch
    import torchvision

    torch.set_num_threads(1)  # a shared machine: tracing is not worth more cores
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out)
    manifest.update(
        torch=torch.__version__,
        torchvision=torchvision.__version__,
        onnx=onnx.__version__,
        opset=OPSET,
        exporter="torch.onnx.export, TorchScript (dynamo=False), do_constant_folding=True",
        input_shape=list(IMAGE),
    )
    files = manifest.setdefault("files", {})
    for name in models:
        torch.manual_seed(SEED)
        model = getattr(torchvision.models, name)(weights=None)
        weights = f"torchvision's random initialization (weights=None) after torch.manual_seed({SEED})"
        if not torchvision_init:
            weights += "; " + _fill_zeros(model, torch) + "; " + _calibrate_batchnorm(model, torch)
        model.eval()
        image = torch.randn(*IMAGE)
        path = out / f"{name}.onnx"
        # not under torch.no_grad(): without autograd, MultiheadAttention takes its fused fast path
        # (aten::_native_multi_head_attention), which the TorchScript exporter cannot export
        with _atomic(path) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings, and dynamo=False's deprecation notice
            torch.onnx.export(
                model,
                (image,),
                str(tmp),
                dynamo=False,
                opset_version=OPSET,
                do_constant_folding=True,
                input_names=["input"],
                output_names=["output"],
            )
            onnx.checker.check_model(str(tmp))
        files[name] = {"file": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path), "weights": weights}
        print(f"{name}: {outputs.show(path)}, {path.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
        _write_manifest(out, manifest)


def _fill_zeros(model, torch) -> str:
    """Draw N(0, ZERO_STD) values for every parameter torchvision initializes to all zeros: biases,
    BatchNorm shifts, and ViT's whole classification head (its output would be exactly 0)."""
    zero = [p for p in model.parameters() if not p.detach().any()]
    with torch.no_grad():
        for p in zero:
            p.normal_(0.0, ZERO_STD)
    return f"the {len(zero)} all-zero parameters drawn from N(0, {ZERO_STD})"


def _calibrate_batchnorm(model, torch) -> str:
    """Set every BatchNorm's running statistics to the batch statistics of random images (a
    cumulative average over CALIBRATION batches in train mode), so that eval mode normalizes as a
    trained network's does; with torchvision's statistics (mean 0, variance 1) MobileNet-V2's
    activations shrink by 1e-9 over its depth."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return "no BatchNorm"
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average
    generator = torch.Generator().manual_seed(SEED + 1)
    model.train()
    with torch.no_grad():
        for _ in range(CALIBRATION[0]):
            model(torch.randn(CALIBRATION[1], *IMAGE[1:], generator=generator))
    for m, momentum in zip(norms, saved):
        m.momentum = momentum
    batches, size = CALIBRATION
    return f"BatchNorm statistics measured in train mode on {batches} batches of {size} N(0, 1) images"


def _read_manifest(out: Path) -> dict:
    try:
        return json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def _write_manifest(out: Path, manifest: dict) -> None:
    with _atomic(out / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _atomic:
    """``with _atomic(path) as tmp``: write ``tmp``; on success it is renamed to ``path``."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> Path:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; these are not
        self.tmp = Path(tmp)
        return self.tmp

    def __exit__(self, kind, err, tb) -> None:
        if kind is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- the report (project's environment)

# attributes worth knowing per op type (what a lowering must handle)
NOTABLE = {
    "Conv": ("auto_pad", "pads", "strides", "dilations", "group", "kernel_shape"),
    "MaxPool": ("auto_pad", "pads", "strides", "kernel_shape", "ceil_mode", "dilations", "storage_order"),
    "AveragePool": ("auto_pad", "pads", "strides", "kernel_shape", "ceil_mode", "count_include_pad"),
    "Gemm": ("transA", "transB", "alpha", "beta"),
    "Flatten": ("axis",),
    "Softmax": ("axis",),
    "LayerNormalization": ("axis", "epsilon", "stash_type"),
    "Transpose": ("perm",),
    "Concat": ("axis",),
    "Gather": ("axis",),
    "Split": ("axis",),
    "Squeeze": (),
    "Unsqueeze": (),
    "ReduceMean": ("axes", "keepdims"),
    "BatchNormalization": ("epsilon", "momentum"),
}


def op_table(models: dict[str, object]) -> str:
    """A markdown table: op type, then its count in each model."""
    counts = {name: Counter(n.op_type for n in m.graph.node) for name, m in models.items()}
    ops = sorted(set().union(*counts.values()))
    head = "| op | " + " | ".join(models) + " |\n|---|" + "---:|" * len(models)
    rows = [f"| {op} | " + " | ".join(str(counts[m].get(op, "")) for m in models) + " |" for op in ops]
    total = "| **nodes** | " + " | ".join(str(sum(c.values())) for c in counts.values()) + " |"
    return "\n".join([head, *rows, total])


def attr_notes(name: str, model) -> list[str]:
    """One line per (op, notable attributes, which inputs are constant) combination, with its count."""
    from onnx import helper

    consts = {t.name for t in model.graph.initializer}
    seen: Counter = Counter()
    for n in model.graph.node:
        if n.op_type == "Constant" or (n.input and all(not i or i in consts for i in n.input)):
            consts.update(n.output)  # folded at import (Identity of a weight, shape arithmetic on constants)
            continue
        keys = NOTABLE.get(n.op_type)
        if keys is None and n.op_type not in ("Clip", "Reshape", "Expand", "Slice", "Div", "Mul"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        shown = [f"{k}={_short(attrs[k])}" for k in (keys or ()) if k in attrs]
        shown += [f"{k}={_short(v)}" for k, v in attrs.items() if keys is not None and k not in keys]
        ins = ["const" if i in consts else ("-" if not i else "x") for i in n.input]
        seen[f"{n.op_type}({', '.join(ins)}) {' '.join(shown)}".rstrip()] += 1
    return [f"{name}: {k}  x{v}" for k, v in sorted(seen.items())]


def signatures(graph) -> list[str]:
    """The imported graph's distinct node forms: op, attributes, input shapes (constants with their
    value when small) and output shapes, with their counts."""
    seen: Counter = Counter()
    for n in graph.nodes:
        ins = []
        for i in n.inputs:
            if not i:
                ins.append("-")
                continue
            v = graph.values[i]
            c = graph.constants.get(i)
            ins.append(
                f"const {c.ravel().tolist()}"
                if c is not None and c.size <= 8
                else ("const " if c is not None else "") + f"{v.dtype}{list(v.shape)}"
            )
        outs = [f"{graph.values[o].dtype}{list(graph.values[o].shape)}" for o in n.outputs if o]
        attrs = " ".join(f"{k}={_short(v)}" for k, v in sorted(n.attrs.items()))
        seen[f"{n.op}({', '.join(ins)}) -> {', '.join(outs)} {attrs}".rstrip()] += 1
    return [f"  x{v:<3} {k}" for k, v in sorted(seen.items())]


def _short(v) -> str:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list | tuple):
        return "[" + ",".join(map(str, v)) + "]"
    return str(v)


def import_report(name: str, path: Path, detail: bool = False) -> list[str]:
    """``from_onnx`` with every op type of the file accepted: the imported graph's op counts, or the error."""
    import onnx

    from tensorsearch.graph import onnx_import
    from tensorsearch.graph.ir import GraphError

    real = set(onnx_import.supported_ops())
    every = sorted({n.op_type for n in onnx.load(path, load_external_data=False).graph.node})
    saved = onnx_import.supported_ops
    onnx_import.supported_ops = lambda: every
    try:
        graph = onnx_import.from_onnx(path)
    except GraphError as err:
        return [f"{name}: import FAILED: {err}"]
    finally:
        onnx_import.supported_ops = saved
    counts = graph.op_counts()
    missing = sorted(op for op in counts if op not in real)
    lines = [f"{name}: imported: {len(graph.nodes)} nodes, {len(graph.constants)} constants"]
    lines += [f"  {op}: {k}" for op, k in sorted(counts.items())]
    lines.append(f"  without a lowering yet: {', '.join(missing) or 'none'}")
    return lines + (signatures(graph) if detail else [])


def report(out: Path, models: list[str], detail: bool = False) -> None:
    import onnx

    sys.path.insert(0, str(ROOT))  # the checkout this script is in, not an installed tensorsearch
    import tensorsearch

    paths = {m: out / f"{m}.onnx" for m in models}
    absent = [outputs.show(p) for p in paths.values() if not p.is_file()]
    if absent:
        raise Failure(f"no exported file {', '.join(absent)}; run --setup and --export first")
    protos = {m: onnx.load(p) for m, p in paths.items()}
    manifest = _read_manifest(out)
    if manifest:
        print(
            f"torch {manifest.get('torch')}, torchvision {manifest.get('torchvision')}, opset {manifest.get('opset')}"
        )
    print(f"lowerings: the tensorsearch at {outputs.show(Path(tensorsearch.__file__).parent)}/")
    for m, proto in protos.items():
        opsets = {i.domain or "ai.onnx": i.version for i in proto.opset_import}
        print(
            f"{m}: opset_import {opsets}, IR version {proto.ir_version}, producer {proto.producer_name} "
            f"{proto.producer_version}"
        )
    print("\n" + op_table(protos) + "\n")
    for m, proto in protos.items():
        print("\n".join(attr_notes(m, proto)))
    print()
    for m, path in paths.items():
        print("\n".join(import_report(m, path, detail)))


# ---------------------------------------------------------------- command line


def default_out() -> Path:
    """tensorsearch's model cache / torchvision (without importing tensorsearch: the side env lacks it)."""
    root = os.environ.get("TENSORSEARCH_CACHE")
    if root:
        return Path(root).expanduser() / "models" / "torchvision"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tensorsearch" / "models" / "torchvision"


def parse_models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise Failure(f"--models: {', '.join(unknown) or 'none given'}; the models are {', '.join(MODELS)}")
    return models


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="create the torch side environment")
    ap.add_argument("--export", action="store_true", help="export the models to ONNX (in the side environment)")
    ap.add_argument(
        "--torchvision-init",
        action="store_true",
        help="--export: torchvision's initialization as it is (ViT's output is then all zeros)",
    )
    ap.add_argument("--report", action="store_true", help="print the exported files' ops and what import makes of them")
    ap.add_argument("--detail", action="store_true", help="--report: every distinct node form of the imported graphs")
    ap.add_argument(
        "--out", metavar="DIR", help="where the ONNX files go (default: tensorsearch's model cache/torchvision)"
    )
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    ap.add_argument("--env", metavar="DIR", default=str(ENV_DIR), help="the side environment (default .torch-env/)")
    ap.add_argument("--debug", action="store_true", help="tracebacks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # --export, in the side environment
    args = ap.parse_args(argv)
    if not (args.setup or args.export or args.report or args.worker):
        ap.error("nothing to do: give --setup, --export and/or --report")
    try:
        models = parse_models(args.models)
        out = outputs.check_untracked(args.out, "--out") if args.out else default_out()
        env = Path(args.env).absolute()
        if args.worker:
            worker_export(out, models, args.torchvision_init)
            return 0
        if args.setup:
            setup_env(env)
        if args.export:
            export_in_side_env(env, out, models, args.debug, args.torchvision_init)
            print(f"wrote {', '.join(f'{m}.onnx' for m in models)} and {MANIFEST} to {outputs.show(out)}/")
        if args.report:
            report(out, models, args.detail)
    except (Failure, outputs.OutputError) as err:
        print(f"torchvision_models.py: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if args.debug:
            traceback.print_exc()
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        print(
            f"torchvision_models.py: error: {type(err).__name__}: {first} (--debug for the traceback)", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
