"""The admission answer's JSON: written directly for the common answers, byte for byte what json.dumps writes."""

from __future__ import annotations

import json

from hypothesis import event, given
from hypothesis import strategies as st

from cardquota.core.verdict import PatchOperation, Verdict, allow, deny
from cardquota.core.violations import invalid
from cardquota.webhooks.review import encoded, response

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
patches = st.lists(st.builds(lambda path, value: PatchOperation(op="add", path=path, value=value),
                             st.sampled_from(["/spec/affinity", "/metadata/annotations/a~1b"]), texts), max_size=2)
verdicts = st.one_of(
    st.builds(lambda warnings, patch: allow(warnings=warnings, patch=patch), st.lists(texts, max_size=2), patches),
    st.builds(lambda message: deny([invalid("spec", message)]), texts),
)


@given(texts, verdicts, st.booleans())
def test_the_answer_is_what_json_dumps_writes(uid: str, verdict: Verdict, with_patch: bool) -> None:
    answer = response(uid, verdict, with_patch=with_patch)
    event("written directly" if verdict.allowed and not verdict.warnings else "json.dumps")
    assert encoded(answer) == json.dumps(answer).encode()


def test_an_allowed_answer_with_a_patch_reads_back() -> None:
    verdict = allow(patch=[PatchOperation(op="add", path="/spec/affinity", value={"a": "\u00e9\n"})])
    answer = response('u"\\1', verdict, with_patch=True)
    assert json.loads(encoded(answer)) == answer
    assert json.loads(encoded(answer))["response"]["patchType"] == "JSONPatch"
