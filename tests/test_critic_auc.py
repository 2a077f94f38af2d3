"""The decision-quality script: AUC arithmetic, labelled passages, cross-fitted fusion, one DummyLM run."""
import json
import math

import pytest

import scripts.critic_auc as critic_auc
from tests.test_decisions import RelevanceLM


def test_auc_is_the_share_of_gold_over_distractor_pairs_with_ties_halved():
    assert critic_auc.auc([3, 4], [1, 2]) == 1.0 and critic_auc.auc([1, 2], [3, 4]) == 0.0
    assert critic_auc.auc([2, 2], [2, 2]) == 0.5
    assert critic_auc.auc([3, 1], [2, 2]) == pytest.approx(0.5)  # 3>2 twice, 1<2 twice
    assert critic_auc.auc([5, 2], [2]) == pytest.approx(0.75)  # one win, one tie
    assert math.isnan(critic_auc.auc([], [1]))


@pytest.fixture
def hotpot_dir(tmp_path):
    def rec(i):
        return {"_id": f"q{i}", "question": f"Who founded company {i}?", "answer": "Ann", "type": "bridge",
                "level": "easy", "supporting_facts": [[f"Gold {i}", 0], [f"Bridge {i}", 0]],
                "context": [[f"Other {i}a", ["Nothing here."]], [f"Gold {i}", ["Ann founded company ", f"{i}."]],
                            [f"Other {i}b", ["Still nothing."]], [f"Bridge {i}", ["Ann was born in Oslo."]],
                            [f"Other {i}c", ["More filler."]]]}
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "dev_distractor_sample.json").write_text(json.dumps([rec(i) for i in range(6)]))
    return tmp_path


def test_questions_are_taken_until_both_classes_hold_the_minimum(hotpot_dir, embedder):
    rows = critic_auc.labelled("hotpotqa", "distractors", hotpot_dir, None, embedder, 3, 1, 5, seed=13)
    # 2 gold + 1 distractor per question: 2 questions give 4 gold but 2 others, a third is needed
    assert len(rows) == 9 and sum(r["gold"] for r in rows) == 6 and len({r["qid"] for r in rows}) == 3
    assert all(r["passage"].title.endswith("a") for r in rows if not r["gold"])  # the first distractor only
    assert all(-1 <= r["retriever"] <= 1 for r in rows)


def test_fused_scores_of_a_question_never_see_its_own_labels():
    rows = [{"qid": f"q{i // 4}", "logprob": 0.2 + 0.1 * (i % 4), "relative": (i * 7 % 10) / 10 - 1, "gold": i % 2 == 0}
            for i in range(40)]
    flipped = [r | {"gold": not r["gold"]} if r["qid"] == "q0" else r for r in rows]
    for select in (False, True):
        before, _ = critic_auc.cross_fitted(rows, select=select)
        after, _ = critic_auc.cross_fitted(flipped, select=select)
        assert after[:4] == before[:4] and after[4:] != before[4:]  # q0's rows: fitted on other questions only


def test_script_prints_retriever_and_decision_rows(hotpot_dir, monkeypatch, capsys, embedder):
    p_yes = {f"{kind} {i}{end}": p for i in range(6) for kind, end, p in (("Gold", "", 0.9), ("Bridge", "", 0.6),
                                                                        ("Other", "a", 0.2), ("Other", "b", 0.2))}
    lm = RelevanceLM({}, p_yes)
    monkeypatch.setattr(critic_auc, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(critic_auc, "get_embedder", lambda name: embedder)
    out = hotpot_dir / "table.md"
    critic_auc.main(["--datasets", "hotpotqa", "--candidates", "distractors", "--min", "4", "--distractors", "2",
                     "--data-dir", str(hotpot_dir), "--lm", "fake:one", "--out", str(out)])
    table = out.read_text()
    assert "| hotpotqa | distractors | retriever score (no LM) | 4 / 4 |" in table
    assert "| hotpotqa | distractors | one generate | 4 / 4 | 0.500 |" in table  # always "yes": all tied
    assert "| hotpotqa | distractors | one logprob | 4 / 4 | 1.000 |" in table  # 0.9 / 0.6 vs 0.2
    assert "| hotpotqa | distractors | one fused |" in table and "s/decision" in capsys.readouterr().out
    assert "| hotpotqa | distractors | one fused where it helps (LM read in " in table
