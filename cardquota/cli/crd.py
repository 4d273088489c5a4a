"""``kubectl cardquota crd status|install|uninstall``: cardquota's additions to Volcano's installed CRDs.

Volcano owns its CRDs; cardquota only patches in what it adds (:mod:`cardquota.core.crd_additions`), reading each CRD
first and sending a guarded JSON patch computed against what it read. ``install`` is safe to run again at any time
(after a Volcano upgrade re-applied Volcano's CRDs it puts the additions back); ``uninstall`` removes exactly what is
still as cardquota added it. ``--dry-run`` (implied with ``--cluster FILE``) prints the patches instead: as text,
a YAML stream with one document per CRD (its JSON patch, one operation per item, after a ``--- #`` line naming the CRD),
readable and still machine-readable; ``-o json``/``-o yaml`` print every result as one document.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TextIO

from cardquota.core import crd_additions
from cardquota.core.crd_additions import CRD_NAMES, AdditionState, State
from cardquota.core.errors import InputError
from cardquota.core.verdict import PatchOperation

EXIT_OK, EXIT_WRONG = 0, 1
ACTIONS = ("status", "install", "uninstall")
SHORT_NAMES = {"queue": crd_additions.QUEUE_CRD, "queues": crd_additions.QUEUE_CRD,
               "podgroup": crd_additions.PODGROUP_CRD, "podgroups": crd_additions.PODGROUP_CRD,
               "job": crd_additions.JOB_CRD, "jobs": crd_additions.JOB_CRD, **{name: name for name in CRD_NAMES}}
ATTEMPTS = 3
"""A patch refused because the CRD changed after it was read is recomputed from a new read, this many times."""


def add_command(commands: Any, common: argparse.ArgumentParser) -> None:
    from cardquota.cli.kubectl import add_namespace_options, examples

    parser = commands.add_parser(
        "crd", parents=[common], help="cardquota's additions to Volcano's CRDs: status, install, uninstall",
        description="cardquota adds spec.dra and the CARD-QUOTA/CARD-USAGE columns to Volcano's Queue CRD and a "
        "CARD-REQUEST column to its PodGroup and Job CRDs, as a patch over the CRDs Volcano installed (never "
        "replacing them). status: exit 0 when every addition is in place, 1 when one is missing. install: add what "
        "is missing (re-run it after upgrading Volcano). uninstall: remove exactly what cardquota added.",
        epilog=examples("kubectl cardquota crd                      # status: is every addition in place?",
                        "kubectl cardquota crd install --dry-run    # the patches, to review",
                        "kubectl cardquota crd install",
                        "kubectl cardquota crd uninstall queue"))
    parser.add_argument("words", nargs="*", metavar="[ACTION] [CRD ...]",
                        help="status (default), install or uninstall; then queue, podgroup, job or a CRD's full name "
                        "(default: all three)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the JSON patch each CRD would get, change nothing (implied by --cluster): as "
                        "text a YAML stream, one document per CRD, one operation per list item")
    parser.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    add_namespace_options(parser)
    parser.set_defaults(command=crd_command)


def crd_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cardquota.cli.kubectl import _cluster

    words = list(args.words)
    action = words.pop(0) if words and words[0] in ACTIONS else "status"
    names = _names(words)
    cluster = _cluster(args)
    source: CrdSource = FileCrds(cluster.files) if not cluster.live else LiveCrds(cluster.api())
    if action == "status":
        return _status(source, names, args.output, out)
    dry_run = args.dry_run or not cluster.live
    compute = crd_additions.install_patch if action == "install" else crd_additions.uninstall_patch
    results = [_change(source, name, compute, dry_run=dry_run) for name in names]
    if args.output in ("json", "yaml"):
        _document(results, args.output, out)
    elif dry_run:
        _dry_run_stream(results, action, out)
    else:
        for result in results:
            out.write(_sentence(result, action, dry_run) + "\n")
    return EXIT_OK if all(result["ok"] for result in results) else EXIT_WRONG


def _document(document: object, form: str, out: TextIO) -> None:
    from cardquota.cli import output

    if form == "yaml":
        output.write_yaml(document, out)
    else:
        out.write(json.dumps(document, indent=2) + "\n")


def _names(given: Sequence[str]) -> list[str]:
    unknown = [name for name in given if name not in SHORT_NAMES]
    if unknown:
        raise InputError(f"unknown CRD {', '.join(unknown)} (queue, podgroup, job or {', '.join(CRD_NAMES)}; "
                         f"the action, first, is one of {', '.join(ACTIONS)})", where="crd")
    return list(dict.fromkeys(SHORT_NAMES[name] for name in given)) or list(CRD_NAMES)


class CrdSource(Protocol):
    """Where CRDs are read from and patches go to."""

    def read(self, name: str) -> Mapping[str, Any] | None: ...

    def patch(self, name: str, operations: Sequence[PatchOperation]) -> None: ...


class LiveCrds:
    def __init__(self, api: Any) -> None:
        self.api = api

    def read(self, name: str) -> Mapping[str, Any] | None:
        from cardquota.cli.kubectl import _kube
        from cardquota.kube import read_crd

        return _kube(lambda: read_crd(self.api, name))

    def patch(self, name: str, operations: Sequence[PatchOperation]) -> None:
        from cardquota.kube import patch_crd

        patch_crd(self.api, name, [dict(operation) for operation in operations])


class FileCrds:
    def __init__(self, files: Sequence[str]) -> None:
        from cardquota.loader import load_paths

        self.crds = {crd_additions.crd_name(document.manifest): document.manifest for document in load_paths(files)
                     if document.manifest.get("kind") == "CustomResourceDefinition"}

    def read(self, name: str) -> Mapping[str, Any] | None:
        return self.crds.get(name)

    def patch(self, name: str, operations: Sequence[PatchOperation]) -> None:
        raise AssertionError("files are never patched: --cluster implies --dry-run")


def _change(source: CrdSource, name: str, compute: Any, *, dry_run: bool) -> dict[str, Any]:
    from cardquota.kube import Conflict, Invalid, KubeError

    stale = (Conflict, Invalid)  # what the API server answers a JSON patch whose ``test`` fails, a conflicting write

    for attempt in range(ATTEMPTS):
        crd = source.read(name)
        if crd is None:
            return {"crd": name, "found": False, "ok": compute is crd_additions.uninstall_patch, "patch": [],
                    "changed": []}
        patch: list[PatchOperation] = compute(crd)
        affected = State.MISSING if compute is crd_additions.install_patch else State.PRESENT
        changed = sorted({state.label for state in crd_additions.inspect(crd) if state.state is affected}) \
            if patch else []
        if dry_run or not patch:
            break
        try:
            source.patch(name, patch)
        except KubeError as error:
            if isinstance(error, stale) and attempt < ATTEMPTS - 1:
                continue
            raise InputError(f"cannot patch the CRD: {error}", where=name) from None
        crd = source.read(name) or crd
        break
    states = crd_additions.inspect(crd) if crd is not None else []
    return {"crd": name, "found": True, "patch": [dict(op) for op in patch], "changed": changed,
            "ok": all(state.state is not State.UNREACHABLE for state in states),
            "states": [_state_json(state) for state in states]}


def _dry_run_stream(results: Sequence[Mapping[str, Any]], action: str, out: TextIO) -> None:
    """The patches ``--dry-run`` would send, to review: a YAML stream, one document per CRD (its JSON patch, an
    operation per list item), each opened by ``---`` and a comment naming the CRD; a CRD with nothing to send, or
    not installed, is an empty document holding only its comment. ``yaml.safe_load_all`` reads back each CRD's
    patch (or None)."""
    from cardquota.cli import output

    for result in results:
        operations = len(result["patch"])
        if not result["found"] or not operations:
            out.write(f"--- # {_sentence(result, action, dry_run=True)}\n")
            continue
        out.write(f"--- # {result['crd']}: the JSON patch {action} would send ({operations} operations)\n")
        output.write_yaml(result["patch"], out)


def _sentence(result: Mapping[str, Any], action: str, dry_run: bool) -> str:
    name = result["crd"]
    if not result["found"]:
        return f"✗ {name}: not installed — install Volcano first (its release manifests install this CRD)"
    if dry_run:
        return f"{name}: nothing to {action}"
    if not result["changed"]:
        return f"✓ {name}: nothing to {action} ({'all in place' if action == 'install' else 'none of ours left'})"
    verb = "added" if action == "install" else "removed"
    return f"✓ {name}: {verb} {', '.join(result['changed'])}"


def _state_json(state: AdditionState) -> dict[str, str]:
    return {"version": state.version, "addition": state.label, "state": state.state.value}


def _status(source: CrdSource, names: Sequence[str], output: str, out: TextIO) -> int:
    report: list[dict[str, Any]] = []
    healthy = True
    for name in names:
        crd = source.read(name)
        states = crd_additions.inspect(crd) if crd is not None else []
        healthy &= crd is not None and all(state.state in {State.PRESENT, State.FOREIGN} for state in states)
        report.append({"crd": name, "found": crd is not None, "states": [_state_json(s) for s in states]})
    if output in ("json", "yaml"):
        _document(report, output, out)
    else:
        for entry in report:
            out.write(status_lines(entry["crd"], entry["found"], entry["states"]))
    return EXIT_OK if healthy else EXIT_WRONG


MARKS = {State.PRESENT.value: "✓", State.FOREIGN.value: "!", State.MISSING.value: "✗", State.UNREACHABLE.value: "✗"}
EXPLAINED = {state.value: crd_additions.WORDING[state] for state in State} | {
    State.MISSING.value: f"{crd_additions.WORDING[State.MISSING]} — run: {crd_additions.restore_command()}"}


def status_lines(name: str, found: bool, states: Sequence[Mapping[str, str]]) -> str:
    if not found:
        return f"✗ {name}: not installed (is Volcano installed?)\n"
    return "".join(f"{MARKS[s['state']]} {name} {s['version']}: {s['addition']} {EXPLAINED[s['state']]}\n"
                   for s in states)
