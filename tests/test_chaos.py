"""``scripts/chaos_run.py`` at small scale: every fault it plans happens (malformed and unreadable replies, two server
deaths, an endpoint outage, a judge outage, a vector-store outage, a retriever bug, a SIGTERM, a SIGKILL mid-line with
a refused and a waiting second writer), and the run ends with the records of an undisturbed one; and its checks
catch what they are there to catch."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import scripts.chaos_run as chaos_run
from scripts.chaos_run import expected, failed, matches, stray

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(2400)  # ~15 evaluation processes, each importing DSPy, and a local Ray
def test_a_disturbed_run_ends_with_the_records_of_an_undisturbed_one(tmp_path):
    n = 40
    done = subprocess.run([sys.executable, "-m", "scripts.chaos_run", "--n", str(n), "--workdir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    counts = json.loads(done.stderr.strip().splitlines()[-1])
    assert counts["faults that did not happen"] == "none"
    assert set(chaos_run.SCENARIOS) <= set(counts) and counts["command-line faults not as expected"] == "none"
    assert counts["scored"] + sum(counts["failed by class"].values()) == n and counts["identical records"] == n
    assert counts["lost"] == counts["duplicated"] == counts["repeated requests"] == 0
    assert counts["unmatched requests"] == counts["stray sampled requests"] == 0
    assert counts["sampled retries"] >= n // 10  # each question whose greedy replies are all malformed
    assert counts["stops by exit code"] == {"-9": 1, "0": 1, "3": 1, "4": 1, "75": 1, "143": 1}
    assert counts["refused writers"] == counts["waiting writers"] == 1
    assert counts["cut question asked again by"] == "1 process(es)" and counts["restarts"] == 2
    assert {"StoreUnavailable", "LMServerError", "judge LMServerError"} <= set(counts["left retryable, by class"])
    assert float(counts["em (calm / chaos)"].split(" / ")[0]) > 0


def request(fault: str, temperature=None, judge: bool = False, question: str = "q") -> dict:
    return {"question": question, "fields": ["same"] if judge else ["answer"], "temperature": temperature,
            "fault": fault}


def test_a_sampled_request_counts_only_after_a_malformed_reply_to_the_same_question_and_role():
    assert stray([request("malformed"), request("malformed"), request("ok", 0.7)]) == 0
    assert stray([request("ok"), request("ok", 0.7)]) == 1  # sampled after a readable reply
    assert stray([request("ok", 0.7)]) == 1  # sampled first
    assert stray([request("malformed", judge=True), request("ok", 0.7)]) == 1  # the judge's malformed reply
    assert stray([request("malformed", question="p"), request("ok", 0.7)]) == 1  # another question's


def test_the_expected_record_follows_what_the_log_shows():
    calm = {"id": "q", "answer": "Paris", "em": 1.0}
    assert expected(calm, [request("malformed"), request("ok")]) == calm  # the JSON fallback read it
    assert expected(calm, [request("malformed"), request("malformed"), request("malformed", 0.7),
                           request("ok", 0.7)]) == calm | {"answer": "Paris" + chaos_run.SAMPLED, "tries": 2}
    assert expected(calm, [request("malformed"), request("die"), request("malformed"),
                           request("ok", 0.7)])["tries"] == 2  # the dead server's request was sent again
    assert expected(calm, [request("malformed"), request("malformed"), request("malformed", 0.7),
                           request("malformed", 0.7)]) == {"failed": True, "error_class": "AdapterParseError",
                                                           "tries": 2}


def test_a_record_matches_only_what_is_expected_of_it():
    calm = {"id": "q", "answer": "Paris", "em": 1.0, "tries": 1, "seconds": 0.1}
    assert matches(calm | {"tries": 2, "seconds": 0.3}, expected(calm, []))  # a greedy retry, slower
    assert not matches(calm | {"em": 0.0}, expected(calm, []))
    assert not matches(calm | {"retryable": True}, expected(calm, []))  # a field more
    sampled = expected(calm, [request("malformed"), request("malformed"), request("ok", 0.7)])
    assert matches(calm | {"answer": "Paris" + chaos_run.SAMPLED, "tries": 2}, sampled)
    assert not matches(calm, sampled) and not matches(calm | {"answer": "Paris" + chaos_run.SAMPLED}, sampled)


def test_any_loss_difference_stray_or_missing_fault_fails_the_run():
    good = {"lost": 0, "duplicated": 0, "different records": 0, "repeated requests": 0, "unmatched requests": 0,
            "stray sampled requests": 0, "em (calm / chaos)": "0.325 / 0.325", "faults that did not happen": "none",
            "cut question asked again by": "1 process(es)"}
    assert not failed(good)
    bad = {"lost": 1, "duplicated": 1, "different records": 1, "repeated requests": 1, "unmatched requests": 1,
           "stray sampled requests": 1, "em (calm / chaos)": "0.000 / 0.000",
           "faults that did not happen": ["judge outage"], "cut question asked again by": "2 process(es)",
           "command-line faults not as expected": ["401 endpoint"]}
    for key, value in bad.items():
        assert failed(good | {key: value}), key
