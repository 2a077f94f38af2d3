"""Check the MLflow UI as a person would: the runs list shows a suite's runs with their datasets, the compare view
shows their metrics, one question's trace shows the method's decisions, and a compiled prompt version reads.

``python -m scripts.check_mlflow_ui [--experiment agentic-rag] [--run SUITE_RUN_ID] [--screenshot-dir /tmp]``
Starts ``mlflow server`` on 127.0.0.1 over the project's store (``RAG_MLRUNS``, default ./mlruns), opens it in
headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven by selenium: ``pip install '.[ui]'``), and
prints one line per check. A screenshot of each page is saved. Exit status 1 if a check fails. The prompt check
needs a compile in the store (``python optimize.py ...``)."""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.parse
from pathlib import Path

import mlflow

from evaluation import tracking
from runtime import store

EXPAND = "button[data-component-id*='runnamecellrenderer']"  # the +/- before a parent run's name (MLflow 3)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1600,1000")


def browser(chromium: str, driver: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-profile-')}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for_text(page, texts: list[str], timeout: float) -> list[str]:
    """Poll the rendered page until every text is visible (or the timeout); return the ones still missing."""
    deadline = time.monotonic() + timeout
    while True:
        body = page.find_element("tag name", "body").text
        missing = [t for t in texts if t not in body]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(1)


def suite_runs(experiment: str, run_id: str | None):
    """The suite parent run (given, or the latest in ``experiment``) and its child runs."""
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"error: no experiment '{experiment}' in {store.tracking_uri()}; run "
                         "python evaluate.py --suite ... first or pass --experiment")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
    parents = [r for r in runs if r.info.run_id == run_id or (not run_id and "mlflow.parentRunId" not in r.data.tags
                                                                and r.data.tags.get("entry") == "evaluate.py --suite")]
    if not parents:
        raise SystemExit(f"error: no suite run in experiment '{experiment}'; run python evaluate.py --suite ...")
    parent = parents[0]
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return exp, parent, children


def check_trace(page, url: str, exp, children, shots: Path, timeout: float) -> bool:
    """One question's trace of a child run opens with its id, answer and the method's decisions; True on failure."""
    traces = [t for c in children for t in mlflow.search_traces(locations=[exp.experiment_id], run_id=c.info.run_id,
                                                                 return_type="list")
              if "question_id" in t.info.tags]
    if not traces:
        print("FAIL no question traces in the suite's child runs (were they run with --no-trace?)")
        return True
    trace = traces[0]
    page.get(f"{url}/#/experiments/{exp.experiment_id}/traces?selectedEvaluationId={trace.info.trace_id}")
    missing = wait_for_text(page, [trace.info.tags["question_id"], "decisions", "answer"], timeout)
    page.save_screenshot(str(shots / "mlflow-trace.png"))
    print(f"{'PASS' if not missing else 'FAIL'} trace of question {trace.info.tags['question_id']} shows its "
          "answer and decisions" + (f" (missing: {missing})" if missing else ""))
    return bool(missing)


def check_prompt(page, url: str, shots: Path, timeout: float) -> bool:
    """The latest registered prompt's page shows its compiled instructions; True on failure."""
    prompts = mlflow.genai.search_prompts()
    if not prompts:
        print("FAIL no registered prompt: compile a program first (python optimize.py --program ...)")
        return True
    name = prompts[0].name
    version = mlflow.genai.load_prompt(f"prompts:/{name}@latest")
    page.get(f"{url}/#/prompts/{urllib.parse.quote(name)}")
    first_line = version.template.splitlines()[0][:60]
    missing = wait_for_text(page, [name, first_line], timeout)
    page.save_screenshot(str(shots / "mlflow-prompt.png"))
    print(f"{'PASS' if not missing else 'FAIL'} prompt {name} version {version.version} shows its instructions"
          + (f" (missing: {missing})" if missing else ""))
    return bool(missing)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiment", default="agentic-rag")
    p.add_argument("--run", help="suite parent run id (default: the latest suite run of the experiment)")
    p.add_argument("--screenshot-dir", default=tempfile.gettempdir())
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    p.add_argument("--timeout", type=float, default=90, help="seconds to wait for each page to render")
    args = p.parse_args(argv)
    mlflow.set_tracking_uri(store.tracking_uri())
    exp, parent, children = suite_runs(args.experiment, args.run)
    names = [parent.info.run_name] + [c.info.run_name for c in children]
    metric = next((k for k in sorted(children[0].data.metrics) if k.endswith(("_judge", "_em", "_accuracy"))),
                  next(iter(sorted(children[0].data.metrics)))) if children else None
    shots, failures = Path(args.screenshot_dir), 0
    with tracking.server() as url:
        page = browser(args.chromium, args.chromedriver)
        try:
            page.get(f"{url}/#/experiments/{exp.experiment_id}/runs")
            missing = wait_for_text(page, [parent.info.run_name], args.timeout)
            if not missing:  # child runs are folded under their parent: unfold it as a person would
                page.find_element("css selector", EXPAND).click()
                missing = wait_for_text(page, [c.info.run_name for c in children], args.timeout)
            datasets = sorted({d.dataset.name for c in children for d in c.inputs.dataset_inputs})
            missing += wait_for_text(page, datasets or ["(no dataset input logged)"], args.timeout)
            page.save_screenshot(str(shots / "mlflow-experiment.png"))
            ok = not missing
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} experiment page {exp.name!r} lists suite run {parent.info.run_name!r} "
                  f"and its {len(children)} child runs with their datasets {datasets}"
                  + (f" (missing: {missing})" if missing else ""))
            ids = [c.info.run_id for c in children]
            query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([exp.experiment_id])})
            page.get(f"{url}/#/compare-runs?{query}")
            missing = wait_for_text(page, [c.info.run_name for c in children] + [metric], args.timeout)
            cells = page.find_elements("xpath", f"//*[normalize-space(text())='{metric}']")
            if cells:  # the metrics table, not the plot selector, is what the screenshot should show
                page.execute_script("arguments[0].scrollIntoView({block: 'center'})", cells[-1])
            page.save_screenshot(str(shots / "mlflow-compare.png"))
            ok = not missing
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} compare view shows {len(ids)} child runs and metric {metric!r}"
                  + (f" (missing: {missing})" if missing else ""))
            failures += check_trace(page, url, exp, children, shots, args.timeout)
            failures += check_prompt(page, url, shots, args.timeout)
        finally:
            page.quit()
    print(f"runs checked: {', '.join(names)}\nscreenshots in {shots}: mlflow-experiment.png, mlflow-compare.png, "
          "mlflow-trace.png, mlflow-prompt.png")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
