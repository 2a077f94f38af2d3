"""``scripts/chaos_run.py`` at small scale: malformed replies, two server deaths, an endpoint outage and a SIGTERM,
then a resume, end with the records of an undisturbed run, each finished question asked by one process only."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "chaos_run.py"


@pytest.mark.timeout(900)  # 7 evaluation processes, each importing DSPy
def test_a_disturbed_run_ends_with_the_records_of_an_undisturbed_one(tmp_path):
    # seed 6: requests 1, 20 and 23 of the 12-question schedule are malformed
    done = subprocess.run([sys.executable, str(SCRIPT), "--n", "12", "--seed", "6", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    counts = json.loads(done.stderr.strip().splitlines()[-1])
    assert counts["malformed replies"] >= 1 and counts["outage replies"] == 12 and counts["server deaths"] == 2
    assert counts["restarts"] == 2 and counts["endpoint stops"] == 1 and counts["sigterms"] == 1
    assert counts["scored"] + counts["failed"] == 12 and counts["identical records"] == 12
    assert counts["lost"] == counts["duplicated"] == counts["repeated requests"] == 0
    assert counts["retryable lines"] >= 5  # the outage's questions were written as retryable, then answered
