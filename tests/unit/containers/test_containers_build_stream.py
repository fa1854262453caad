"""The Docker build stream -> progress lines, cached-step detection, and a useful error on failure."""

from __future__ import annotations

import pytest
from mtk.containers.build import BuildError, parse_stream

# Shaped like the classic builder's /build events (split at odd places on purpose).
OK_EVENTS = [
    {"stream": "Step 1/4 : FROM base:1\n"}, {"stream": " ---> 1a2b\n"},
    {"stream": "Step 2/4 : RUN echo hi\n"}, {"stream": " ---> Using cache\n"}, {"stream": " ---> 3c4d\n"},
    {"stream": "Step 3/4 : COPY w.whl /opt/\n"}, {"stream": " ---> 5e6f\n"},
    {"stream": "Step 4/4 : RUN pip install"}, {"stream": " /opt/w.whl\n ---> Running in 99\n"},
    {"stream": "Processing /opt/w.whl\nInstalled\n"}, {"stream": "Removing intermediate container 99\n"},
    {"stream": " ---> 7a8b\n"}, {"aux": {"ID": "sha256:7a8b"}}, {"stream": "Successfully built 7a8b\n"},
]


def test_steps_cache_flags_and_output():
    lines: list[str] = []
    result = parse_stream(OK_EVENTS, lines.append)
    assert result.image_id == "sha256:7a8b"
    assert [(s.index, s.instruction, s.cached) for s in result.steps] == [
        (1, "FROM base:1", False), (2, "RUN echo hi", True), (3, "COPY w.whl /opt/", False),
        (4, "RUN pip install /opt/w.whl", False)]
    assert result.cached_steps == [2]
    assert result.steps[3].output == ["Processing /opt/w.whl", "Installed"]
    assert "[ 2/4] done (cached)" in lines and "      | Installed" in lines
    quiet: list[str] = []
    parse_stream(OK_EVENTS, quiet.append, verbose=False)
    assert not any(line.startswith("      |") for line in quiet) and "[ 4/4] RUN pip install /opt/w.whl" in quiet


def test_failure_names_the_step_and_shows_its_output():
    events = [*OK_EVENTS[:6], {"stream": "Step 3/4 : RUN make\n ---> Running in 1\n"},
              {"stream": "cc: error: missing.h\n"},
              {"error": "The command '/bin/sh -c make' returned a non-zero code: 2",
               "errorDetail": {"code": 2, "message": "The command '/bin/sh -c make' returned a non-zero code: 2"}}]
    with pytest.raises(BuildError) as info:
        parse_stream(events, lambda _: None)
    text = str(info.value)
    assert text.startswith("step 3/4 failed: RUN make\n")
    assert "    | cc: error: missing.h" in text and "non-zero code: 2" in text


def test_a_stream_without_an_image_id_is_an_error():
    with pytest.raises(BuildError, match="without an image id"):
        parse_stream(OK_EVENTS[:3], lambda _: None)
