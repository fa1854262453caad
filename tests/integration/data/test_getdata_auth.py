"""getdata with a secret by reference: the bearer token goes to the item's host only, never across a redirect
to another host, and appears in no log line, record or error; side files never follow a planted symlink."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOKEN = "hf_TestSecret0123456789abcdef"


def _job(tmp_path: Path, fetch: list[dict], secrets=("HF_TOKEN",)) -> Path:
    spec = {"name": "auth", "model": {"preset": "tiny"}, "cluster": {"device": "cpu", "procs_per_node": 1,
            "secrets": list(secrets)}, "data": {"dir": str(tmp_path / "data"), "fetch": fetch}}
    from mtk.spec import validate

    job = validate(spec)
    path = tmp_path / "job.json"
    path.write_text(job.to_json())
    return path


def _getdata(job: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "getdata", "--job", str(job)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_bearer_token_reaches_its_host_and_never_the_redirect_target(tmp_path, http_servers):
    body = b"gated tokenizer bytes\n" * 100
    cdn = http_servers("127.0.0.2", {"/signed/tok.json": body})  # another host: must not see the token
    hub = http_servers("127.0.0.1", {"/gated/vocab.json": body}, token=TOKEN,
                       redirects={"/gated/big.json": f"{cdn.base}/signed/tok.json"})
    sha = hashlib.sha256(body).hexdigest()
    job = _job(tmp_path, [{"url": f"{hub.base}/gated/vocab.json", "auth": "HF_TOKEN", "sha256": sha},
                          {"url": f"{hub.base}/gated/big.json", "auth": "HF_TOKEN", "path": "big.json"}])
    out = _getdata(job, {"HF_TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "data" / "vocab.json").read_bytes() == body
    assert (tmp_path / "data" / "big.json").read_bytes() == body
    assert ("/gated/vocab.json", f"Bearer {TOKEN}") in hub.seen
    assert cdn.seen and all(auth is None for _, auth in cdn.seen), cdn.seen
    everything = out.stdout + out.stderr + job.read_text()
    everything += "".join(p.read_text(errors="replace") for p in (tmp_path / "data").rglob("*.json"))
    assert TOKEN not in everything


def test_refused_or_missing_token_fails_by_name_without_echoing_it(tmp_path, http_servers):
    hub = http_servers("127.0.0.1", {"/gated/vocab.json": b"x"}, token=TOKEN)
    job = _job(tmp_path, [{"url": f"{hub.base}/gated/vocab.json", "auth": "HF_TOKEN"}])
    wrong = "hf_WrongSecret_zyxwvutsrq"
    out = _getdata(job, {"HF_TOKEN": wrong})
    assert out.returncode == 1
    assert "HTTP 401" in out.stderr and "HF_TOKEN" in out.stderr and wrong not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    missing = subprocess.run([sys.executable, "-m", "mtk.launcher.entrypoint", "getdata", "--job", str(job)],
                             capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2 and "HF_TOKEN" in missing.stderr and "cluster.secrets" in missing.stderr
    unauth = _job(tmp_path, [{"url": f"{hub.base}/gated/vocab.json"}])
    out = _getdata(unauth, {})
    assert out.returncode == 1 and "auth: HF_TOKEN" in out.stderr


def test_auth_must_name_a_declared_secret_and_fetch_paths_stay_in_data_dir(tmp_path):
    from mtk.spec import SpecError

    with pytest.raises(SpecError) as err:
        _job(tmp_path, [{"url": "https://h.example/a", "auth": "HF_TOKEN", "path": "../../x"},
                        {"url": "http://h.example/b", "auth": "HF_TOKEN", "path": "/etc/y"}], secrets=())
    text = str(err.value)
    assert "data.fetch.0.path" in text and "data.fetch.1.path" in text
    assert "data.fetch.0.auth" in text and "names no secret" in text and "only sent over https" in text


def test_runtime_refuses_a_path_leaving_data_dir_through_a_symlinked_folder(tmp_path):
    from mtk.data_jobs.getdata import FetchInputError, destination

    from mtk.spec.data import FetchItem

    data = tmp_path / "data"
    data.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (data / "sub").symlink_to(outside)
    with pytest.raises(FetchInputError, match=r"outside data\.dir"):
        destination(FetchItem(url="https://h.example/a", path="sub/file"), str(data))


def test_side_files_never_follow_a_planted_symlink(tmp_path, http_servers):
    body = b"hello\n"
    plain = http_servers("127.0.0.1", {"/f.txt": body})
    data = tmp_path / "data"
    data.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    for side in ("f.txt.tmp", "f.txt.part.url.tmp", "f.txt.mtk-fetch.json.tmp"):
        (data / side).symlink_to(victim)
    job = _job(tmp_path, [{"url": f"{plain.base}/f.txt", "sha256": hashlib.sha256(body).hexdigest()}],
               secrets=())
    out = _getdata(job, {})
    assert out.returncode == 0, out.stderr
    assert victim.read_text() == "mine\n" and (data / "f.txt").read_bytes() == body
    (data / "g.part").symlink_to(victim)  # a planted part file: the link is removed, never written through
    job = _job(tmp_path, [{"url": f"{plain.base}/f.txt", "path": "g"}], secrets=())
    out = _getdata(job, {})
    assert out.returncode == 0, out.stderr
    assert victim.read_text() == "mine\n" and (data / "g").read_bytes() == body and not (data / "g").is_symlink()
    assert "plain HTTP without a sha256" in out.stdout
    # The record went to a fresh file where its planted .tmp link was: a real record of this fetch, not the victim.
    record_file = data / "f.txt.mtk-fetch.json"
    assert not record_file.is_symlink()
    record = json.loads(record_file.read_text())
    assert record["url"] == f"{plain.base}/f.txt" and record["sha256"] == hashlib.sha256(body).hexdigest()
    assert record["size"] == len(body)
