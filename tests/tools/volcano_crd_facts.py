"""Write tests/data/volcano_crd_facts.json: what Volcano's own Queue, PodGroup and Job CRDs hold, per release.

Run against a Volcano git clone (no network needed afterwards, nothing of Volcano's is kept but these facts):

    python tests/tools/volcano_crd_facts.py /path/to/volcano.git v1.13.0 v1.14.4 v1.15.1 v1.16.0-alpha.1 master=HEAD

(``LABEL=REVISION`` names a revision that is not a tag; the commit it resolved to is recorded.)

Each CRD is reduced to facts, one per line of the output: a path to every value in the CRD (schema keywords such as
type, format, default, enum, pattern, bounds, required and the x-kubernetes-* markers; subresources; printer
columns; names; scope) and the value there. Descriptions are prose, not facts a cluster enforces, and are left out.
Lists of objects with a ``name`` (versions, printer columns) are addressed by name, so a fact does not depend on an
item's position. Facts shared by several releases are written once, with the releases that have them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from volcano_crds import flatten

CRD_FILES = {
    "queues.scheduling.volcano.sh": "config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml",
    "podgroups.scheduling.volcano.sh": "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
    "jobs.batch.volcano.sh": "config/crd/volcano/bases/batch.volcano.sh_jobs.yaml",
}
OUTPUT = Path(__file__).resolve().parents[1] / "data" / "volcano_crd_facts.json"
def git(repository: str, *arguments: str) -> str:
    return subprocess.run(["git", "--git-dir", repository, *arguments], check=True, capture_output=True,
                          text=True).stdout


def main(repository: str, arguments: list[str]) -> None:
    facts: dict[str, dict[str, dict[str, Any]]] = {}  # crd -> path -> {json(value): [releases]}
    revisions = dict(argument.partition("=")[::2] for argument in arguments)
    releases = list(revisions)
    commits = {release: git(repository, "rev-parse", revision or release).strip() for release, revision in
               revisions.items()}
    for release in releases:
        for crd_name, path in CRD_FILES.items():
            text = git(repository, "show", f"{commits[release]}:{path}")
            (crd,) = [document for document in yaml.safe_load_all(text) if document]
            for fact_path, value in flatten(crd).items():
                values = facts.setdefault(crd_name, {}).setdefault(fact_path, {})
                values.setdefault(json.dumps(value, sort_keys=True), []).append(release)
    document = {
        "releases": releases,
        "crds": {
            crd_name: [[path, json.loads(value), found_in if found_in != releases else "all"]
                       for path, values in sorted(paths.items()) for value, found_in in values.items()]
            for crd_name, paths in facts.items()
        },
    }
    with OUTPUT.open("w") as out:
        out.write('{"releases": ' + json.dumps(releases) + ',\n "commits": ' + json.dumps(commits) +
                  ',\n "source": "volcano-sh/volcano config/crd/volcano/bases",\n "crds": {\n')
        for index, (crd_name, rows) in enumerate(document["crds"].items()):
            out.write(f'  {json.dumps(crd_name)}: [\n')
            out.write(",\n".join("   " + json.dumps(row, sort_keys=True) for row in rows))
            out.write("\n  ]" + (",\n" if index < len(document["crds"]) - 1 else "\n"))
        out.write(" }\n}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
