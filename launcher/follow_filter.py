"""What a followed local run shows: its own lines, not torchrun's banners and not each rank's traceback.

Why: README promises quiet by default. A step's log keeps every byte (``logs/<step>.log``, what ``mtk logs RUN``
prints and ``mtk status`` tails); following it (``mtk launch``, ``mtk logs -f``) leaves out what tells a user
nothing new: torchrun's ``OMP_NUM_THREADS`` banner and its agent's ``I/W/E…`` log lines, its ChildFailedError
report, and tracebacks — of a rank (``[rank0]: …``) or of any process — of which only the exception's own line
is kept, once, with a pointer to the full log (not even that for torchrun's SignalException: the train step
states the signal itself). ``MTK_DEBUG=1`` in the following shell shows everything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_BANNER_RULE = re.compile(r"^\*{20,}\s*$")
_BANNER = ("Setting OMP_NUM_THREADS environment variable for each process",)
# torchrun's agent logs in glog format: "W1128 08:33:22.387000 7800 torch/distributed/elastic/...] ..."
_AGENT_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/")
_RANK = re.compile(r"^\[(?:rank|default)\d+\]:(?: |$)")
_REPORT_RULE = re.compile(r"^={20,}\s*$")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)\b:?")
# torchrun's agent saying it got the signal the run was stopped with: the train step says so in its own line
_SAID_ELSEWHERE = ("torch.distributed.elastic.multiprocessing.api.SignalException:",)


class FollowFilter:
    """Feed it a step's lines in order; it yields those a follower sees (state: inside a traceback or report)."""

    def __init__(self, log_path: str):
        self.log_path = log_path
        self.in_traceback = False
        self.in_report = False
        self.pointed = False
        self.said: set[str] = set()

    def __call__(self, lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            yield from self.feed(line)

    def feed(self, line: str) -> Iterator[str]:
        body = line.rstrip("\n")
        if _BANNER_RULE.match(body) or body.startswith(_BANNER) or _AGENT_LOG.match(body):
            return
        if self.in_report:
            self.in_report = not _REPORT_RULE.match(body)
            return
        if _REPORT_RULE.match(body):
            self.in_report = True
            return
        rank = _RANK.match(body)
        text = body[rank.end():] if rank else body
        if text.startswith(("Traceback (most recent call last):", "During handling of", "The above exception")):
            self.in_traceback = True  # a traceback, or the next one of a chain
            return
        if rank and not _EXCEPTION.match(text):
            return  # a rank's traceback frame, or its other stderr lines: in the log
        if self.in_traceback:
            if not text or text[0].isspace():
                return
            self.in_traceback = False
            yield from self._exception(text)
            return
        if rank:
            yield from self._exception(text)
            return
        yield line

    def _exception(self, text: str) -> Iterator[str]:
        """A traceback's last line, once however many ranks raised it, then once where the rest is."""
        if text in self.said or text.startswith(_SAID_ELSEWHERE):
            return
        self.said.add(text)
        yield text + "\n"
        if not self.pointed:
            self.pointed = True
            yield f"(tracebacks left out here: the full log is {self.log_path}; MTK_DEBUG=1 shows them)\n"
