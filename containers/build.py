"""``docker build`` through the Docker SDK, with the step stream turned into progress lines and step records.

The SDK is imported lazily (``mtk --help`` must not load it). On failure the error names the failing
Dockerfile step and shows the tail of that step's output, which is what a user needs to fix it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtk.exitcodes import BadInput, UserFacingError

Echo = Callable[[str], None]
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_TAIL = 40


class BuildError(UserFacingError, RuntimeError):
    """The build failed; ``step`` is the Dockerfile instruction that failed (None before the first step)."""

    def __init__(self, message: str, step: BuildStep | None = None):
        super().__init__(message)
        self.step = step

    def __str__(self) -> str:
        msg = super().__str__()
        if self.step is None:
            return msg
        tail = self.step.output[-_TAIL:]
        shown = "\n".join(f"    | {line}" for line in tail) or "    | (no output)"
        return (f"step {self.step.index}/{self.step.total} failed: {_short(self.step.instruction, 160)}\n"
                f"{shown}\n{msg}")


@dataclass
class BuildStep:
    index: int
    total: int
    instruction: str
    cached: bool = False
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    image_id: str
    steps: list[BuildStep]

    @property
    def cached_steps(self) -> list[int]:
        return [s.index for s in self.steps if s.cached]


def docker_client(base_url: str | None = None):
    """A Docker SDK client (DOCKER_HOST, or ``base_url``); a clear error when no daemon answers."""
    from mtk.extras import requires

    with requires("image", "mtk build-image"):
        import docker
        from docker.errors import DockerException

    import os

    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except DockerException as exc:
        where = base_url or os.environ.get("DOCKER_HOST")
        looked = f"at {where}" + ("" if base_url else " (DOCKER_HOST)") if where else \
            "at unix:///var/run/docker.sock (the default: DOCKER_HOST is not set)"
        raise DaemonUnreachable(f"cannot reach the Docker daemon {looked}: {exc}. Start dockerd there, or point "
                                "DOCKER_HOST at a running one (rootless Docker: DOCKER_HOST=unix:///run/user/$UID/"
                                "docker.sock; a remote one: DOCKER_HOST=ssh://user@host); --dry-run writes the "
                                "build context without a daemon") from None
    return client


class DaemonUnreachable(BadInput, BuildError):
    """No Docker daemon answers where mtk looked: set-up, not a failed build (exit 2)."""


class StreamParser:
    """Consumes the build's JSON events; emits one progress line per step and (verbose) the step output."""

    def __init__(self, echo: Echo, verbose: bool = True):
        self.echo, self.verbose = echo, verbose
        self.steps: list[BuildStep] = []
        self.image_id = ""
        self._started = time.monotonic()
        self._partial = ""

    @property
    def current(self) -> BuildStep | None:
        return self.steps[-1] if self.steps else None

    def _finish_current(self) -> None:
        step = self.current
        if step is not None and not step.seconds:
            step.seconds = max(time.monotonic() - self._started, 1e-3)
            flag = "cached" if step.cached else f"{step.seconds:.1f}s"
            self.echo(f"[{step.index:>2}/{step.total}] done ({flag})")

    def _line(self, line: str) -> None:
        match = _STEP.match(line)
        step: BuildStep | None
        if match:
            self._finish_current()
            self._started = time.monotonic()
            step = BuildStep(int(match.group(1)), int(match.group(2)), match.group(3))
            self.steps.append(step)
            self.echo(f"[{step.index:>2}/{step.total}] {_short(step.instruction)}")
            return
        step = self.current
        stripped = line.strip()
        if stripped == "---> Using cache" and step is not None:
            step.cached = True
            return
        if stripped.startswith("---> ") or stripped.startswith("Removing intermediate container"):
            return
        if re.match(r"^Successfully (built|tagged) ", stripped):
            return
        if step is not None:
            step.output.append(line.rstrip())
        if self.verbose and stripped:
            self.echo(f"      | {line.rstrip()}")

    def feed(self, event: dict[str, Any]) -> None:
        if "error" in event:
            detail = event.get("errorDetail") or {}
            self._flush()
            raise BuildError(str(detail.get("message") or event["error"]).strip(), self.current)
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = aux["ID"]
        text = event.get("stream")
        if not text:
            return
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)

    def _flush(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""

    def close(self) -> BuildResult:
        self._flush()
        self._finish_current()
        if not self.image_id:
            raise BuildError("the build stream ended without an image id", self.current)
        return BuildResult(self.image_id, self.steps)


def _short(instruction: str, width: int = 100) -> str:
    one = " ".join(instruction.split())
    return one if len(one) <= width else one[: width - 3] + "..."


def parse_stream(events: Iterable[dict[str, Any]], echo: Echo, verbose: bool = True) -> BuildResult:
    parser = StreamParser(echo, verbose)
    for event in events:
        parser.feed(event)
    return parser.close()


def run_build(client, context_dir: Path, tags: list[str], build_args: dict[str, str], labels: dict[str, str],
              echo: Echo, *, network: str | None = None, pull: bool = False, no_cache: bool = False,
              verbose: bool = True) -> BuildResult:
    """Build ``context_dir`` (Dockerfile inside it), apply every tag, return the image id and the steps."""
    from docker.errors import APIError

    if not tags:
        raise BuildError("no tag to build")
    try:
        events = client.api.build(path=str(context_dir), dockerfile="Dockerfile", tag=tags[0], buildargs=build_args,
                                  labels=labels, decode=True, rm=True, forcerm=True, pull=pull, nocache=no_cache,
                                  network_mode=network)
        result = parse_stream(events, echo, verbose)
        for ref in tags[1:]:
            repo, _, tag = ref.rpartition(":")
            client.api.tag(result.image_id, repo, tag)
    except APIError as exc:
        raise BuildError(f"docker build failed: {exc.explanation or exc}") from None
    return result
