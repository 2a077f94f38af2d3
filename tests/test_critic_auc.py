"""The critic AUC script: the AUC arithmetic, the labelled passages, and one end-to-end run on DummyLM."""
import json
import math

import pytest
from dspy.utils.dummies import DummyLM

import scripts.critic_auc as critic_auc


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
    (tmp_path / "hotpotqa" / "dev_distractor_sample.json").write_text(json.dumps([rec(i) for i in range(3)]))
    return tmp_path


def test_gold_and_the_first_distractors_of_each_question(hotpot_dir):
    items = critic_auc.labelled_passages(hotpot_dir, 2, 1, seed=13)
    assert len(items) == 2 * 3 and sum(gold for _, _, gold in items) == 4
    assert {p.title.split()[0] for _, p, gold in items if not gold} == {"Other"}
    assert all(p.title.endswith("a") for _, p, gold in items if not gold)  # the first distractor only


def test_script_prints_one_row_per_critic_lm(hotpot_dir, monkeypatch, capsys):
    answers = {"[[ ## document ## ]]": {"relevance": 3, "usefulness": 3, "specificity": 3, "compatibility": 3,
                                        "critique": "ok"},
               "[[ ## passage ## ]]": {"triples": "Ann | founded | company"},
               "[[ ## facts ## ]]": {"coverage": 0.5, "bridge": "linked", "corroboration": "single_source",
                                     "answerability": 0.5, "sufficient": False}}
    monkeypatch.setattr(critic_auc, "make_lm", lambda *a, **k: DummyLM(answers))
    results = critic_auc.main(["--n", "2", "--distractors", "2", "--data-dir", str(hotpot_dir),
                               "--critic-lm", "fake:one", "fake:two"])
    assert list(results) == ["fake:one", "fake:two"]
    # every passage gets the same CORAL scores (AUC 0.5); SEAL verifies "Ann ... company" only in the Gold passages
    assert results["fake:one"]["auc_coral_s_tot"] == 0.5 and results["fake:one"]["auc_seal_coverage"] == 0.75
    out = capsys.readouterr().out
    assert "| fake:one | 4 / 4 | 0.500 | 0.500 | 0.750 | 0.750 |" in out
