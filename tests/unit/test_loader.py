"""cardquota.loader: multi-document YAML/JSON, stdin, directories, ``kind: List``; only ever a located InputError."""

from __future__ import annotations

import errno
import io
import json
import os
import stat

import pytest
import yaml
from builders import gpu_node, node, pod, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core.errors import InputError
from cardquota.core.yamltext import MAX_NESTING, TAB_HINT, depth, json_nesting_exceeds
from cardquota.loader import Document, load_paths, parse_documents

NAME = "f.yaml"
WIDE = "is not UTF-8 text: it looks like "
NODE_YAML = b"apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"


def dump(*manifests: object) -> bytes:
    return yaml.safe_dump_all(manifests, sort_keys=False).encode()


def located(documents: list[Document]) -> list[tuple[str, str, str]]:
    """(source, kind, name) of each document, the shape most assertions compare."""
    return [(d.source, d.manifest["kind"], d.manifest["metadata"]["name"]) for d in documents]


def parse_error(data: bytes, name: str = NAME) -> str:
    with pytest.raises(InputError) as caught:
        parse_documents(data, name)
    return str(caught.value)


# ------------------------------------------------------------------------------------------- parse_documents


def test_multi_document_yaml_keeps_order_content_and_sources():
    manifests = [gpu_node("gpu-1", "NVIDIA-A100", 8), queue("team-a", {"NVIDIA-A100": 4}), pod("p", gpus=1)]
    documents = parse_documents(dump(*manifests), NAME)
    assert [d.manifest for d in documents] == manifests
    assert [d.source for d in documents] == [f"{NAME}: document {i}" for i in (1, 2, 3)]


def test_empty_documents_are_skipped_but_still_numbered():
    data = b"---\n---\n" + NODE_YAML + b"---\n# only a comment\n---\n" + NODE_YAML.replace(b"n1", b"n2")
    assert located(parse_documents(data, NAME)) == [
        (f"{NAME}: document 2", "Node", "n1"),
        (f"{NAME}: document 4", "Node", "n2"),
    ]


@pytest.mark.parametrize("data", [b"", b"\n\n", b"# just a comment\n", b"---\n", b"---\n...\n", b"null\n", b"~\n"],
                         ids=["empty", "blank", "comment", "separator", "explicit-end", "null", "tilde"])
def test_input_without_objects_gives_no_documents(data):
    assert parse_documents(data, NAME) == []


@pytest.mark.parametrize("text", [
    json.dumps(node("n1")),
    json.dumps(node("n1"), indent=2),
    "\n  \t" + json.dumps(node("n1")) + "\n",
], ids=["compact", "indented", "leading-whitespace"])
def test_json_object_input(text):
    documents = parse_documents(text.encode(), "nodes.json")
    assert [d.manifest for d in documents] == [node("n1")]
    assert [d.source for d in documents] == ["nodes.json: document 1"]


def test_json_objects_separated_by_yaml_document_markers_are_read_as_yaml():
    data = (json.dumps(node("a")) + "\n---\n" + json.dumps(node("b")) + "\n").encode()
    assert located(parse_documents(data, NAME)) == [(f"{NAME}: document 1", "Node", "a"),
                                                    (f"{NAME}: document 2", "Node", "b")]


@pytest.mark.parametrize("encode", [
    lambda value: yaml.safe_dump(value).encode(),
    lambda value: json.dumps(value).encode(),
], ids=["yaml", "json"])
def test_kind_list_is_unwrapped(encode):
    value = {"apiVersion": "v1", "kind": "List", "items": [node("n1"), queue("q"), pod("p")]}
    documents = parse_documents(encode(value), NAME)
    assert [d.manifest for d in documents] == [node("n1"), queue("q"), pod("p")]
    assert [d.source for d in documents] == [f"{NAME}: document 1: items[{i}]" for i in range(3)]


@pytest.mark.parametrize(("api_version", "kind", "item_kind"), [
    ("v1", "PodList", "Pod"),
    ("v1", "NodeList", "Node"),
    ("scheduling.volcano.sh/v1beta1", "QueueList", "Queue"),
])
def test_api_style_list_items_get_apiversion_and_kind(api_version, kind, item_kind):
    value = {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "42"},
             "items": [{"metadata": {"name": "a"}, "spec": {"x": 1}}, {"metadata": {"name": "b"}}]}
    documents = parse_documents(yaml.safe_dump(value).encode(), NAME)
    assert [d.manifest for d in documents] == [
        {"apiVersion": api_version, "kind": item_kind, "metadata": {"name": "a"}, "spec": {"x": 1}},
        {"apiVersion": api_version, "kind": item_kind, "metadata": {"name": "b"}},
    ]
    assert [d.source for d in documents] == [f"{NAME}: document 1: items[0]", f"{NAME}: document 1: items[1]"]


def test_list_items_that_name_their_kind_keep_it():
    value = {"apiVersion": "v1", "kind": "PodList", "items": [queue("q")]}
    assert [d.manifest for d in parse_documents(json.dumps(value).encode(), NAME)] == [queue("q")]


@pytest.mark.parametrize("items", ["null", "[]"])
def test_list_without_items_gives_no_documents(items):
    data = f"apiVersion: v1\nkind: List\nitems: {items}\n".encode()
    assert parse_documents(data, NAME) == []


def test_lists_and_plain_objects_mix_and_are_numbered_by_document():
    data = dump(node("a"), {"apiVersion": "v1", "kind": "List", "items": [node("b"), node("c")]}, node("d"))
    assert located(parse_documents(data, NAME)) == [
        (f"{NAME}: document 1", "Node", "a"),
        (f"{NAME}: document 2: items[0]", "Node", "b"),
        (f"{NAME}: document 2: items[1]", "Node", "c"),
        (f"{NAME}: document 3", "Node", "d"),
    ]


@pytest.mark.parametrize("data", [
    b"\xef\xbb\xbf" + NODE_YAML,
    b"\xef\xbb\xbf" + json.dumps(node("n1")).encode(),
], ids=["yaml", "json"])
def test_utf8_byte_order_mark_is_accepted(data):
    assert located(parse_documents(data, NAME)) == [(f"{NAME}: document 1", "Node", "n1")]


def test_non_ascii_utf8_text_is_read():
    manifest = node("n1", labels={"note": "GPU — 日本語 ✓"})
    assert [d.manifest for d in parse_documents(dump(manifest), NAME)] == [manifest]


def test_nesting_up_to_the_limit_is_accepted_and_one_more_level_is_not():
    def config_map(depth: int) -> bytes:
        # The top-level mapping is one level; "data" adds depth - 1 levels of flow lists (YAML, not JSON).
        inner = depth - 1
        return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: " + b"[" * inner + b"]" * inner + b"\n"

    assert len(parse_documents(config_map(MAX_NESTING), NAME)) == 1
    assert parse_error(config_map(MAX_NESTING + 1)) == f"{NAME}: document 1: is nested more than 500 levels deep"


# ----------------------------------------------------------------------------------------- parse errors

DEEP = 100_000
ERRORS = [
    # (id, bytes, exact message after "f.yaml: ")
    ("invalid-yaml-flow", b"apiVersion: v1\nkind: [Node\n",
     "document 1: invalid YAML at line 3, column 1: did not find expected ',' or ']'"),
    ("invalid-yaml-indent", b"apiVersion: v1\nkind: Node\n  metadata: x\n",
     "document 1: invalid YAML at line 3, column 11: mapping values are not allowed in this context"),
    ("unknown-tag", b"apiVersion: v1\nkind: !!python/object:os.system x\n",
     "document 1: invalid YAML at line 2, column 7: could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/object:os.system'"),
    ("undefined-alias", b"apiVersion: v1\nkind: *nowhere\n",
     "document 1: invalid YAML at line 2, column 7: found undefined alias"),
    ("invalid-utf8", b"kind: \xff\n", "is not UTF-8 text (byte 0xff at offset 6)"),
    ("latin-1", "kind: Gerät\n".encode("latin-1"), "is not UTF-8 text (byte 0xe4 at offset 9)"),
    # UTF-16 and UTF-32 (PowerShell 5's `>` writes UTF-16 LE with a byte-order mark): named, with the fix
    ("utf16", NODE_YAML.decode().encode("utf-16"), f"{WIDE}UTF-16 (a byte-order mark FF FE): save it as UTF-8, "
     "e.g. iconv -f UTF-16 -t UTF-8 f.yaml > f.utf8.yaml"),
    ("utf16-be-bom", b"\xfe\xff" + NODE_YAML.decode().encode("utf-16-be"), f"{WIDE}UTF-16 (a byte-order mark FE FF): "
     "save it as UTF-8, e.g. iconv -f UTF-16 -t UTF-8 f.yaml > f.utf8.yaml"),
    ("utf32", NODE_YAML.decode().encode("utf-32"), f"{WIDE}UTF-32 (a byte-order mark FF FE 00 00): save it as "
     "UTF-8, e.g. iconv -f UTF-32 -t UTF-8 f.yaml > f.utf8.yaml"),
    ("utf32-be-bom", b"\x00\x00\xfe\xff" + NODE_YAML.decode().encode("utf-32-be"), f"{WIDE}UTF-32 (a byte-order "
     "mark 00 00 FE FF): save it as UTF-8, e.g. iconv -f UTF-32 -t UTF-8 f.yaml > f.utf8.yaml"),
    ("utf16-le-no-bom", "kind: Gerät\n".encode("utf-16-le"), f"{WIDE}UTF-16LE (NUL bytes at the odd offsets, no "
     "byte-order mark): save it as UTF-8, e.g. iconv -f UTF-16LE -t UTF-8 f.yaml > f.utf8.yaml"),
    ("utf16-be-no-bom", NODE_YAML.decode().encode("utf-16-be"), f"{WIDE}UTF-16BE (NUL bytes at the even offsets, "
     "no byte-order mark): save it as UTF-8, e.g. iconv -f UTF-16BE -t UTF-8 f.yaml > f.utf8.yaml"),
    ("one-nul-then-invalid", b"\x00\xff\xfe binary", "is not UTF-8 text (byte 0xff at offset 1)"),
    # a tab where YAML wants indentation: libyaml's words, then the reason and the fix
    ("tab-indent", b"apiVersion: v1\nkind: Node\nmetadata:\n\tname: x\n",
     f"document 1: invalid YAML at line 4, column 1: found character that cannot start any token ({TAB_HINT})"),
    ("tab-after-spaces", b"apiVersion: v1\nkind: Node\nmetadata:\n  \tname: x\n",
     f"document 1: invalid YAML at line 4, column 3: found character that cannot start any token ({TAB_HINT})"),
    ("tab-crlf", b"apiVersion: v1\r\nkind: Node\r\nmetadata:\r\n\tname: x\r\n",
     f"document 1: invalid YAML at line 4, column 1: found character that cannot start any token ({TAB_HINT})"),
    ("tab-in-list", b"apiVersion: v1\nkind: Node\nmetadata:\n  name: x\n\tlabels: {}\n",
     f"document 1: invalid YAML at line 5, column 1: found a tab character that violates indentation ({TAB_HINT})"),
    ("tab-after-non-ascii", "apiVersion: v1\nkind: Node\nmetadata:\n  name: Gerät\n\tlabels: {}\n".encode(),
     f"document 1: invalid YAML at line 5, column 1: found a tab character that violates indentation ({TAB_HINT})"),
    ("tab-with-an-anchor", b"apiVersion: v1\nkind: &k Node\nmetadata:\n\tname: x\n",
     f"document 1: invalid YAML at line 4, column 1: found character that cannot start any token ({TAB_HINT})"),
    ("tab-in-a-quoted-value-another-error", b'apiVersion: v1\nkind: Node\nmetadata: {name: "a\tb"}\nspec: [x\n',
     "document 1: invalid YAML at line 5, column 1: did not find expected ',' or ']'"),
    ("nul-byte", b"kind: a\x00b\n",
     "document 1: invalid character #x0000 at position 7: control characters are not allowed"),
    ("control-char", b"\x01\x02",
     "document 1: invalid character #x0001 at position 0: control characters are not allowed"),
    ("deep-flow-list-open", b"[" * DEEP, "document 1: is nested more than 500 levels deep"),
    ("deep-flow-list-closed", b"[" * DEEP + b"]" * DEEP, "document 1: is nested more than 500 levels deep"),
    ("deep-json-object", b'{"a": ' * DEEP + b"1" + b"}" * DEEP, "document 1: is nested more than 500 levels deep"),
    ("deep-json-object-open", b'{"a": ' * DEEP, "document 1: is nested more than 500 levels deep"),
    ("deep-yaml-flow-map", b"{a: " * DEEP, "document 1: is nested more than 500 levels deep"),
    ("deep-block-list", b"- " * DEEP + b"x\n", "document 1: is nested more than 500 levels deep"),
    ("scalar-number", b"42\n", "document 1: is not a Kubernetes object (a number, not a map)"),
    ("scalar-string", b"hello\n", "document 1: is not a Kubernetes object (a string, not a map)"),
    ("scalar-boolean", b"true\n", "document 1: is not a Kubernetes object (a boolean, not a map)"),
    ("list", b"- a\n- b\n", "document 1: is not a Kubernetes object (a list, not a map)"),
    ("json-list", b"[1, 2]", "document 1: is not a Kubernetes object (a list, not a map)"),
    ("no-apiversion-kind", b"foo: bar\n",
     "document 1: is not a Kubernetes object (it needs string apiVersion and kind)"),
    ("no-kind", b"apiVersion: v1\nmetadata: {name: x}\n",
     "document 1: is not a Kubernetes object (it needs string apiVersion and kind)"),
    ("numeric-apiversion", b"apiVersion: 1\nkind: Node\nmetadata: {name: x}\n",
     "document 1: is not a Kubernetes object (it needs string apiVersion and kind)"),
    ("empty-kind", b"apiVersion: v1\nkind: ''\nmetadata: {name: x}\n",
     "document 1: is not a Kubernetes object (it needs string apiVersion and kind)"),
    ("no-metadata", b"apiVersion: v1\nkind: Pod\n", "document 1: Pod has no metadata.name"),
    ("metadata-without-name", b"apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}\n",
     "document 1: Pod has no metadata.name"),
    ("empty-name", b"apiVersion: v1\nkind: Node\nmetadata: {name: ''}\n", "document 1: Node has no metadata.name"),
    ("numeric-name", b"apiVersion: v1\nkind: Node\nmetadata: {name: 7}\n", "document 1: Node has no metadata.name"),
    ("metadata-list", b"apiVersion: v1\nkind: Node\nmetadata: [a]\n", "document 1: Node has no metadata.name"),
    ("items-number", b"apiVersion: v1\nkind: List\nitems: 5\n", "document 1: items must be a list, not a number"),
    ("items-string", b"apiVersion: v1\nkind: List\nitems: text\n", "document 1: items must be a list, not a string"),
    ("item-not-a-map",
     b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}}\n- hello\n",
     "document 1: items[1]: is not a Kubernetes object (a string, not a map)"),
    ("generic-list-item-without-kind", b"apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n",
     "document 1: items[0]: is not a Kubernetes object (it needs string apiVersion and kind)"),
    ("podlist-item-without-name", b"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {}\n",
     "document 1: items[0]: Pod has no metadata.name"),
]


@pytest.mark.parametrize(("data", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors_are_located_single_line_input_errors(data, message):
    text = parse_error(data)
    assert text == f"{NAME}: {message}"
    assert "\n" not in text


THIRD_DOCUMENT_ERRORS = [
    ("syntax", b"apiVersion: v1\nkind: Node\nmetadata: {name: n3\n",
     "document 3: invalid YAML at line 12, column 1: did not find expected ',' or '}'"),
    ("constructor", b"apiVersion: v1\nkind: !!python/name:os.system x\n",
     "document 3: invalid YAML at line 10, column 7: could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/name:os.system'"),
    ("scalar", b"42\n", "document 3: is not a Kubernetes object (a number, not a map)"),
    ("no-name", b"apiVersion: v1\nkind: Node\n", "document 3: Node has no metadata.name"),
    ("deep", b"- " * DEEP + b"x\n", "document 3: is nested more than 500 levels deep"),
]


@pytest.mark.parametrize(("third", "message"), [e[1:] for e in THIRD_DOCUMENT_ERRORS],
                         ids=[e[0] for e in THIRD_DOCUMENT_ERRORS])
def test_error_in_the_third_document_names_document_3(third, message):
    data = NODE_YAML + b"---\n" + NODE_YAML.replace(b"n1", b"n2") + b"---\n" + third
    assert parse_error(data) == f"{NAME}: {message}"


def test_error_in_the_third_document_counts_skipped_empty_documents():
    data = b"---\n# nothing\n---\n" + NODE_YAML + b"---\n42\n"
    assert parse_error(data) == f"{NAME}: document 3: is not a Kubernetes object (a number, not a map)"


def test_error_message_uses_the_given_name():
    assert parse_error(b"42", name="<stdin>") == "<stdin>: document 1: is not a Kubernetes object (a number, not a map)"


# ----------------------------------------------------------------------------------------------- load_paths


def test_load_paths_reads_files_in_the_order_given(tmp_path):
    first, second = tmp_path / "b.yaml", tmp_path / "a.json"
    first.write_bytes(dump(node("n1"), node("n2")))
    second.write_text(json.dumps(queue("q")))
    assert located(load_paths([str(first), str(second)])) == [
        (f"{first}: document 1", "Node", "n1"),
        (f"{first}: document 2", "Node", "n2"),
        (f"{second}: document 1", "Queue", "q"),
    ]


def test_directory_contributes_its_manifest_files_sorted_and_ignores_the_rest(tmp_path):
    (tmp_path / "b.yaml").write_bytes(dump(node("from-b")))
    (tmp_path / "a.yml").write_bytes(dump(node("from-a")))
    (tmp_path / "c.json").write_text(json.dumps(node("from-c")))
    (tmp_path / "notes.txt").write_text("not: [a manifest")
    (tmp_path / "README.md").write_text("# readme\n")
    (tmp_path / "d.yaml.bak").write_text("garbage: [")
    (tmp_path / "sub.yaml").mkdir()
    (tmp_path / "sub.yaml" / "inner.yaml").write_bytes(dump(node("nested")))
    assert located(load_paths([str(tmp_path)])) == [
        (f"{tmp_path / 'a.yml'}: document 1", "Node", "from-a"),
        (f"{tmp_path / 'b.yaml'}: document 1", "Node", "from-b"),
        (f"{tmp_path / 'c.json'}: document 1", "Node", "from-c"),
    ]


@pytest.mark.parametrize("contents", [{}, {"notes.txt": "x", "manifest.yaml.orig": "y"}], ids=["empty", "no-manifests"])
def test_directory_without_manifests_is_an_error(tmp_path, contents):
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as caught:
        load_paths([str(tmp_path)])
    assert str(caught.value) == f"{tmp_path}: directory holds no .yaml, .yml or .json file"


def test_error_in_a_directory_file_names_that_file(tmp_path):
    (tmp_path / "a.yaml").write_bytes(dump(node("ok")))
    (tmp_path / "b.yaml").write_bytes(dump(node("ok2")) + b"---\n- not an object\n")
    with pytest.raises(InputError) as caught:
        load_paths([str(tmp_path)])
    assert str(caught.value) == f"{tmp_path / 'b.yaml'}: document 2: is not a Kubernetes object (a list, not a map)"


def test_stdin_dash_reads_the_given_stream():
    documents = load_paths(["-"], stdin=io.BytesIO(dump(node("n1"), pod("p"))))
    assert located(documents) == [("<stdin>: document 1", "Node", "n1"), ("<stdin>: document 2", "Pod", "p")]


def test_stdin_and_files_combine_in_order(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_bytes(dump(node("from-file")))
    documents = load_paths([str(path), "-"], stdin=io.BytesIO(json.dumps(node("from-stdin")).encode()))
    assert located(documents) == [(f"{path}: document 1", "Node", "from-file"),
                                  ("<stdin>: document 1", "Node", "from-stdin")]


def test_stdin_errors_are_located_as_stdin():
    with pytest.raises(InputError) as caught:
        load_paths(["-"], stdin=io.BytesIO(b"\x00\xff\xfe binary"))
    assert str(caught.value) == "<stdin>: is not UTF-8 text (byte 0xff at offset 1)"


class _FailingStream(io.RawIOBase):
    def read(self, size: int = -1) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_unreadable_stdin_is_an_input_error():
    with pytest.raises(InputError) as caught:
        load_paths(["-"], stdin=_FailingStream())  # type: ignore[arg-type]
    assert str(caught.value) == f"<stdin>: cannot read: {os.strerror(errno.EIO)}"


def test_missing_file_is_an_input_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as caught:
        load_paths([str(missing)])
    assert str(caught.value) == f"{missing}: no such file or directory"


def test_missing_file_after_a_good_one_is_still_an_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_bytes(dump(node("n1")))
    with pytest.raises(InputError) as caught:
        load_paths([str(good), str(tmp_path / "missing.yaml")])
    assert str(caught.value) == f"{tmp_path / 'missing.yaml'}: no such file or directory"


def test_path_through_a_regular_file_is_an_input_error(tmp_path):
    file = tmp_path / "file.yaml"
    file.write_bytes(dump(node("n1")))
    with pytest.raises(InputError) as caught:
        load_paths([f"{file}/child.yaml"])
    assert str(caught.value) == f"{file}/child.yaml: cannot read: {os.strerror(errno.ENOTDIR)}"


def test_symlink_loop_is_an_input_error(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(InputError) as caught:
        load_paths([str(loop)])
    assert str(caught.value) == f"{loop}: cannot read: {os.strerror(errno.ELOOP)}"


def test_dangling_symlink_in_a_directory_is_ignored(tmp_path):
    (tmp_path / "a.yaml").write_bytes(dump(node("n1")))
    (tmp_path / "b.yaml").symlink_to(tmp_path / "gone.yaml")
    assert located(load_paths([str(tmp_path)])) == [(f"{tmp_path / 'a.yaml'}: document 1", "Node", "n1")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode, so chmod 000 cannot fail a read")
def test_unreadable_file_is_a_permission_error(tmp_path):
    path = tmp_path / "secret.yaml"
    path.write_bytes(dump(node("n1")))
    path.chmod(0)
    try:
        with pytest.raises(InputError) as caught:
            load_paths([str(path)])
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert str(caught.value) == f"{path}: permission denied"


# ------------------------------------------------------------------------------------------ regressions ---


@pytest.mark.parametrize("data", [b"a: !!bool maybe\n", b"a: !!int ''\n", b"a: !!float ''\n",
                                  b"a: !!timestamp yesterday\n"], ids=["bool", "int", "float", "timestamp"])
def test_bad_explicitly_tagged_scalar_is_an_input_error(data):
    assert parse_error(data).startswith(f"{NAME}: document 1: ")


def test_message_stays_one_line_when_the_kind_holds_a_newline():
    assert "\n" not in parse_error(b'apiVersion: v1\nkind: "Pod\\nX"\n')


def test_path_with_a_nul_byte_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        load_paths([f"{tmp_path}/a\x00b.yaml"])


# ----------------------------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=25,
)


def assert_documents_or_input_error(data: bytes) -> None:
    """parse_documents returns Documents or raises a located, one-line InputError; nothing else escapes."""
    try:
        documents = parse_documents(data, NAME)
    except InputError as error:
        text = str(error)
        assert text.startswith(f"{NAME}: ")
        assert "\n" not in text
    else:
        assert isinstance(documents, list)
        assert all(isinstance(d, Document) and d.source.startswith(f"{NAME}: document ") for d in documents)


@given(st.binary())
def test_arbitrary_bytes_give_documents_or_input_error(data):
    assert_documents_or_input_error(data)


@given(st.text())
def test_arbitrary_text_gives_documents_or_input_error(text):
    assert_documents_or_input_error(text.encode())


@given(json_values)
def test_arbitrary_values_as_yaml_give_documents_or_input_error(value):
    assert_documents_or_input_error(yaml.safe_dump(value).encode())


@given(json_values)
def test_arbitrary_values_as_json_give_documents_or_input_error(value):
    assert_documents_or_input_error(json.dumps(value).encode())


@given(json_values)
def test_arbitrary_list_items_give_documents_or_input_error(value):
    wrapper = {"apiVersion": "v1", "kind": "PodList", "items": [value, {"metadata": value}]}
    assert_documents_or_input_error(json.dumps(wrapper).encode())


names = st.text(min_size=1, max_size=20)


@given(st.lists(st.builds(lambda n, labels: node(n, labels=labels), names, st.dictionaries(names, st.text())),
                max_size=5))
def test_valid_objects_round_trip_through_yaml_and_json(manifests):
    from_yaml = parse_documents(yaml.safe_dump_all(manifests).encode(), NAME)
    assert [d.manifest for d in from_yaml] == manifests
    as_list = {"apiVersion": "v1", "kind": "List", "items": manifests}
    from_json = parse_documents(json.dumps(as_list).encode(), NAME)
    assert [d.manifest for d in from_json] == manifests


def test_no_paths_give_no_documents():
    assert load_paths([], stdin=io.BytesIO(NODE_YAML)) == []


_json_values = st.recursive(
    st.one_of(st.integers(), st.text(alphabet='[]{}"\\ab', max_size=6), st.none()),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), children, max_size=3)),
    max_leaves=40,
)


@settings(max_examples=max(300, settings().max_examples))
@given(_json_values, st.integers(0, 12))
def test_json_nesting_is_measured_on_the_text_as_json_loads_would_see_it(value, limit):
    """Brackets inside strings (escaped quotes and backslashes included) never count."""
    assert json_nesting_exceeds(json.dumps(value), limit) == (depth(value) > limit)


def test_deep_json_is_refused_whatever_the_interpreter_recursion_limit():
    """Libraries raise sys.setrecursionlimit (a CEL interpreter does): the verdict must not depend on it."""
    import sys

    from cardquota.core.quota import card_quota
    text = '{"NVIDIA-A100": ' + "[" * 2000 + "]" * 2000 + "}"
    original = sys.getrecursionlimit()
    try:
        for limit in (1000, 10_000):
            sys.setrecursionlimit(limit)
            (violation,) = card_quota({"volcano.sh/card.quota": text + " " * limit}).violations  # uncached text
            assert violation.message == "is not valid JSON: nested too deeply"
    finally:
        sys.setrecursionlimit(original)
    assert json_nesting_exceeds(text.encode(), MAX_NESTING)


def test_brackets_in_yaml_quoted_strings_are_not_nesting():
    """A YAML flow document is first tried as JSON; brackets inside its single-quoted strings must not make the
    JSON nesting check refuse it."""
    documents = parse_documents(
        ("{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {p: '" + "[" * 600 + "'}}").encode(), "x")
    assert documents[0].manifest["data"]["p"] == "[" * 600


def test_json_nesting_is_measured_in_the_encoding_json_reads():
    assert json_nesting_exceeds("[[1]]".encode("utf-16"), 1)
    assert not json_nesting_exceeds("[[1]]".encode("utf-16"), 2)
    assert not json_nesting_exceeds('["' + "\\\\" + '", "[[["]', 1)


def test_a_manifest_starting_with_a_brace_is_json_read_strictly_as_kubectl_reads_it():
    """kubectl's YAML-or-JSON decoder takes a stream that starts with ``{`` as JSON (k8s.io/apimachinery
    pkg/util/yaml, hasJSONPrefix): a trailing comma is refused there, where YAML flow style accepted it, so check
    passed what kubectl apply refuses (issue 40, item 7). JSON objects one after the other are read."""
    with pytest.raises(InputError) as refused:
        parse_documents(b'{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"},}', NAME)
    assert str(refused.value) == (f"{NAME}: document 1: is not valid JSON: Expecting property name enclosed in double "
                                  "quotes (line 1, column 64; kubectl reads a text that starts with { as JSON)")
    stream = (json.dumps(node("a")) + "\n" + json.dumps(node("b"))).encode()
    assert located(parse_documents(stream, NAME)) == [(f"{NAME}: document 1", "Node", "a"),
                                                      (f"{NAME}: document 2", "Node", "b")]


def test_a_scheduler_configuration_in_yaml_flow_style_is_still_yaml():
    """Volcano reads its configuration as YAML (flow style included): only manifests are read as kubectl reads them."""
    from cardquota.core.yamltext import load_one

    assert load_one("{actions: 'enqueue, allocate', tiers: []}") == {"actions": "enqueue, allocate", "tiers": []}
