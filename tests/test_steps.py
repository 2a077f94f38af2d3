"""Generative roles as steps (``programs.shared.steps``, issue 74 item 1): a step asks its predictor or answers from
gold and records that answer as the predictor's demo; no method file reads an oracle role itself."""
import ast
from pathlib import Path

import dspy
import pytest

from programs.shared.oracle import Gold, gold_labels, teaching
from programs.shared.steps import Reply, Role, RoleStep
from retrieval.corpus import Passage
from tests.test_oracle_roles import NoCalls

ROOT = Path(__file__).resolve().parent.parent
#: What a method may take of ``programs.shared.oracle``: its roles checked, the own-corpus scope, a demo it records.
METHOD_IMPORTS = {"check_roles", "own_language", "taught"}
GOLD = Gold(question="Who did the spouse of Hagar marry?", titles=frozenset({"Keturah"}))
NAMES_KETURAH = Passage("x:1", "Abraham", "Abraham married Keturah.")  # a held passage names the gold title


def method_files() -> list[Path]:
    """Every module of a method family (a package of ``programs/`` other than ``shared``)."""
    return sorted(p for d in (ROOT / "programs").iterdir() if d.is_dir() and d.name not in ("shared", "__pycache__")
                  for p in d.glob("*.py"))


def direct_reads(path: Path) -> list[str]:
    """Where ``path`` reads an oracle role itself: a name imported from ``programs.shared.oracle`` beyond
    :data:`METHOD_IMPORTS`, or ``self.oracle`` (the program's roles) used other than assigned or handed to a call (a
    gate's, a step's, a part's constructor)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = [f"{path.name}:{n.lineno} imports {a.name}" for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and n.module == "programs.shared.oracle"
             for a in n.names if a.name not in METHOD_IMPORTS]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "oracle" and isinstance(node.value, ast.Name)
                and node.value.id == "self") or isinstance(node.ctx, ast.Store):  # assigned: check_roles's
            continue
        parent = parents[node]
        while isinstance(parent, ast.BinOp):  # a subset handed on: self.oracle & {...}
            parent = parents[parent]
        if not isinstance(parent, (ast.Call, ast.keyword)):
            found.append(f"{path.name}:{node.lineno} reads self.oracle")
    return found


def test_no_method_file_reads_an_oracle_role_directly():
    files = method_files()
    assert len(files) > 10 and {p.parent.name for p in files} >= {"baselines", "coral", "par2", "rag_critic", "seal"}
    assert [read for path in files for read in direct_reads(path)] == []


def test_the_check_finds_a_direct_read(tmp_path):
    path = tmp_path / "method.py"
    path.write_text("from programs.shared.oracle import check_roles, labelling\n"
                    "class M:\n"
                    "    def __init__(self, oracle):\n"
                    "        self.oracle = check_roles(oracle, ('query',), 'm')\n"
                    "        self.gate = Gate(self.oracle & {'query'})\n"
                    "    def forward(self):\n"
                    "        return 'writer' in self.oracle\n")
    assert direct_reads(path) == ["method.py:1 imports labelling", "method.py:7 reads self.oracle"]


def query_step(roles=frozenset(), **kwargs) -> RoleStep:
    return RoleStep(dspy.Predict("question -> query"), "query", frozenset(roles), **kwargs)


def test_a_step_asks_its_predictor_and_reads_its_field(dummy):
    dummy([{"query": "spouse of Hagar"}])
    assert query_step()({"question": "Q"}) == Reply("spouse of Hagar", 0, False)


def test_a_step_counts_unreadable_replies_and_asks_again(dummy):
    lm = dummy([{"query": "x"}, {"query": "y"}])
    step = query_step(read=lambda out: None, tries=2)
    assert step({"question": "Q"}) == Reply(None, 2, False)
    assert len(lm.history) == 2  # the second try samples anew


def test_a_step_under_the_oracle_answers_from_gold_without_a_call_and_records_its_demo():
    dspy.configure(lm=NoCalls())
    step = query_step({"query"}, demo=lambda query: {"query": query.upper()})
    with gold_labels(GOLD):
        assert step({"question": "Q"}, [NAMES_KETURAH]) == Reply("Keturah", 0, True)  # no demo outside teaching
        with teaching(), dspy.context(trace=[]):
            assert step(lambda: {"question": "Q"}, []).value == GOLD.question  # nothing held names the title
            ((predictor, inputs, outputs),) = dspy.settings.trace
    assert predictor is step.predictor and inputs == {"question": "Q"}
    assert outputs.toDict() == {"query": GOLD.question.upper()}


def test_an_unchanged_input_is_not_asked_again_but_the_oracle_answers_anew():
    dspy.configure(lm=NoCalls())
    assert query_step()({"question": "Q"}, fresh=False) is None
    with gold_labels(GOLD):
        assert query_step({"query"})({"question": "Q"}, [NAMES_KETURAH], fresh=False).value == "Keturah"


def test_a_role_overrides_what_was_asked_only_under_the_oracle():
    asked = []
    assert Role("query").over(lambda: asked.append(1) or "asked", []) == "asked" and asked == [1]
    with gold_labels(GOLD):
        assert Role("query", frozenset({"query"})).over(pytest.fail, []) == GOLD.question
        assert Role("writer").gold() is None
