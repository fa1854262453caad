"""getdata against a real HTTP server on 127.0.0.1: resume after a dropped connection, checksums, idempotence."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import lzma
import os
import threading

import pytest
import zstandard
from mtk.data_jobs.getdata import FetchError, fetch_all, main

from mtk.spec.data import FetchItem

pytestmark = pytest.mark.integration


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``files``; honours Range unless ``ignore_range``; the first GET of a path in ``drop`` sends only
    ``drop_at`` of the body and then closes the connection."""

    files: dict[str, bytes] = {}
    drop: set[str] = set()
    drop_at = 0.4
    ignore_range = False
    log: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        rng = self.headers.get("Range")
        self.log.append((self.path, rng))
        if body is None:
            self.send_error(404)
            return
        start = 0
        if rng and not self.ignore_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if self.path in self.drop:
            self.drop.discard(self.path)
            self.wfile.write(body[start:start + int(len(body) * self.drop_at)])
            self.wfile.flush()
            self.connection.shutdown(2)
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def log_message(self, *_args) -> None:
        """Keep the test server's access log out of the test output."""


@pytest.fixture
def server():
    _Handler.files, _Handler.drop, _Handler.log, _Handler.ignore_range = {}, set(), [], False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _payload(n: int = 3 << 20) -> bytes:
    lines = (json.dumps({"text": f"document {i} " + os.urandom(40).hex()}) + "\n" for i in range(n // 100))
    return "".join(lines).encode()


def test_dropped_transfer_resumes_with_range_and_decompresses(tmp_path, server):
    handler, base = server
    raw = _payload()
    handler.files["/corpus.jsonl.xz"] = lzma.compress(raw, preset=0)
    handler.files["/vocab.json"] = b'{"a": 0}'
    handler.drop.add("/corpus.jsonl.xz")
    items = [FetchItem(url=f"{base}/corpus.jsonl.xz", sha256=hashlib.sha256(raw).hexdigest()),
             FetchItem(url=f"{base}/vocab.json", path="tok/vocab.json")]
    results = fetch_all(items, str(tmp_path), progress=False, log=lambda _m: None)
    assert (tmp_path / "corpus.jsonl").read_bytes() == raw
    assert (tmp_path / "tok" / "vocab.json").read_bytes() == b'{"a": 0}'
    ranges = [r for p, r in handler.log if p == "/corpus.jsonl.xz"]
    sent = int(len(handler.files["/corpus.jsonl.xz"]) * handler.drop_at)
    assert ranges == [None, f"bytes={sent}-"], "the second request resumes where the first stopped"
    assert [r.status for r in results] == ["fetched", "fetched"]
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob("*.tmp"))

    handler.log.clear()
    again = fetch_all(items, str(tmp_path), progress=False, log=lambda _m: None)
    assert [r.status for r in again] == ["present", "present"]
    assert handler.log == [], "a second run with complete files makes no request"

    handler.files["/v2/vocab.json"] = b'{"b": 0}'
    moved = FetchItem(url=f"{base}/v2/vocab.json", path="tok/vocab.json")
    [res] = fetch_all([moved], str(tmp_path), progress=False, log=lambda _m: None)
    assert res.status == "fetched" and (tmp_path / "tok" / "vocab.json").read_bytes() == b'{"b": 0}'


def test_bad_checksum_fails_loudly_and_leaves_no_file(tmp_path, server):
    handler, base = server
    handler.files["/data.bin"] = b"x" * 100000
    item = FetchItem(url=f"{base}/data.bin", sha256="0" * 64)
    with pytest.raises(FetchError) as err:
        fetch_all([item], str(tmp_path), progress=False, log=lambda _m: None)
    assert "SHA-256 mismatch" in str(err.value) and "0" * 64 in str(err.value) and base in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_server_ignoring_range_restarts_cleanly(tmp_path, server):
    handler, base = server
    handler.ignore_range = True
    body = os.urandom(2 << 20)
    handler.files["/blob"] = body
    handler.drop.add("/blob")
    fetch_all([FetchItem(url=f"{base}/blob")], str(tmp_path), progress=False, log=lambda _m: None)
    assert (tmp_path / "blob").read_bytes() == body
    sent = int(len(body) * handler.drop_at)
    # Dropped after `sent` bytes; the resume asked for the rest, got the whole body (Range ignored) and started
    # over with a plain request instead of appending the whole body to the part.
    assert handler.log == [("/blob", None), ("/blob", f"bytes={sent}-"), ("/blob", None)], handler.log


def test_local_sources_gz_zst_and_the_entrypoint(tmp_path, server, capsys):
    from mtk.spec import load_job

    raw = _payload(200_000)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl.gz").write_bytes(gzip.compress(raw))
    (src / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    (src / "c.txt").write_bytes(raw)
    data = tmp_path / "data"
    (tmp_path / "job.yaml").write_text(json.dumps({"name": "gd", "model": {"preset": "tiny"}, "data": {
        "dir": str(data), "fetch": [{"url": f"file://{src / 'a.jsonl.gz'}"}, {"url": str(src / "b.jsonl.zst")},
                                    {"url": str(src / "c.txt"), "path": "copy/c.txt",
                                     "sha256": hashlib.sha256(raw).hexdigest()}]}}))
    (tmp_path / "job.json").write_text(load_job(tmp_path / "job.yaml").to_json())
    assert main(["--job", str(tmp_path / "job.json")]) == 0
    assert (data / "a.jsonl").read_bytes() == raw
    assert (data / "b.jsonl").read_bytes() == raw
    assert (data / "copy" / "c.txt").read_bytes() == raw
    assert main(["--job", str(tmp_path / "job.json")]) == 0
    assert capsys.readouterr().out.count("nothing to do") == 3
    (tmp_path / "bad.yaml").write_text(json.dumps({"name": "gd", "model": {"preset": "tiny"}, "data": {
        "dir": str(data), "fetch": [{"url": str(src / "missing.jsonl")}]}}))
    (tmp_path / "bad.json").write_text(load_job(tmp_path / "bad.yaml").to_json())
    from mtk.launcher.entrypoint import main as entrypoint  # the program: its error boundary says why, exit 1

    assert entrypoint(["getdata", "--job", str(tmp_path / "bad.json")]) == 1
    err = capsys.readouterr().err
    assert "mtk-entrypoint getdata: error: " in err and "missing.jsonl: file not found" in err
    assert "Traceback" not in err


def test_s3_object_resumes_from_a_partial_download(tmp_path, local_s3):
    """s3:// through boto3 against a local S3 API (moto's server on 127.0.0.1), resuming a half-done part file."""
    s3 = local_s3
    body = os.urandom(1 << 20)
    s3.create_bucket(Bucket="corpus")
    s3.put_object(Bucket="corpus", Key="shards/a.bin", Body=body)
    (tmp_path / "a.bin.part").write_bytes(body[:300_000])  # what a killed earlier run left
    (tmp_path / "a.bin.part.url").write_text("s3://corpus/shards/a.bin")
    item = FetchItem(url="s3://corpus/shards/a.bin", sha256=hashlib.sha256(body).hexdigest())
    import boto3

    answers = []  # what the S3 server answered each GetObject of the fetch (getdata uses boto3's default session)

    def record(parsed, **_kw):
        answers.append((parsed["ResponseMetadata"]["HTTPStatusCode"], parsed.get("ContentRange")))

    events = boto3._get_default_session().events
    events.register("after-call.s3.GetObject", record)
    try:
        [res] = fetch_all([item], str(tmp_path), progress=False, log=lambda _m: None)
    finally:
        events.unregister("after-call.s3.GetObject", record)
    assert res.status == "fetched" and (tmp_path / "a.bin").read_bytes() == body
    assert answers == [(206, f"bytes 300000-{len(body) - 1}/{len(body)}")], "one ranged GET for the rest only"
    with pytest.raises(FetchError, match="no such S3 object"):
        fetch_all([FetchItem(url="s3://corpus/nope")], str(tmp_path), progress=False, log=lambda _m: None)
