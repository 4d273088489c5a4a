"""The krew plugin archive and manifest of ``kubectl cardquota``, and krew's rules for a manifest.

    python tests/tools/krew_manifest.py DIST_DIR OUT_DIR URL_BASE      # make krew

builds ``OUT_DIR/cardquota-krew-<version>.tar.gz`` (plugins/kubectl-cardquota, the pure wheel from DIST_DIR,
constraints.txt, LICENSE; byte-for-byte the same for the same inputs), fills plugins/cardquota.yaml's ``uri``
(``URL_BASE/<archive>``) and ``sha256`` into ``OUT_DIR/cardquota.yaml``, and checks the filled manifest against
krew's rules and the archive; exit 1 with one line per broken rule.

The rules are krew's own (kubernetes-sigs/krew at db921d5, v0.4.5-12), read from its source, not copied:

- ``internal/index/validation/validate.go``: ``ValidatePlugin`` (apiVersion
  ``krew.googlecontainertools.github.com/v1alpha2``, kind ``Plugin``, ``IsSafePluginName``: ``^[\\w-]+$`` and not a
  Windows device name, metadata.name equal to the file's name, a shortDescription without line breaks, at least
  one platform, a version ``semver.Parse`` accepts: a leading ``v`` then Kubernetes' strict semantic version);
  ``validatePlatform`` (uri set, sha256 matching ``^[a-f0-9]{64}$``, bin set), ``validateFiles`` (unset, or
  non-empty with ``from`` and ``to`` on each), ``validateSelector`` (present, not empty, keys ``os`` and ``arch``
  only, no empty ``matchLabels`` / ``matchExpressions``);
- ``cmd/validate-krew-manifest/main.go`` (what krew-index runs on a pull request): ``validateManifestFile`` (the
  ``.yaml`` extension, the name from the file's name; every platform's selector matches one of ``allPlatforms``),
  ``isOverlappingPlatformSelectors`` (no ``<os, arch>`` pair selected twice) and ``validateLicenseFileExists`` (a
  LICENSE-like file among the installed files; here: in the archive, copied by ``files``).

krew's documentation (site/content/docs/developer-guide/plugin-manifest.md) asks for a shortDescription of "a few
words"; its code sets no length, so the limit below (50 characters, what fits ``kubectl krew search``'s column) is
ours. krew's own install (``kubectl krew install --manifest --archive``) is not run: kubectl-krew is not a PyPI
package and the tests have no network but package registries.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
import tarfile
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "plugins" / "cardquota.yaml"
LAUNCHER = REPO / "plugins" / "kubectl-cardquota"
URI_PLACEHOLDER, SHA256_PLACEHOLDER = "@URI@", "@SHA256@"

API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"  # pkg/constants: CurrentAPIVersion
KIND = "Plugin"  # pkg/constants: PluginKind
SAFE_NAME = re.compile(r"^[\w-]+$", re.ASCII)  # validate.go: safePluginRegexp (Go's \w is ASCII)
WINDOWS_FORBIDDEN = {"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in range(1, 10)), *(f"LPT{n}" for n in range(1, 10))}
SHA256 = re.compile(r"^[a-f0-9]{64}$")  # validate.go: sha256Pattern (lower case only)
# semver.Parse: a "v", then k8s.io/apimachinery's util/version ParseSemantic: MAJOR.MINOR.PATCH (no zero-prefixed
# component), an optional -pre-release and +build
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
SELECTOR_KEYS = {"os", "arch"}
ALL_PLATFORMS = [("windows", "386"), ("windows", "amd64"), ("windows", "arm64"), ("linux", "386"),
                 ("linux", "amd64"), ("linux", "arm"), ("linux", "arm64"), ("linux", "ppc64le"), ("darwin", "386"),
                 ("darwin", "amd64"), ("darwin", "arm64")]  # main.go: allPlatforms
LICENSE_FILES = {"license", "license.txt", "license.md", "licenses", "licenses.txt", "licenses.md", "copying",
                 "copying.txt"}  # main.go: licenseFiles
SHORT_DESCRIPTION_MAX = 50  # ours (see the module docstring)


def version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def selector_matches(selector: dict[str, Any], os_name: str, arch: str) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions, ANDed) against the labels os and arch."""
    labels = {"os": os_name, "arch": arch}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        matched = {"In": present and labels.get(key) in values, "NotIn": not present or labels.get(key) not in values,
                   "Exists": present, "DoesNotExist": not present}.get(operator)
        if not matched:  # an unknown operator matches nothing (LabelSelectorAsSelector fails)
            return False
    return True


def _selector_problems(selector: Any) -> list[str]:
    if selector is None:
        return ["nil selector is not supported"]
    labels, expressions = selector.get("matchLabels"), selector.get("matchExpressions")
    if labels is None and not expressions:
        return ["empty selector is not supported"]
    keys = [*(labels or {}), *(expression.get("key") for expression in expressions or [])]
    problems = [f"selector key {key!r} not supported" for key in keys if key not in SELECTOR_KEYS]
    if labels is not None and not labels:
        problems.append("`matchLabels` specified but empty")
    if expressions is not None and not expressions:
        problems.append("`matchExpressions` specified but empty")
    return problems


def platform_problems(platform: dict[str, Any], *, template: bool) -> list[str]:
    """validate.go validatePlatform; in the template, uri and sha256 are the placeholders make krew fills."""
    problems = []
    uri, sha256 = platform.get("uri") or "", platform.get("sha256") or ""
    if template:
        if (uri, sha256) != (URI_PLACEHOLDER, SHA256_PLACEHOLDER):
            problems.append(f"the template's uri and sha256 are {URI_PLACEHOLDER} and {SHA256_PLACEHOLDER}")
    else:
        if not uri:
            problems.append("`uri` has to be set")
        if not sha256:
            problems.append("`sha256` sum has to be set")
        elif not SHA256.match(sha256):
            problems.append(f"`sha256` value {sha256} is not valid")
    if not platform.get("bin"):
        problems.append("`bin` has to be set")
    files = platform.get("files")
    if files is not None:
        if not files:
            problems.append("`files` has to be unspecified or non-empty")
        for operation in files:
            if not operation.get("from"):
                problems.append("`from` field has to be set")
            elif not operation.get("to"):
                problems.append("`to` field has to be set")
    return problems + _selector_problems(platform.get("selector"))


def manifest_problems(path: Path, plugin: dict[str, Any], *, template: bool = False) -> list[str]:
    """ValidatePlugin and validateManifestFile's structural checks, one message per broken rule."""
    problems = []
    if path.suffix != ".yaml":
        problems.append(f"expected manifest extension '.yaml' but found {path.suffix!r}")
    name = path.name.removesuffix(path.suffix)
    if plugin.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion={plugin.get('apiVersion')!r} is not {API_VERSION}")
    if plugin.get("kind") != KIND:
        problems.append(f"kind={plugin.get('kind')!r}, but only {KIND!r} is supported")
    if not SAFE_NAME.match(name) or name.upper() in WINDOWS_FORBIDDEN:
        problems.append(f"the plugin name {name!r} is not allowed")
    if (plugin.get("metadata") or {}).get("name") != name:
        problems.append(f"plugin should be named {name!r}, not {(plugin.get('metadata') or {}).get('name')!r}")
    spec = plugin.get("spec") or {}
    short = spec.get("shortDescription") or ""
    if not short:
        problems.append("should have a short description")
    if "\r" in short or "\n" in short:
        problems.append("should not have line breaks in short description")
    if len(short) > SHORT_DESCRIPTION_MAX:
        problems.append(f"short description longer than {SHORT_DESCRIPTION_MAX} characters")
    platforms = spec.get("platforms") or []
    if not platforms:
        problems.append("should have a platform specified")
    if not spec.get("version"):
        problems.append("should have a version specified")
    elif not SEMVER.match(spec["version"]):
        problems.append(f"failed to parse plugin version {spec['version']!r}")
    for index, platform in enumerate(platforms):
        problems += [f"platforms[{index}]: {problem}" for problem in platform_problems(platform, template=template)]
        if not _selector_problems(platform.get("selector")) and not any(
                selector_matches(platform["selector"], *pair) for pair in ALL_PLATFORMS):
            problems.append(f"platforms[{index}]'s selector doesn't match any supported platform")
    for pair in ALL_PLATFORMS:
        selecting = [index for index, platform in enumerate(platforms)
                     if platform.get("selector") and selector_matches(platform["selector"], *pair)]
        if len(selecting) > 1:
            problems.append(f"platforms {selecting} have overlapping selectors that select {pair[0]}/{pair[1]}")
    return problems


def installed_files(members: list[str], files: list[dict[str, str]] | None) -> list[str]:
    """The files a platform's ``files`` operations copy out of the archive (krew's default: everything)."""
    if files is None:
        return members
    return [member for member in members
            if any(fnmatch(member, operation["from"]) or member.startswith(operation["from"].rstrip("/") + "/")
                   for operation in files)]


def archive_problems(plugin: dict[str, Any], archive: Path) -> list[str]:
    """The filled manifest against its archive: the sha256, the bin, a LICENSE (validateLicenseFileExists)."""
    problems = []
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    with tarfile.open(archive) as tar:
        members = {member.name: member for member in tar.getmembers() if member.isfile()}
    for index, platform in enumerate(plugin["spec"]["platforms"]):
        if platform.get("sha256") != digest:
            problems.append(f"platforms[{index}]: sha256 {platform.get('sha256')} is not the archive's {digest}")
        if not platform.get("uri", "").endswith("/" + archive.name):
            problems.append(f"platforms[{index}]: uri {platform.get('uri')} does not name {archive.name}")
        copied = installed_files(sorted(members), platform.get("files"))
        binary = members.get(platform.get("bin", ""))
        if binary is None or platform["bin"] not in copied:
            problems.append(f"platforms[{index}]: bin {platform.get('bin')!r} is not among the installed files")
        elif not binary.mode & 0o111:
            problems.append(f"platforms[{index}]: bin {platform['bin']!r} is not executable")
        if not any(Path(name).name.lower() in LICENSE_FILES for name in copied):
            problems.append(f"platforms[{index}]: no LICENSE among the installed files {copied}")
    return problems


def build_archive(wheel: Path, out: Path) -> Path:
    """The plugin's archive: the same bytes for the same inputs (sorted, owner 0, mtime 0, gzip without a date)."""
    archive = out / f"cardquota-krew-{version()}.tar.gz"
    entries = [("kubectl-cardquota", LAUNCHER, 0o755), (wheel.name, wheel, 0o644),
               ("constraints.txt", REPO / "constraints.txt", 0o644), ("LICENSE", REPO / "LICENSE", 0o644)]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source, mode in sorted(entries):
            data = source.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
            tar.addfile(info, io.BytesIO(data))
    with archive.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed:
        compressed.write(buffer.getvalue())
    return archive


def fill(template_text: str, uri: str, sha256: str) -> str:
    return template_text.replace(f'"{URI_PLACEHOLDER}"', f'"{uri}"').replace(f'"{SHA256_PLACEHOLDER}"', f'"{sha256}"')


def make(dist: Path, out: Path, url_base: str) -> list[str]:
    wheels = sorted(dist.glob(f"cardquota-{version()}-py3-none-any.whl"))
    if len(wheels) != 1:
        return [f"expected one pure wheel of {version()} in {dist} (make dist), found {[w.name for w in wheels]}"]
    out.mkdir(parents=True, exist_ok=True)
    archive = build_archive(wheels[0], out)
    manifest = out / TEMPLATE.name
    manifest.write_text(fill(TEMPLATE.read_text(), f"{url_base.rstrip('/')}/{archive.name}",
                             hashlib.sha256(archive.read_bytes()).hexdigest()))
    plugin = yaml.safe_load(manifest.read_text())
    template = yaml.safe_load(TEMPLATE.read_text())
    problems = [f"template: {problem}" for problem in manifest_problems(TEMPLATE, template, template=True)]
    problems += manifest_problems(manifest, plugin) + archive_problems(plugin, archive)
    if plugin["spec"]["version"] != f"v{version()}":
        problems.append(f"spec.version {plugin['spec']['version']} is not v{version()} (pyproject.toml)")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: krew_manifest.py DIST_DIR OUT_DIR URL_BASE", file=sys.stderr)
        return 2
    problems = make(Path(argv[0]), Path(argv[1]), argv[2])
    for problem in problems:
        print(f"make krew: {problem}", file=sys.stderr)
    if not problems:
        print(f"make krew: {argv[1]}/{TEMPLATE.name} and its archive follow krew's manifest rules; install with "
              f"kubectl krew install --manifest={argv[1]}/{TEMPLATE.name} "
              f"--archive={argv[1]}/cardquota-krew-{version()}.tar.gz")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
