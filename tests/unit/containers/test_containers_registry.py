"""Registry helpers: ECR host parsing, idempotent repository creation and login (moto's server), secrets kept
out of text."""

from __future__ import annotations

import base64

import pytest
from mtk.containers.registry import Credentials, ecr_login, ensure_ecr_repository, parse_ecr, redacting
from support.ports import free_port


def test_parse_ecr_hosts():
    assert parse_ecr("123456789012.dkr.ecr.us-west-2.amazonaws.com") == ("123456789012", "us-west-2")
    assert parse_ecr("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com") == ("123456789012", "us-gov-west-1")
    assert parse_ecr("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn") == ("123456789012", "cn-north-1")
    for other in ("ghcr.io", "127.0.0.1:5000", "12345.dkr.ecr.us-west-2.amazonaws.com", "x.amazonaws.com.evil"):
        assert parse_ecr(other) is None


def test_secrets_never_render():
    creds = Credentials("AWS", "s3cr3t-token")
    assert "s3cr3t" not in repr(creds) and "s3cr3t" not in str(creds)
    lines: list[str] = []
    redacting(lines.append, ["s3cr3t-token", ""])("login with s3cr3t-token failed")
    assert lines == ["login with *** failed"]


@pytest.fixture
def ecr(monkeypatch):
    """moto's server (a real HTTP ECR API on 127.0.0.1, as elsewhere in the suite); yields (client, endpoint).
    mtk reaches it the way a user reaches an ECR VPC endpoint: through the endpoint URL."""
    import urllib.request

    import boto3
    from moto.server import ThreadedMotoServer

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30)
        yield boto3.client("ecr", region_name="us-east-1", endpoint_url=endpoint), endpoint
    finally:
        server.stop()


def test_repository_is_created_once(ecr):
    ecr, _endpoint = ecr
    lines: list[str] = []
    assert ensure_ecr_repository(ecr, "mtk-megatron", "123456789012", lines.append) is True
    assert ensure_ecr_repository(ecr, "mtk-megatron", "123456789012", lines.append) is False
    assert lines == ["push: created ECR repository mtk-megatron", "push: ECR repository mtk-megatron exists"]
    assert [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]] == ["mtk-megatron"]


def test_ecr_login_returns_the_token_password_without_printing_it(ecr):
    ecr, endpoint = ecr
    lines: list[str] = []
    creds = ecr_login("123456789012.dkr.ecr.us-east-1.amazonaws.com", "mtk", None, endpoint, lines.append)
    assert [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]] == ["mtk"]  # on that server
    token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    assert f"{creds.username}:{creds.password}" == base64.b64decode(token).decode()
    assert creds.username == "AWS" and not any(creds.password in line for line in lines)
