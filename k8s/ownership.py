"""Whose objects a launch would apply over: a launch never takes over another run's objects.

Server-side apply with ``force`` creates or overwrites whatever has the name, so two run dirs of one name (the run
id comes from the name: ``/fsx/teamA/exp1`` and ``/fsx/teamB/exp1``) would share objects: the second launch's job
spec would reach the first run's pods, and its ``mtk cancel`` would delete them. Every object mtk renders records its
run dir (``mtk/run-dir``); before anything is applied, the objects this launch would apply and every object labelled
with its run id are looked up, and one that another run dir owns (or none: made by hand, or by an mtk that did not
record it) refuses the launch. The same run dir launched again owns its objects and re-applies them.

The look-up and the first write are not one step: of two launches racing for one run id, the first write is the
spec ConfigMap's *create*, which only one of them gets; the other looks again and is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from mtk.exitcodes import BadInput

from . import names


class RunTaken(BadInput):
    """The run id's objects in the namespace belong to another run dir: bad input (exit 2), refused before any
    write; the message names that run dir and the fix."""


def _found(kube, bodies: list[dict], run: str, kinds: Iterable[str]) -> dict[tuple[str, str], dict]:
    """What applying ``bodies`` would touch or share the run id with, by (kind, name): every object of ``kinds``
    labelled ``mtk/run=<run>`` that a controller did not make for another one (those have ``ownerReferences`` and
    go with their owner, which is looked at itself), then each of ``bodies`` that exists, whoever made it."""
    from .client import list_served

    found: dict[tuple[str, str], dict] = {}
    for kind in kinds:
        for item in list_served(kube, kind, names.selector(run)):
            if not item["metadata"].get("ownerReferences"):
                found[(kind, item["metadata"]["name"])] = item
    for body in bodies:
        key = (body["kind"], body["metadata"]["name"])
        if key not in found:
            existing = kube.get(*key)
            if existing is not None:
                found[key] = existing
    return found


def _refusal(found: dict[tuple[str, str], dict], run: str, run_dir: str, namespace: str) -> str | None:
    """Why these objects are not this run dir's to apply over, in one line naming whose they are and the fix; None
    when every one is this run dir's own."""
    mine = names.run_dir_key(run_dir)
    others = [(kind, name, names.owner(obj)) for (kind, name), obj in found.items() if names.owner(obj) != mine]
    if not others:
        return None
    kind, name, theirs = others[0]
    what = f"{kind}/{name}"
    more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
    if theirs is not None:
        return (f"{what}{more} in namespace {namespace} belongs to the run in {theirs}, not to this one ({mine}): "
                f"both run dirs are named for run id {run}, and launching would take that run's objects over; give "
                "this run dir another name, or end that run first (`mtk cancel` it: it deletes that run's objects "
                "only)")
    return (f"{what}{more} in namespace {namespace} records no mtk run dir (made by hand, or by an mtk that did not "
            f"record one), and this run ({mine}, run id {run}) would take it over; give this run dir another name, "
            f"or delete that object first if nothing needs it (`kubectl -n {namespace} delete {what}`)")


def _run(bodies: list[dict]) -> str:
    return bodies[0]["metadata"]["labels"][names.LABEL_RUN]


def taken(kube, bodies: list[dict], run_dir: str, namespace: str) -> str | None:
    """Why applying ``bodies`` (one run's objects, as rendered for ``run_dir``) would take over objects that are not
    this run's, in one line; None when every object there is this run dir's own."""
    from .client import DELETE_ORDER

    return _refusal(_found(kube, bodies, _run(bodies), DELETE_ORDER), _run(bodies), run_dir, namespace)


def claim(kube, bodies: list[dict], run_dir: str, namespace: str) -> None:
    """Refuse (RunTaken) a launch that would take over another run's objects; else make sure the run's first object
    (its spec ConfigMap) exists, by a create where it does not: a launch that raced this one to it is refused."""
    from .client import DELETE_ORDER, KubeError

    found = _found(kube, bodies, _run(bodies), DELETE_ORDER)
    why = _refusal(found, _run(bodies), run_dir, namespace)
    if why:
        raise RunTaken(why)
    first = bodies[0]
    if (first["kind"], first["metadata"]["name"]) in found:
        return  # this run dir's own already: a relaunch, applied over
    try:
        kube.create(first)
    except KubeError as exc:
        if exc.status != 409:
            raise
        why = taken(kube, bodies, run_dir, namespace)
        if why:
            raise RunTaken(why) from None
