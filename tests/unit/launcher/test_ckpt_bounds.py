"""A checkpoint's files can attack the reader's resources as well as its code (issue 49's review): a tuple nested a
million deep used as a dict key (``hash`` recursed in C: SIGSEGV), a deflated zip member of 1 KB that inflates to
GBs, a stride-0 tensor view of 2**30 elements over one byte, a 1 GiB tracker, a shape of memo references that
``math.prod`` takes minutes over, an object rebuilt again and again from one shared state. Each is refused in one
line, exit 2, naming the file, with memory and time in proportion to the file; and odd values in a real
``.metadata`` (an offset that is a string) are one line too, never a traceback.

What could crash a reader runs in a child (a regression is a failed test, not a dead pytest), and what could eat
memory runs under an address-space cap of :data:`CAP` over what the child holds once its imports are done: a
regression there is a MemoryError (or a crash), never the machine swapping. The crafted files are in
tests/support/hostile_checkpoint.py."""

from __future__ import annotations

import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mtk.launcher import ckpt_precheck, launch_checks
from mtk.launcher.ckpt_precheck import CheckpointDamaged, check_resume_checkpoint
from support.fs_witness import inside, touched

from mtk.spec import load_job

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "examples" / "tiny.yaml")
PLAIN = ROOT / "tests" / "fixtures" / "megatron_lm" / "plain_tp2"
CAP = 768 << 20  # bytes of address space a child may add to what its imports took
GIB = 1 << 30
NEVER = "which a checkpoint never holds; refusing to load it"

# The child: reads cases from its code, runs each, prints one JSON line per case (what it raised, and its message).
CHILD = r"""
import json, resource, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
import numpy, torch  # the reader's own imports, before the cap
from support import hostile_checkpoint as h
from mtk import checkpoint_unpickle as cu
from mtk.exitcodes import UserFacingError
from mtk.launcher import ckpt_precheck, launch_checks
from mtk.spec import load_job
from mtk.training import checkpoint_layout
ARGS = json.loads(sys.argv[3])
CASES = {}
%s
if int(sys.argv[2]):
    size = int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[2]),) * 2)
for name, case in CASES.items():
    try:
        got = case()
        print(json.dumps([name, "loaded", got if isinstance(got, str) else repr(got)[:300]]), flush=True)
    except UserFacingError as exc:
        print(json.dumps([name, type(exc).__name__, str(exc), getattr(exc, "exit_code", None)]), flush=True)
    except BaseException as exc:
        print(json.dumps([name, "failed", f"{type(exc).__name__}: {str(exc)[:300]}", None]), flush=True)
"""


def _no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_cases(cases: str, cap: int = 0, **args) -> dict[str, list]:
    """Run ``cases`` (Python defining CASES[name] = a function) in a child, under ``cap`` more bytes of address
    space when given; each case's [kind, message, exit code]. A child that dies fails the test here."""
    out = subprocess.run([sys.executable, "-c", CHILD % cases, str(ROOT / "tests"), str(cap), json.dumps(args)],
                         capture_output=True, text=True, timeout=600, preexec_fn=_no_core_dump,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    got = {line[0]: line[1:] for line in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0, (out.returncode, got, out.stderr[-3000:])
    return got


def assert_refused(got: dict[str, list], expected: dict[str, tuple[str, str]]) -> None:
    """Each case raised the expected class, exit 2, in one line holding the expected words."""
    assert got.keys() == expected.keys(), (got, expected)
    for name, (kind, said) in expected.items():
        assert got[name][0] == kind and said in got[name][1], (name, got[name])
        assert "\n" not in got[name][1] and got[name][2] == 2, (name, got[name])


# -- 1. nesting: bounded as it is built, before anything hashes or walks it -------------------------------------
def test_nesting_is_bounded_before_anything_hashes_or_walks_it():
    """A million-deep tuple as a dict key killed every reader of a ``.metadata`` (SIGSEGV in ``hash``). The machine
    refuses past 64 levels as it builds them, never lets a container change once it is inside another (no cycle, no
    value changed after a rule checked it) and takes only flat dict keys (a key of shared tuples hashes in
    width**levels)."""
    got = run_cases("""
CASES["deep-key-metadata"] = lambda: cu.load_metadata(h.deep_key(1_000_000), "F")
CASES["deep-key-object"] = lambda: cu.load_torch(h.torch_file(h.deep_key(1_000_000)), "F", "common state")
CASES["deep-list"] = lambda: cu.load_torch(h.torch_file(h.deep_list(100_000)), "F", "common state")
CASES["deep-list-64"] = lambda: cu.load_torch(h.torch_file(h.deep_list(64)), "F", "common state")
CASES["deep-list-65"] = lambda: cu.load_torch(h.torch_file(h.deep_list(65)), "F", "common state")
CASES["list-in-itself"] = lambda: cu.load_torch(h.torch_file(h.list_in_itself()), "F", "common state")
CASES["changed-after-use"] = lambda: cu.load_torch(h.torch_file(h.changed_after_use()), "F", "common state")
CASES["shared-tuple-key"] = lambda: cu.load_torch(h.torch_file(h.shared_tuple_key(64, 8)), "F", "common state")
""")
    assert got.pop("deep-list-64")[0] == "loaded", got
    deep = ("CheckpointRefused", f"values nested more than 64 deep, {NEVER}")
    assert_refused(got, {
        "deep-key-metadata": ("CheckpointRefused", "F: the checkpoint metadata holds values nested more than 64 deep"),
        "deep-key-object": deep, "deep-list": deep, "deep-list-65": deep,
        "list-in-itself": ("CheckpointRefused", "APPEND into a list already placed inside another value"),
        "changed-after-use": ("CheckpointRefused", "APPEND into a list already placed inside another value"),
        "shared-tuple-key": ("CheckpointRefused", "a dict key that is a tuple of 64 values or holding other values"),
    })


# -- what admitted callables build: in proportion to the file ----------------------------------------------------
def test_what_admitted_callables_build_is_bounded_by_the_file():
    """Admitted classes and functions handed one memoised value again and again: a Namespace rebuilt 40,000 times
    from one state of 10,000 attributes (250 KB: 4·10**8 attribute slots), a path joined from 1,000 references to
    one 1 MiB string, a numpy shape of 10,000 references to 2**62 (``math.prod`` is quadratic in it). Refused, under
    a memory cap a regression would hit."""
    got = run_cases("""
CASES["attribute-bomb"] = lambda: cu.load_torch(h.torch_file(h.attribute_bomb(10_000, 40_000)), "F", "common state")
CASES["numpy-shape"] = lambda: cu.scan_torch(h.io.BytesIO(h.torch_file(h.numpy_shape_bomb(10_000))), "F", "rng_state")
path = h.op_global("pathlib", "PosixPath") + h.MARK + h.op_str("a" * (1 << 20)) + h.MEMOIZE + h.op_get(0) * 1000
CASES["path-join"] = lambda: cu.load_metadata(h.PROTO4 + path + h.TUPLE + h.REDUCE + h.STOP, "F")
""", cap=CAP)
    assert_refused(got, {
        "attribute-bomb": ("CheckpointRefused", "argparse.Namespace attributes built from shared values again and "
                                                "again (more than 4 units per byte of the pickle)"),
        "numpy-shape": ("CheckpointRefused", "F: the rng_state holds a numpy array of 10001 dimensions (at most 64)"),
        "path-join": ("CheckpointRefused", "REDUCE calling pathlib.PosixPath with other than strings of at most 4096"),
    })


# -- 2, 8. the zip: only stored members, inside the file, each CRC checked ---------------------------------------
def test_a_zip_member_is_read_only_when_stored_inside_the_file_and_whole():
    """torch never compresses: a deflated ``data.pkl`` of 1 GiB in 1 MB is refused before anything is inflated; a
    member declaring more bytes than the file holds is damaged, unread; a stored tensor whose bytes fail their CRC
    is one line naming the file (it was zipfile's raw BadZipFile)."""
    got = run_cases("""
bomb = h.compressed_torch_file(h.PROTO4 + h.EMPTY_DICT + h.STOP, 1 << 30)
CASES["deflated-bomb"] = lambda: cu.load_torch(bomb, "F", "common state")
CASES["deflated-bomb-scan"] = lambda: cu.scan_torch(h.io.BytesIO(bomb), "F", "common state")
CASES["oversized"] = lambda: cu.load_torch(h.oversized_member(h.torch_file(h.PROTO4 + h.EMPTY_DICT + h.STOP),
                                                                "archive/data.pkl", 1 << 31), "F", "common state")
flipped = h.flipped_storage_byte(h.torch_bytes(torch.arange(64, dtype=torch.float32)))
CASES["crc-tensor"] = lambda: cu.load_tensor(flipped, "F")
CASES["crc-object"] = lambda: cu.load_torch(flipped, "F", "rng_state")
""", cap=CAP)
    compressed = ("CheckpointRefused", f"F: the common state holds a compressed zip member 'archive/data.pkl' "
                                       f"(torch.save never compresses), {NEVER}")
    crc = "cannot be read: zip member 'archive/data/0' cannot be read (Bad CRC-32"
    assert_refused(got, {
        "deflated-bomb": compressed, "deflated-bomb-scan": compressed,
        "oversized": ("CheckpointDamagedPickle", "F: the common state cannot be read: zip member 'archive/data.pkl' "
                                                 f"declares {1 << 31} bytes beyond the file's"),
        "crc-tensor": ("CheckpointDamagedPickle", f"F: the tensor data {crc}"),
        "crc-object": ("CheckpointDamagedPickle", f"F: the rng_state {crc}"),
    })


# -- 3. a tensor view holds no more elements than its storage ----------------------------------------------------
def test_a_tensor_view_never_claims_more_elements_than_its_storage():
    """A stride-0 view of 2**30 elements over one byte (1.5 KB) in a module's FP8 extra state: its bytes were
    materialised (``.contiguous()``) before the reader ran on them. Refused as it is rebuilt; real views (a slice,
    a transpose) still load."""
    got = run_cases("""
big = h.expanded_tensor(1 << 30)
CASES["expanded-extra-state"] = lambda: cu.check_extra_state(cu.load_torch(big, "F", "x._extra_state"), "F")
CASES["expanded-tensor-item"] = lambda: cu.load_tensor(big, "F")
view = torch.arange(24.0).reshape(4, 6).t()[1:4]
CASES["real-views"] = lambda: torch.equal(cu.load_tensor(h.torch_bytes(view), "F"), view)
""", cap=CAP)
    assert got.pop("real-views")[:2] == ["loaded", "True"], got
    assert_refused(got, {
        "expanded-extra-state": ("CheckpointRefused", "F: the x._extra_state holds a tensor view of 1073741824 "
                                                      "elements over a storage of 1 from offset 0"),
        "expanded-tensor-item": ("CheckpointRefused", "F: the tensor data holds a tensor view of 1073741824"),
    })


# -- the resume precheck: each kind through the node step's reader, a damaged file one line too -----------------
def _copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of Megatron-LM's checkpoint: (its checkpoint dir, its tracked iteration dir)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(PLAIN / "checkpoints", ckpt)
    return ckpt, ckpt / "iter_0000004"


def _key(iter_dir: Path, prefix: str) -> str:
    with open(iter_dir / ".metadata", "rb") as fh:
        keys = pickle.load(fh).state_dict_metadata  # the test's own fixture
    return prefix if prefix in keys else sorted(k for k in keys if k.startswith(prefix))[0]


def test_the_precheck_refuses_each_in_one_line_before_any_rank_loads_it(tmp_path):
    """The node step's precheck (and `mtk launch`'s read of the common state): a hostile or damaged object is one
    line, exit 2 — it was let through (damaged, so "the ranks name it"), and every rank then died in a traceback
    (a KeyError after inflating 1 GiB, a CheckpointException after minutes of ``math.prod``)."""
    from support import hostile_checkpoint as h

    dirs = {}
    for case, key, data in [
        ("deflated-common", "common_state/shard_0_1", h.compressed_torch_file(h.PROTO4 + h.EMPTY_DICT + h.STOP, GIB)),
        ("numpy-shape-rng", "rng_state/", h.torch_file(h.numpy_shape_bomb(10_000))),
        ("expanded-extra-state", "decoder.layers.self_attention.linear_proj._extra_state", h.expanded_tensor(GIB)),
        ("cut-short-common", "common_state/shard_0_1", h.torch_file(h.PROTO4 + h.MARK)),
        ("cut-short-rng", "rng_state/", h.torch_file(h.PROTO4 + h.MARK)),
    ]:
        ckpt, iter_dir = _copy(tmp_path / case)
        h.plant_bytes(iter_dir, _key(iter_dir, key), data)
        dirs[case] = str(ckpt)
    got = run_cases("""
for case, ckpt in ARGS["dirs"].items():
    job = load_job(ARGS["tiny"], [f"train.checkpoint.dir={ckpt}"])
    CASES[case] = lambda job=job: ckpt_precheck.check_resume_checkpoint(job, ckpt)
    CASES[case + " (launch)"] = lambda job=job: launch_checks.check_resume(launch_checks_impl, job, ckpt)
class launch_checks_impl:
    remote_paths = False
""", cap=CAP, dirs=dirs, tiny=TINY)
    for case in dirs:
        launch = got.pop(f"{case} (launch)")
        if case.endswith("-common"):  # mtk launch reads the common state only: the rest is the node step's
            problems = launch[1].splitlines()[1:]  # under "invalid job spec:", one line a problem
            assert launch[0] == "SpecError" and launch[2] == 2 and len(problems) == 1, (case, launch)
            assert problems[0].startswith(f"  - train.checkpoint.dir: {dirs[case]}/iter_0000004: "), (case, launch)
        else:
            assert launch[0] == "loaded", (case, launch)
    assert_refused(got, {
        "deflated-common": ("CheckpointUnsafe", "the common state holds a compressed zip member"),
        "numpy-shape-rng": ("CheckpointUnsafe", "the rng_state holds a numpy array of 10001 dimensions"),
        "expanded-extra-state": ("CheckpointUnsafe", "holds a tensor view of 1073741824 elements"),
        "cut-short-common": ("CheckpointDamaged", "the common state cannot be read: the pickle ends before its STOP"),
        "cut-short-rng": ("CheckpointDamaged", "the rng_state cannot be read: the pickle ends before its STOP"),
    })


# -- 4. the tracker: a few bytes, never through a link -------------------------------------------------------------
def test_the_tracker_is_read_without_a_link_and_never_past_a_few_bytes(tmp_path):
    """Every reader of the tracker — `mtk launch`, the node's precheck, each rank — reads it through one bounded
    reader: a 1 GiB sparse tracker, or one linked to a 1 GiB file outside, is refused unread (it took 2 GB of RSS);
    '²' (``isdigit()`` but no int) and 300 digits are one line (they were a traceback, and a 300-digit iter dir)."""
    trackers = {"sparse": None, "link": None, "superscript": "²", "long": "9" * 300, "digits": "9" * 25, "dir": None,
                "fifo": None}
    roots = {}
    for case, text in trackers.items():
        ckpt, _ = _copy(tmp_path / case)
        tracker = ckpt / "latest_checkpointed_iteration.txt"
        tracker.unlink()
        if case == "sparse":
            with open(tracker, "wb") as fh:
                fh.truncate(GIB)
        elif case == "link":
            with open(tmp_path / "outside.txt", "wb") as fh:
                fh.truncate(GIB)
            tracker.symlink_to(tmp_path / "outside.txt")
        elif case == "dir":
            tracker.mkdir()
        elif case == "fifo":
            os.mkfifo(tracker)
        else:
            tracker.write_text(text)
        roots[case] = str(ckpt)
    got = run_cases("""
for case, ckpt in ARGS["roots"].items():
    job = load_job(ARGS["tiny"], [f"train.checkpoint.dir={ckpt}"])
    CASES[case + " (precheck)"] = lambda job=job: ckpt_precheck.check_resume_checkpoint(job, ckpt)
    CASES[case + " (launch)"] = lambda job=job: " | ".join(map(str, launch_checks.resume_lr_change(job, ckpt)))
    CASES[case + " (rank)"] = lambda ckpt=ckpt: checkpoint_layout.read_tracker(ckpt)
""", cap=CAP, roots=roots, tiny=TINY)
    said = {"sparse": f"is {GIB} bytes, not an iteration number or 'release': fix or delete it",
            "link": "is a symbolic link; refusing to follow it", "superscript": "holds '²', not an iteration number",
            "long": "is 300 bytes, not an iteration number", "digits": f"holds '{'9' * 25}', not an iteration number",
            "dir": "is a directory; remove it to start from scratch",
            "fifo": "is a symbolic link or not a regular file; refusing to follow it"}
    for case, words in said.items():
        tracker = f"{roots[case]}/latest_checkpointed_iteration.txt"
        unsafe = case in ("link", "fifo")
        precheck, launch, rank = (got[f"{case} ({who})"] for who in ("precheck", "launch", "rank"))
        assert precheck[0] == ("CheckpointUnsafe" if unsafe else "CheckpointDamaged"), (case, precheck)
        assert rank[0] == "TrackerUnreadable", (case, rank)
        for line in (precheck[1], rank[1]):
            assert line.startswith(f"{tracker} {words}") and "\n" not in line, (case, line)
        assert precheck[2] == rank[2] == 2, (case, precheck, rank)
        assert launch[0] == "loaded", (case, launch)
        assert launch[1].startswith(f"train.checkpoint.dir: {tracker} {words}"), (case, launch)
        assert " | " not in launch[1], launch  # one problem


def test_a_linked_tracker_is_refused_at_launch_and_nothing_outside_is_opened(tmp_path):
    ckpt, _ = _copy(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tracker").write_text("4\n")
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    tracker.unlink()
    tracker.symlink_to(outside / "tracker")
    job = load_job(TINY, [f"train.checkpoint.dir={ckpt}"])
    with touched() as seen:
        problems = launch_checks.resume_lr_change(job, str(tmp_path))
    assert [p.message for p in problems] == [f"{tracker} is a symbolic link; refusing to follow it (write the "
                                             "iteration to resume from into a plain file, or delete it)"]
    assert inside(seen, outside) == []


# -- 7. a .metadata's fields are what torch writes there ----------------------------------------------------------
def _odd(meta, kind: str) -> bytes | None:
    """Change the (plainly unpickled) Metadata ``meta`` as ``kind`` says; the bytes when it must be spelled out."""
    index, info = next(iter(meta.storage_data.items()))
    if kind in ("offset-text", "offset-nan", "offset-negative"):
        info.offset = {"offset-text": "x", "offset-nan": float("nan"), "offset-negative": -1}[kind]
    elif kind == "length-text":
        info.length = "1"
    elif kind == "path-int":
        info.relative_path = 5
    elif kind == "transforms-ints":
        info.transform_descriptors = [1]
    elif kind == "unknown-field":
        info.extra = 1
    elif kind == "state-dict-list":
        meta.state_dict_metadata = ["a"]
    elif kind == "storage-data-none":
        meta.storage_data = None
    elif kind == "chunks-ints":
        next(m for m in meta.state_dict_metadata.values() if hasattr(m, "chunks")).chunks = [1]
    elif kind == "fqn-list":  # a MetadataIndex key whose fqn is a list: a marker swapped in the bytes
        value = meta.storage_data.pop(index)
        object.__setattr__(index, "fqn", "FQNMARK")
        meta.storage_data[index] = value
        raw = pickle.dumps(meta)
        assert raw.count(b"\x8c\x07FQNMARK") == 1
        return raw.replace(b"\x8c\x07FQNMARK", b"](\x8c\x0aunhashablee")  # EMPTY_LIST MARK 'unhashable' APPENDS
    elif kind == "not-metadata":
        return pickle.dumps(meta.state_dict_metadata)
    return None


ODD = {  # kind: what the one line names
    "offset-text": "_StorageInfo whose offset is 'x'", "offset-nan": "_StorageInfo whose offset is nan",
    "offset-negative": "_StorageInfo whose offset is -1", "length-text": "_StorageInfo whose length is '1'",
    "path-int": "_StorageInfo whose relative_path is 5", "transforms-ints": "whose transform_descriptors is [1]",
    "unknown-field": "_StorageInfo setting 'extra' (none of its fields)",
    "state-dict-list": "Metadata whose state_dict_metadata is ['a']", "storage-data-none": "whose storage_data is None",
    "chunks-ints": "TensorStorageMetadata whose chunks is [1]", "fqn-list": "MetadataIndex whose fqn is ['unhashable']",
    "not-metadata": "the checkpoint metadata holds a dict where torch's Metadata is",
}


@pytest.mark.parametrize("kind", sorted(ODD))
def test_an_odd_value_in_a_real_metadata_is_one_line(tmp_path, kind):
    """Each field of each DCP record is checked as it is built (an offset that is "x" was an internal error: a
    traceback and exit 1 on the node; a list for ``state_dict_metadata`` an AttributeError)."""
    ckpt, iter_dir = _copy(tmp_path)
    with open(iter_dir / ".metadata", "rb") as fh:
        meta = pickle.load(fh)  # the test's own fixture
    raw = _odd(meta, kind)
    (iter_dir / ".metadata").write_bytes(raw if raw is not None else pickle.dumps(meta))
    job = load_job(TINY, [f"train.checkpoint.dir={ckpt}"])
    for check in (lambda: check_resume_checkpoint(job, str(tmp_path)), lambda: ckpt_precheck._check_shards(iter_dir),
                  lambda: ckpt_precheck.read_common_state(iter_dir)):
        with pytest.raises(CheckpointDamaged) as err:
            check()
        said = str(err.value)
        assert said.startswith(f"{iter_dir / '.metadata'}: ") and ODD[kind] in said, said
        assert "\n" not in said and err.value.exit_code == 2, said


# -- 1. mtk launch reads the resume before it writes anything ------------------------------------------------------
def test_mtk_launch_reads_the_checkpoint_before_it_writes_its_run_dir_or_lease(tmp_path, monkeypatch):
    """A file that crashed the reader (the deep key, SIGSEGV) left an empty run dir and a stale
    ``checkpoints/.mtk-writer.json`` behind: the resume was read after both were made. Now it is read first; what
    the launch has written when it reads is recorded by wrapping the real check."""
    from mtk.launcher.cli import cli

    runs = tmp_path / "runs"
    ckpt = runs / "evil" / "checkpoints"  # where the launch of job `evil` resumes from
    shutil.copytree(PLAIN / "checkpoints", ckpt)
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    tracker.unlink()
    tracker.symlink_to(tmp_path / "elsewhere")
    seen: list[tuple[list[str], bool]] = []
    real = launch_checks.resume_lr_change

    def watched(job, run_dir):
        seen.append((sorted(p.name for p in runs.iterdir()), (ckpt / ".mtk-writer.json").exists()))
        return real(job, run_dir)

    monkeypatch.setattr(launch_checks, "resume_lr_change", watched)
    result = CliRunner().invoke(cli, ["launch", TINY, "--backend", "local", "--set", "name=evil",
                                      "--set", f"cluster.runs_dir={runs}", "--no-megatron-check"])
    assert seen == [(["evil"], False)], seen  # read once, before any evil-<stamp> run dir or lease existed
    assert result.exit_code == 2 and f"{tracker} is a symbolic link" in result.output, result.output
    assert sorted(p.name for p in runs.iterdir()) == ["evil"] and not (ckpt / ".mtk-writer.json").exists()
