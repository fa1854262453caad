"""Secrets by reference: refused in cluster.env, rendered as names / secretKeyRef only, scrubbed by value from
the environment dump; run files follow the umask; local cancel never signals a reused pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TOKEN = "hf_UnitSecret_0123456789abcdef"


def mtk(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.mark.megatron  # mtk validate on a valid spec builds the model with megatron-core (child)
def test_validate_refuses_a_credential_in_cluster_env_without_printing_it():
    out = mtk("validate", str(EXAMPLES / "tiny.yaml"), "--set", f"cluster.env.HF_TOKEN={TOKEN}")
    assert out.returncode == 2
    assert "cluster.env.HF_TOKEN" in out.stderr and "cluster.secrets" in out.stderr
    assert TOKEN not in out.stdout + out.stderr and "Traceback" not in out.stderr
    for name in ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GH_PAT", "MY_API_KEY"):
        out = mtk("validate", str(EXAMPLES / "tiny.yaml"), "--set", f"cluster.env.{name}=abcd1234", "-q")
        assert out.returncode == 2 and f"cluster.env.{name}" in out.stderr, name
    # A pydantic type error on a secret-looking key must not echo the value either.
    out = mtk("validate", str(EXAMPLES / "tiny.yaml"), "--set", "cluster.env.HF_TOKEN=[123456789]")
    assert out.returncode == 2 and "123456789" not in out.stderr


@pytest.mark.megatron  # mtk validate on a valid spec builds the model with megatron-core (child)
def test_secrets_by_reference_validate_and_print_names_only():
    out = mtk("validate", str(EXAMPLES / "tiny.yaml"), "--set", "cluster.secrets=[HF_TOKEN, WANDB_API_KEY]",
              env={"HF_TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr
    assert "HF_TOKEN" in out.stdout and TOKEN not in out.stdout


def test_local_launch_needs_the_secret_set_and_writes_it_nowhere(tmp_path):
    sets = ["--set", "cluster.secrets=[HF_TOKEN]", "--set", f"cluster.runs_dir={tmp_path}/runs"]
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    missing = subprocess.run([sys.executable, "-m", "mtk", "launch", str(EXAMPLES / "tiny.yaml"), *sets,
                              "--no-follow"], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert missing.returncode == 2 and "cluster.secrets.0.name" in missing.stderr
    assert not list((tmp_path / "runs").glob("*/run.json"))  # nothing submitted
    out = mtk("launch", str(EXAMPLES / "tiny.yaml"), *sets, "--dry-run", "--run-dir", str(tmp_path / "r"),
              env={"HF_TOKEN": TOKEN}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    script = (tmp_path / "r" / "run.sh").read_text()
    assert "HF_TOKEN" in script and TOKEN not in script
    assert all(TOKEN not in p.read_text() for p in (tmp_path / "r").rglob("*") if p.is_file())


def test_slurm_render_passes_names_and_exports_all():
    from mtk.slurm.render import render

    from mtk.spec import load_job

    job = load_job(EXAMPLES / "tiny-slurm.yaml", ["cluster.secrets=[HF_TOKEN]"], backend="slurm")
    art = render(job, "/shared/runs/x")
    assert all("--export=ALL" in cmd for cmd in art.commands)
    train = art.files["train.sbatch"]
    assert "for mtk_secret in HF_TOKEN; do" in train
    plain = render(load_job(EXAMPLES / "tiny-slurm.yaml", backend="slurm"), "/shared/runs/x")
    assert not any("--export=ALL" in cmd for cmd in plain.commands) and "mtk_secret" not in plain.files["train.sbatch"]


def test_eks_manifests_carry_secret_key_refs_and_pass_strict_validation(tmp_path):
    from mtk.k8s.backend import EksBackend

    from mtk.spec import load_job

    sets = ["image.registry=r.example", "cluster.runs_dir=/fsx/runs", "data.dir=/fsx/data",
            "cluster.secrets=[HF_TOKEN, {name: WANDB_API_KEY, k8s_secret: team-wandb, key: api-key}]",
            "data.fetch=[{url: 'https://huggingface.co/x/resolve/abc/vocab.json', auth: HF_TOKEN, "
            f"sha256: '{'a' * 64}'}}]",
            "cluster.instance_type=p5.48xlarge", "cluster.device=gpu"]
    job = load_job(EXAMPLES / "tiny.yaml", sets, backend="eks")
    art = EksBackend().render(job, "/fsx/runs/tiny-1")
    files = {rel: text for rel, text in art.files.items()
             if rel.startswith("steps/") and rel.endswith(".yaml")}
    objs = [o for text in files.values() for o in yaml.safe_load_all(text) if isinstance(o, dict)]
    pods = []
    for o in objs:
        if o["kind"] == "PyTorchJob":
            pods.append(o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
        elif o["kind"] == "Job":
            pods.append(o["spec"]["template"])
    assert len(pods) == 2
    for template in pods:
        container = template["spec"]["containers"][0]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
                if "secretKeyRef" in e.get("valueFrom", {})}
        assert refs == {"HF_TOKEN": {"name": "tiny-secrets", "key": "HF_TOKEN"},
                        "WANDB_API_KEY": {"name": "team-wandb", "key": "api-key"}}
        for c in [container, *template["spec"].get("initContainers", [])]:  # the preflight init step too
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], c["name"]
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "w"},
                                      "template": template}, "1.32", strict=True)
    worker = next(p for p in pods if p["metadata"]["labels"]["mtk/component"] == "train")
    assert worker["spec"]["containers"][0]["securityContext"]["capabilities"].get("add") == ["IPC_LOCK"]
    for rel, text in files.items():
        if not rel.endswith("train.yaml"):  # the PyTorchJob CRD is not a built-in kind (its pod is checked above)
            (tmp_path / Path(rel).name).write_text(text)
    cli = Path(sys.executable).with_name("kubernetes-validate")
    out = subprocess.run([str(cli), "--strict", "--quiet", *map(str, sorted(tmp_path.glob("*.yaml")))],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_env_dump_redacts_secrets_by_value_and_in_urls(tmp_path):
    from mtk.secrets import redact_env

    env = {"HF_TOKEN": TOKEN, "HTTPS_PROXY": "http://alice:pr0xyPass@proxy:3128", "GH_PAT": "ghp_abcdefgh",
           "DB_PASS": "hunter22", "TRACKING": f"https://t.example/run?id=3&token={TOKEN}",
           "COPY": f"prefix-{TOKEN}-suffix", "MY_DB": "s3cr3t-value", "ECHO": "see s3cr3t-value here",
           "PATH": "/usr/bin", "WANDB_URL": "https://u:p4ss@wandb.example/x?api_key=k123456"}
    out = redact_env(env, names=["MY_DB"])
    text = json.dumps(out)
    for secret in (TOKEN, "pr0xyPass", "ghp_abcdefgh", "hunter22", "s3cr3t-value", "p4ss", "k123456"):
        assert secret not in text, secret
    assert out["PATH"] == "/usr/bin" and out["HTTPS_PROXY"].endswith("@proxy:3128")
    assert out["HF_TOKEN"].startswith("<redacted>") and out["COPY"] == "prefix-<redacted>-suffix"


def test_run_files_follow_the_umask(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    code = ("import os; os.umask(0o077); from pathlib import Path; from mtk.files import atomic_write;"
            f"atomic_write(Path({a!r}), 'x', 0o755); atomic_write(Path({b!r}), 'y')")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o600


def test_local_cancel_leaves_a_reused_pid_alone(tmp_path):
    from mtk.launcher.local import LocalBackend

    from mtk.runs import Run

    # The "reused" pid: an unrelated group that reports every catchable signal and answers a ping. cancel()
    # signals synchronously, so a signal it sent is handled before the ping written after it returns is read;
    # a SIGKILL ends the process (no answer).
    code = ("import signal, sys\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):\n"
            "    signal.signal(s, lambda n, f: print('signal', n, flush=True))\n"
            "print('ready', flush=True)\n"
            "for line in sys.stdin:\n"
            "    print('pong', flush=True)\n")
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert other.stdout.readline() == "ready\n"
        run = Run(backend="local", run_dir=str(tmp_path), name="x", ids={"runner": str(other.pid)})
        LocalBackend().cancel(run)
        other.stdin.write("ping\n")
        other.stdin.flush()
        assert other.stdout.readline() == "pong\n", "cancel signalled a process that is not this run's runner"
    finally:
        other.kill()
        other.wait()


def test_eks_launch_pins_the_content_tag_build_image_recorded(tmp_path):
    from mtk.image_pin import build_record, pin_image
    from mtk.spec import load_job

    job = load_job(EXAMPLES / "tiny.yaml", ["image.registry=r.example"])
    same, note = pin_image(job, tmp_path)
    assert same.image.tag == "latest" and "mutable" in note
    record = build_record(job, tmp_path)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"dry_run": False, "tags": [f"{job.image.name}:latest",
                                                             f"{job.image.name}:sha-0123456789ab"]}))
    pinned, note = pin_image(job, tmp_path)
    assert pinned.image.reference == f"r.example/{job.image.name}:sha-0123456789ab" and "pinned" in note
    fixed = load_job(EXAMPLES / "tiny.yaml", ["image.registry=r.example", "image.tag=v1.2"])
    assert pin_image(fixed, tmp_path) == (fixed, "")


def test_fetch_urls_carrying_credentials_are_refused_without_echoing_them():
    fetch = ("data.fetch=[{url: 'https://bob:pw9876@h.example/x'}, "
             "{url: 'https://h.example/y?X-Amz-Signature=sig9876&token=tok9876'}, {url: 'https://h.example/z?rev=1'}]")
    out = mtk("validate", str(EXAMPLES / "tiny.yaml"), "-q", "--set", fetch)
    assert out.returncode == 2 and "data.fetch.0.url" in out.stderr and "data.fetch.1.url" in out.stderr
    assert "data.fetch.2.url" not in out.stderr and "auth: HF_TOKEN" in out.stderr
    assert "9876" not in out.stderr + out.stdout


def test_the_error_boundary_scrubs_a_secret_read_under_a_plain_name(capsys, monkeypatch):
    """getdata reads data.fetch[].auth variables, named in cluster.secrets but maybe not like a credential
    (CORPUS_ACCESS): it holds their values, and the one error boundary scrubs them from any error it prints."""
    from mtk.data_jobs.sources import FetchError

    from mtk import secrets
    from mtk.failures import report

    value = "plainly-named-0123456789"
    monkeypatch.setenv("CORPUS_ACCESS", value)
    assert not secrets.looks_secret("CORPUS_ACCESS")
    error = FetchError(f"https://h.example/c.jsonl?x={value}: HTTP 500 the server echoed {value}")
    assert report(error, "mtk-entrypoint getdata") == 1
    assert value in capsys.readouterr().err  # not held yet: a plain name is not scrubbed by its look
    monkeypatch.setattr(secrets, "_HELD", set())
    secrets.hold([os.environ["CORPUS_ACCESS"], "short"])
    assert report(error, "mtk-entrypoint getdata") == 1
    err = capsys.readouterr().err
    assert value not in err and "<redacted>" in err and "mtk-entrypoint getdata: error: " in err


def test_getdata_holds_its_auth_values_for_the_boundary(tmp_path, capsys, monkeypatch):
    from mtk.data_jobs import getdata
    from mtk.launcher.entrypoint import main as entrypoint

    from mtk import secrets
    from mtk.spec import validate

    value = "plainly-named-9876543210"
    job = validate({"name": "auth", "model": {"preset": "tiny"}, "cluster": {"secrets": ["CORPUS_ACCESS"]},
                    "data": {"dir": str(tmp_path / "data"), "fetch": [
                        {"url": "https://h.example/c.jsonl", "auth": "CORPUS_ACCESS", "sha256": "a" * 64}]}})
    (tmp_path / "job.json").write_text(job.to_json())
    monkeypatch.setenv("CORPUS_ACCESS", value)
    monkeypatch.setattr(secrets, "_HELD", set())

    def refused(items, data_dir, log):
        raise getdata.FetchError(f"https://h.example/c.jsonl: HTTP 403, the server said: bad token {value}")

    monkeypatch.setattr(getdata, "fetch_all", refused)
    assert entrypoint(["getdata", "--job", str(tmp_path / "job.json")]) == 1
    err = capsys.readouterr().err
    assert "HTTP 403" in err and value not in err and "Traceback" not in err
