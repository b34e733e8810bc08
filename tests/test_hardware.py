"""Hardware descriptors: the shipped YAML files, the host choice, and the error for every mistake."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from tensorsearch.hardware import Caches, Hardware, HardwareError, HardwareWarning
from tensorsearch.target import hardware

ZNVER4_FEATURES = frozenset(f[1:] for f in hardware.load("x86-znver4").features) | {"64bit", "sse", "sse2", "cx16"}

GOOD = """\
name: test-cpu
kind: cpu
triple: x86_64-unknown-linux-gnu
cpu: znver4
features: [+avx2, +fma]
cores: 4
vector_bits: 256
caches:
  l1d: 32 KiB
  l2: 1048576
  l3: 16 MiB
"""


def test_shipped_descriptors_load():
    assert set(hardware.available()) >= {"x86-znver4", "arm-graviton2"}
    x86 = hardware.load("x86-znver4")
    assert x86.name == "x86-znver4" and x86.kind == "cpu" and x86.cpu == "znver4"
    assert x86.triple == "x86_64-unknown-linux-gnu" and x86.arch == "x86_64"
    assert {"+avx512f", "+avx512vnni", "+avx512bf16"} <= set(x86.features)
    assert x86.vector_bits == 512 and x86.vector_lanes(32) == 16 and x86.cores >= 1
    assert x86.caches == Caches(l1d=32 * 1024, l2=1024**2, l3=32 * 1024**2)
    assert x86.feature_string == ",".join(x86.features) and x86.has_feature("avx512vnni")
    assert Path(x86.source).name == "x86-znver4.yaml"

    arm = hardware.load("arm-graviton2")
    assert (arm.triple, arm.cpu, arm.feature_string) == ("aarch64-unknown-linux-gnu", "neoverse-n1", "+neon,+dotprod")
    assert arm.cores == 64 and arm.vector_bits == 128 and arm.vector_lanes(8) == 16
    assert arm.caches == Caches(l1d=64 * 1024, l2=1024**2, l3=32 * 1024**2)


def test_shipped_descriptors_are_valid_llvm_targets():
    llvm.initialize_all_targets()
    for name in ("x86-znver4", "arm-graviton2"):
        hw = hardware.load(name)
        tm = llvm.Target.from_triple(hw.triple).create_target_machine(cpu=hw.cpu, features=hw.feature_string)
        assert hw.arch in tm.triple


def test_descriptor_is_frozen_hashable_and_loaded_once(tmp_path):
    a = hardware.load("x86-znver4")
    assert hardware.load("x86-znver4") is a
    assert {a: 1}[hardware.load(Path(a.source))] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.cores = 3  # type: ignore[misc]
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD)
    hw = hardware.load(str(path))
    assert hw.source == str(path) and hw.features == ("+avx2", "+fma")
    assert hw.caches == Caches(l1d=32768, l2=1048576, l3=16 * 1024**2)
    assert hardware.load(hw) is hw


def test_search_path_environment_variable(tmp_path, monkeypatch):
    (tmp_path / "test-cpu.yaml").write_text(GOOD)
    monkeypatch.setenv("TENSORSEARCH_HARDWARE_PATH", str(tmp_path))
    assert hardware.search_path("hardware")[0] == tmp_path
    assert hardware.load("test-cpu").cores == 4
    assert "test-cpu" in hardware.available()


def test_unknown_name_lists_known_descriptors():
    with pytest.raises(HardwareError, match=r"'no-such-cpu'.*no such hardware descriptor.*x86-znver4"):
        hardware.load("no-such-cpu")
    with pytest.raises(HardwareError, match="cannot read"):
        hardware.load("/nonexistent/dir/cpu.yaml")


def test_features_as_comma_separated_string(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.replace("[+avx2, +fma]", '"+avx2,+fma,-avx512f"'))
    assert hardware.load(path).features == ("+avx2", "+fma", "-avx512f")


def _broken(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


# (id, yaml text, key path in the error, a fragment of the message)
BROKEN = [
    ("missing-key", _broken(GOOD, "cores: 4\n", ""), "cores", "missing required key"),
    ("wrong-type", _broken(GOOD, "cores: 4", "cores: four"), "cores", "positive integer"),
    ("bool-cores", _broken(GOOD, "cores: 4", "cores: true"), "cores", "positive integer"),
    ("negative-cores", _broken(GOOD, "cores: 4", "cores: -4"), "cores", "found -4"),
    ("unknown-key", GOOD + "vectorbits: 256\n", "vectorbits", "known keys are: name, kind, triple"),
    ("unknown-nested-key", _broken(GOOD, "  l3: 16 MiB", "  l3: 16 MiB\n  l4: 1 GiB"), "caches.l4", "unknown key"),
    ("bad-triple", _broken(GOOD, "x86_64-unknown-linux-gnu", "x86_64-linux"), "triple", "target triple"),
    ("unknown-arch", _broken(GOOD, "x86_64-unknown", "z80-unknown"), "triple", "arch one of"),
    ("bad-feature", _broken(GOOD, "[+avx2, +fma]", "[+avx2, fma]"), "features[1]", '"+name" or "-name"'),
    ("feature-with-space", _broken(GOOD, "[+avx2, +fma]", '["+avx2 +fma"]'), "features[0]", "LLVM feature"),
    ("duplicate-feature", _broken(GOOD, "[+avx2, +fma]", "[+fma, +fma]"), "features[1]", "each feature once"),
    ("contradicting-feature", _broken(GOOD, "[+avx2, +fma]", "[+fma, -fma]"), "features[1]", "opposite sign"),
    ("features-not-list", _broken(GOOD, "[+avx2, +fma]", "{avx2: true}"), "features", "a list of LLVM features"),
    ("bad-kind", _broken(GOOD, "kind: cpu", "kind: tpu"), "kind", '"cpu" or "gpu"'),
    ("bad-vector-bits", _broken(GOOD, "vector_bits: 256", "vector_bits: 500"), "vector_bits", "power of two"),
    ("bad-cache-size", _broken(GOOD, "l2: 1048576", "l2: lots"), "caches.l2", "positive size in bytes"),
    ("zero-cache-size", _broken(GOOD, "l2: 1048576", "l2: 0"), "caches.l2", "found 0"),
    ("missing-cache", _broken(GOOD, "  l1d: 32 KiB\n", ""), "caches.l1d", "missing required key"),
    (
        "caches-not-mapping",
        _broken(GOOD, "caches:\n  l1d: 32 KiB\n  l2: 1048576\n  l3: 16 MiB", "caches: 3"),
        "caches",
        "mapping",
    ),
    ("bad-name", _broken(GOOD, "name: test-cpu", "name: test cpu"), "name", "letters, digits"),
    ("bad-cpu", _broken(GOOD, "cpu: znver4", "cpu: 4"), "cpu", "LLVM CPU name"),
    (
        "unknown-cpu",
        _broken(GOOD, "cpu: znver4", "cpu: znver44"),
        "cpu",
        "'znver44' is not a CPU LLVM knows for x86_64",
    ),
    (
        "typo-feature",
        _broken(GOOD, "[+avx2, +fma]", "[+avx2, +fmaa]"),
        "features[1]",
        "'+fmaa' is not a feature LLVM knows for x86_64",
    ),
    ("not-a-mapping", "- name: x\n- kind: cpu\n", "", "a YAML mapping"),
    ("empty-file", "", "", "found None"),
    ("yaml-syntax", "name: [unclosed\nkind: cpu\n", "", "not valid YAML at line"),
]


@pytest.mark.parametrize(("text", "key", "fragment"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_descriptor_names_file_and_key(tmp_path, text, key, fragment):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(HardwareError) as info:
        hardware.load(path)
    err = info.value
    assert err.source == str(path) and err.key == key
    message = str(err)
    where = f"{path}:{err.line}" if err.line is not None else str(path)  # the key's line, where it has one
    assert message.startswith(f"{where}: {key}: " if key else f"{where}: ")
    assert fragment in message


def test_an_error_names_the_line_of_its_key(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(_broken(GOOD, "features: [+avx2, +fma]", "featurs: [+avx2, +fma]"))
    with pytest.raises(HardwareError) as info:
        hardware.load(path)
    line = path.read_text().splitlines().index("featurs: [+avx2, +fma]") + 1
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: featurs: unknown key 'featurs'; did you mean 'features'? ")


def test_host_on_this_machine():
    hardware.host.cache_clear()
    cpu = llvm.get_host_cpu_name()
    features = {k for k, v in llvm.get_host_cpu_features().items() if v}
    shipped = [hardware.load(n) for n in hardware.available()]
    expected = next(
        (hw for hw in shipped if hardware._matches(hw, llvm.get_process_triple(), cpu, frozenset(features))), None
    )
    if expected is not None:
        hw = hardware.load("host")
        assert hw == dataclasses.replace(expected, cores=os.cpu_count())
        if cpu == "znver4":
            assert hw.name == "x86-znver4"
    else:  # e.g. an Intel host: nothing shipped matches, so a descriptor is derived and that is said
        with pytest.warns(HardwareWarning, match=f"derived from the CPU's reported name \\({cpu}\\)"):
            hw = hardware.load("host")
        assert hw.source is None and hw.cpu == cpu and hw.name == f"host-{cpu}"
        assert "no shipped descriptor matches" in hw.note
        assert set(hw.features) == {"+" + f for f in features}
        assert hw.cores == os.cpu_count()
        assert hw.caches.l1d > 0 and hw.caches.l2 >= hw.caches.l1d
    assert hardware.load("host") is hw  # chosen once per process
    assert hw.arch == llvm.get_process_triple().split("-")[0]


def test_host_picks_znver4_when_the_cpu_reports_it():
    hw = hardware._select_host("x86_64-unknown-linux-gnu", "znver4", ZNVER4_FEATURES | {"sse4a"})
    assert hw.name == "x86-znver4" and hw.source is not None
    assert hw.cores == (os.cpu_count() or hw.cores)


def test_host_picks_the_emerald_rapids_descriptor_with_amx_only_where_the_vm_exposes_amx():
    emr = {f[1:] for f in hardware.load("x86-emeraldrapids").features}
    amx = {"amx-tile", "amx-int8", "amx-bf16"}
    with_amx = hardware._select_host("x86_64-unknown-linux-gnu", "emeraldrapids", frozenset(emr | amx))
    assert with_amx.name == "x86-emeraldrapids-amx"
    assert [s.name for s in with_amx.intrinsic_sets] == ["x86-amx", "x86-avx512-vnni"]
    hidden = hardware._select_host("x86_64-unknown-linux-gnu", "emeraldrapids", frozenset(emr))
    assert hidden.name == "x86-emeraldrapids"
    assert [s.name for s in hidden.intrinsic_sets] == ["x86-avx512-vnni"]


def test_host_derives_a_descriptor_when_a_feature_is_missing():
    hw = hardware._select_host("x86_64-unknown-linux-gnu", "znver4", ZNVER4_FEATURES - {"avx512bf16"})
    assert hw.name == "host-znver4" and hw.source is None and "+avx512bf16" not in hw.features
    assert "checked" in hw.note and "x86-znver4" in hw.note
    assert hw.vector_bits == 512
    avx2_only = hardware._select_host("x86_64-unknown-linux-gnu", "haswell", frozenset({"avx", "avx2", "fma"}))
    assert avx2_only.vector_bits == 256
    arm = hardware._select_host("aarch64-unknown-linux-gnu", "neoverse-n1", frozenset({"neon", "dotprod", "crc"}))
    assert arm.name == "arm-graviton2"


def test_a_machine_is_the_descriptor_only_with_its_cpu_and_the_features_it_lists():
    znver4 = hardware.load("x86-znver4")
    zen = hardware.CpuIdentity("x86_64", "znver4", "AMD EPYC 9R14 96-Core Processor", "0123456789ab")
    assert znver4.why_not_machine(zen, ZNVER4_FEATURES) is None
    assert znver4.why_not_machine(zen, ZNVER4_FEATURES | {"amx-tile"}) is None  # features it does not list: either way
    xeon = dataclasses.replace(zen, cpu="icelake-server", model="Intel(R) Xeon(R) Processor @ 2.80GHz")
    assert znver4.why_not_machine(xeon, ZNVER4_FEATURES) == (
        "it is an x86_64 icelake-server (Intel(R) Xeon(R) Processor @ 2.80GHz), not a znver4"
    )
    assert znver4.why_not_machine(xeon, None) is not None  # the CPU alone tells
    assert znver4.why_not_machine(zen, ZNVER4_FEATURES - {"avx512bf16"}) == (
        "it is an x86_64 znver4 (AMD EPYC 9R14 96-Core Processor) without avx512bf16"
    )
    no_avx512 = dataclasses.replace(znver4, name="zen4-no-avx512", features=("+avx2", "-avx512f"))
    assert no_avx512.why_not_machine(zen, ZNVER4_FEATURES).endswith("with avx512f, which zen4-no-avx512 disables")
    generic = dataclasses.replace(znver4, cpu="x86-64-v3", features=("+avx2", "+fma"))
    assert generic.why_not_machine(xeon, ZNVER4_FEATURES) is None  # a generic CPU claims no model
    arm = dataclasses.replace(zen, arch="aarch64", cpu="neoverse-n1", model=None)
    assert znver4.why_not_machine(arm, ()) == "it is an aarch64 neoverse-n1, not an x86_64 machine"
    assert hardware.load("nvidia-sm86").why_not_machine(xeon, ()) is None  # a GPU descriptor describes no CPU


def test_this_machine_is_host_and_not_a_descriptor_of_another_cpu():
    here = hardware.host_identity()
    assert here.cpu == llvm.get_host_cpu_name() and len(here.features) == 12
    assert hardware.CpuIdentity.from_json(here.to_json()) == here
    host = hardware.load("host")
    assert host.why_not_this_machine() is None
    other = "znver3" if here.cpu != "znver3" else "skylake"
    why = dataclasses.replace(host, cpu=other).why_not_this_machine()
    assert why == f"it is an {here.describe()}, not a {other}"
    with pytest.raises(ValueError, match="the CPU identity's 'cpu' is missing or not a string"):
        hardware.CpuIdentity.from_json({"arch": "x86_64", "features": "0" * 12})


def test_cpuinfo_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD  EPYC 9R14\nflags\t: fpu\n")
    assert hardware._cpuinfo_model(info) == "AMD EPYC 9R14"
    info.write_text("processor\t: 0\nCPU part\t: 0xd0c\n")  # an aarch64 kernel's: no model name
    assert hardware._cpuinfo_model(info) is None
    assert hardware._cpuinfo_model(tmp_path / "missing") is None


def test_parse_from_string_and_hardware_fields_extensible():
    hw = hardware.parse(GOOD, "inline")
    assert isinstance(hw, Hardware) and hw.source == "inline"
    assert [f.name for f in dataclasses.fields(Hardware)][:8] == [
        "name",
        "kind",
        "triple",
        "cpu",
        "features",
        "cores",
        "vector_bits",
        "caches",
    ]
