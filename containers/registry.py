"""``--push``: tag the built image for a registry and push it through the Docker SDK, with progress.

For ECR (``<account>.dkr.ecr.<region>.amazonaws.com``) the repository is created when missing (idempotent) and
a short-lived password comes from boto3's ``get_authorization_token``. Credentials live in memory only: they go
to the daemon in the request header, never into a file, an argv or a log line (every message passes a redactor).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from mtk.exitcodes import UserFacingError

Echo = Callable[[str], None]
ECR_HOST = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


class PushError(UserFacingError, RuntimeError):
    """A login or push the registry refused; the message names the registry and why, never a credential (exit 1)."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password, even in a traceback
        return f"Credentials(username={self.username!r}, password='***')"

    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def redacting(echo: Echo, secrets: list[str]) -> Echo:
    """An echo that masks every secret (defence in depth: no code path should print one anyway)."""
    def out(message: str) -> None:
        for secret in secrets:
            if secret:
                message = message.replace(secret, "***")
        echo(message)
    return out


def parse_ecr(registry: str) -> tuple[str, str] | None:
    """(account, region) for an ECR registry host, else None."""
    match = ECR_HOST.match(registry)
    return (match["account"], match["region"]) if match else None


def ensure_ecr_repository(ecr, name: str, account: str, echo: Echo) -> bool:
    """Create the repository unless it exists; True when it was created."""
    errors = ecr.exceptions
    try:
        ecr.describe_repositories(registryId=account, repositoryNames=[name])
        echo(f"push: ECR repository {name} exists")
        return False
    except errors.RepositoryNotFoundException:
        pass
    try:
        ecr.create_repository(registryId=account, repositoryName=name)
    except errors.RepositoryAlreadyExistsException:  # created concurrently by another build
        return False
    echo(f"push: created ECR repository {name}")
    return True


def ecr_login(registry: str, repository: str, region: str | None, endpoint_url: str | None,
              echo: Echo) -> Credentials:
    """Ensure the repository and fetch a registry password with boto3 (credentials from the AWS chain)."""
    from mtk.extras import requires

    with requires("image", "mtk build-image --push (ECR)"):
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

    parsed = parse_ecr(registry)
    if parsed is None:
        raise PushError(f"{registry} is not an ECR registry host (<account>.dkr.ecr.<region>.amazonaws.com)")
    account, host_region = parsed
    try:
        ecr = boto3.client("ecr", region_name=region or host_region, endpoint_url=endpoint_url or None)
        ensure_ecr_repository(ecr, repository, account, echo)
        data = ecr.get_authorization_token(registryIds=[account])["authorizationData"][0]
    except (BotoCoreError, ClientError) as exc:
        raise PushError(f"ECR ({region or host_region}, account {account}): {exc}; check AWS credentials "
                        "(AWS_PROFILE, AWS_ACCESS_KEY_ID) and ecr:GetAuthorizationToken/CreateRepository "
                        "permissions") from None
    username, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    return Credentials(username, password)


def _progress(events, echo: Echo, label: str, interval: float = 2.0) -> None:
    """Aggregate per-layer push events into a periodic ``n/m layers, x/y MiB`` line; raise on error."""
    layers: dict[str, tuple[int, int]] = {}
    done: set[str] = set()
    last = 0.0
    for event in events:
        if "error" in event:
            detail = event.get("errorDetail") or {}
            raise PushError(f"pushing {label} failed: {detail.get('message') or event['error']}")
        layer, status = event.get("id"), event.get("status", "")
        if layer and status in ("Pushed", "Layer already exists", "Mounted from"):
            done.add(layer)
        elif layer and status == "Pushing":
            detail = event.get("progressDetail") or {}
            layers[layer] = (int(detail.get("current") or 0), int(detail.get("total") or 0))
        elif layer and status in ("Preparing", "Waiting"):
            layers.setdefault(layer, (0, 0))
        now = time.monotonic()
        if now - last >= interval and layers:
            cur = sum(c for c, _ in layers.values()) / 2**20
            tot = sum(t for _, t in layers.values()) / 2**20
            echo(f"push: {label}: {len(done)}/{len(set(layers) | done)} layers, "
                 f"{cur:.1f}/{tot:.1f} MiB")
            last = now
        if status.startswith(f"{label.rpartition(':')[2]}: digest:"):
            echo(f"push: {label}: {status.partition(': ')[2]}")


def push(client, image: str, repository: str, tags: list[str], echo: Echo,
         credentials: Credentials | None = None) -> list[str]:
    """Tag ``image`` as ``repository:tag`` for every tag, log in (if credentials), push; return the refs."""
    from docker.errors import APIError

    host = repository.split("/", 1)[0]
    secrets = [credentials.password] if credentials else []
    echo = redacting(echo, secrets)
    auth = credentials.auth_config() if credentials else None
    if credentials:
        try:
            client.api.login(username=credentials.username, password=credentials.password, registry=host,
                             reauth=True)
        except APIError as exc:
            raise PushError(f"login to {host} as {credentials.username} failed: "
                            f"{_mask(exc.explanation or str(exc), secrets)}; the credentials were rejected "
                            "(for ECR: is the registry host the account's, and the token fresh?)") from None
        echo(f"push: logged in to {host} as {credentials.username}")
    refs = []
    for tag in tags:
        ref = f"{repository}:{tag}"
        try:
            client.api.tag(image, repository, tag)
            events = client.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth)
            _progress(events, echo, ref)
        except PushError as exc:
            raise PushError(_mask(str(exc), secrets)) from None
        except APIError as exc:
            raise PushError(f"pushing {ref} failed: {_mask(exc.explanation or str(exc), secrets)}") from None
        echo(f"push: pushed {ref}")
        refs.append(ref)
    return refs


def _mask(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
