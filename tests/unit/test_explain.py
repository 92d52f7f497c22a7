"""SKILL.md stays small enough for an agent to hold, and the rest of the
manual is reachable offline: `graphsignal-run --explain TOPIC|METRIC`
prints the reference texts shipped in the package (graphsignal.explain),
and every metric family a payload can carry has an explanation there."""
import os
import re

import pytest

from graphsignal import explain, findings
from graphsignal.cli import run
from graphsignal.naming import metrics as table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKILL = os.path.join(ROOT, "SKILL.md")


def test_skill_md_fits_what_an_agent_holds():
    with open(SKILL, encoding="utf-8") as f:
        text = f.read()
    # the Agent Skills guidance: the body that loads with the skill under ~500 lines; ours: 30 KB too
    assert text.count("\n") <= 500 and len(text.encode("utf-8")) <= 30 * 1024
    # self-contained for the loop: install, run, load, findings, payload facts, change and compare, overhead
    for must in ("## 1. Install", "## 2. Run", "## 3. Put load", "## 4. Read the findings", "## 5. The few payload",
                 "## 6. Change one thing", "## 7. Overhead rules", "### Which collection for what"):
        assert must in text, must
    # every topic SKILL.md sends a reader to exists
    named = set(re.findall(r"graphsignal-run --explain ([a-z_]+)\b", text))
    more = text[text.index("## 9. More"):]
    named |= {n for row in re.findall(r"^\| [^|]+ \| (.+) \|$", more, re.M) for n in re.findall(r"`([a-z]+)`", row)}
    assert {"findings", "payload", "metrics", "overhead", "diff", "llamacpp", "top", "fleet", "otlp"} <= named
    topics = {t for t, _ in explain.topics()}
    assert sorted(n for n in named if n not in topics and n != "cuda_sync_nanoseconds") == []


def test_every_finding_id_is_explained_and_named_in_skill_md():
    with open(SKILL, encoding="utf-8") as f:
        skill = f.read()
    rules = explain.text("findings")
    ids = {r.__name__ for r in findings.RULES}
    assert len(ids) >= 16
    for i in ids:
        assert "`%s`" % i in rules and "`%s`" % i in skill, i


def test_every_metric_family_in_the_payload_has_an_explanation():
    names = [m.name for m in table.table()]
    assert len(names) > 60
    missing = [n for n in names if explain.metric(n) is None]
    assert missing == []
    got = explain.metric("cuda_sync_nanoseconds")
    assert got.startswith("cuda_sync_nanoseconds (profile, tags ") and "[metrics]" in got


@pytest.mark.parametrize("topic", [t for t, _ in explain.topics()])
def test_every_topic_prints(capsys, topic):
    assert run.main(["--explain", topic]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# %s: " % topic) and len(out) > 300


def test_the_list_and_an_unknown_name(capsys):
    assert run.main(["--explain"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("topics (graphsignal-run --explain TOPIC)") and "  findings  " in listing
    assert run.main(["--explain", "no_such_thing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nothing is explained as 'no_such_thing'\ntopics")
    assert explain.text("../SKILL") is None and explain.metric("a b") is None
