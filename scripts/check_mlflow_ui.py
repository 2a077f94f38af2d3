"""Check the MLflow UI as a GenAI user works in it: a question's trace shows the passages each search returned (ids
and scores), the traces list filters by a score, the evaluation-runs view compares two runs' scores, and a
compiled program's registered model version and prompt version read.

``python -m scripts.check_mlflow_ui [--experiment agentic-rag] [--runs RUN_ID RUN_ID] [--screenshot-dir DIR]``
Starts ``mlflow server`` on 127.0.0.1 over the project's store (``RAG_MLRUNS``, default ./mlruns), opens it in
headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven by selenium: ``pip install '.[ui]'``), and
prints one line per check. A screenshot of each page is saved in ``--screenshot-dir``. Exit status 1 if a check
fails. The runs are two ``evaluate.py`` runs with question traces (default: the latest two of the experiment); the
model and prompt checks need a compile in the store (``python optimize.py ...``)."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.parse
from pathlib import Path

import mlflow
from mlflow.entities import SpanType

from evaluation import tracking
from evaluation.serving import model_name
from programs.shared.gates import GATE_SPAN
from runtime import store

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1800,1100")
#: The traces list's filter controls (MLflow 3.17's ``web-shared.traces-table.filter.*`` components).
FILTER = "[data-component-id='web-shared.traces-table.filter.{}']"
#: Popovers the UI opens on a first visit, closed as a person would before looking at the page.
DISMISS = ("//button[normalize-space(.)='Got it']", "//button[@data-component-id='mlflow.assistant.chat_panel.close']")


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


def visible(page, by: str, what: str, timeout: float = 10) -> list:
    """The displayed elements ``what`` finds (``by``: "xpath" or "css selector"), waiting up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in page.find_elements(by, what) if e.is_displayed()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def click(page, by: str, what: str, timeout: float = 10) -> bool:
    """Click the first displayed element ``what`` finds; False when none shows within ``timeout`` s."""
    from selenium.common.exceptions import WebDriverException

    found = visible(page, by, what, timeout)
    if found:
        page.execute_script("arguments[0].scrollIntoView({block: 'center'})", found[0])
        try:
            found[0].click()  # a real click: tabs and menus open on pointer events
        except WebDriverException:  # covered by an overlay: the element's own click handler
            page.execute_script("arguments[0].click()", found[0])
        time.sleep(1)
    return bool(found)


def named(text: str) -> str:
    """XPath of an element whose own text is ``text``."""
    return f"//*[normalize-space(text())='{text}']"


def open_page(page, url: str, ready: str, timeout: float) -> None:
    """Load ``url``, wait for ``ready`` to show, and close the first-visit popovers."""
    page.get(url)
    wait_for_text(page, [ready], timeout)
    for popover in DISMISS:
        click(page, "xpath", popover, timeout=2)


def report(ok: bool, what: str, missing=()) -> bool:
    """Print one check's line; True on failure."""
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f" (missing: {missing})" if missing else ""))
    return not ok


def traced_runs(experiment: str, run_ids: list[str] | None):
    """The experiment and its two compared ``evaluate.py`` runs (given, else the latest two with question traces in
    the order they ran), each with its question traces."""
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"error: no experiment '{experiment}' in {store.tracking_uri()}; run python evaluate.py "
                         "... --experiment NAME first or pass --experiment")
    if run_ids:
        runs = [client.get_run(r) for r in run_ids]
    else:
        runs = client.search_runs([exp.experiment_id], "tags.entry = 'evaluate.py'",
                                  order_by=["attributes.start_time DESC"])
    pairs = [(r, traces) for r in runs if (traces := question_traces(exp.experiment_id, r.info.run_id))][:2]
    if len(pairs) < 2:
        raise SystemExit(f"error: experiment '{experiment}' needs two evaluate.py runs with question traces "
                         "(evaluate.py runs trace by default; --no-trace runs have none); found "
                         f"{len(pairs)}")
    return exp, pairs if run_ids else pairs[::-1]  # the earlier run first, as they ran


def question_traces(experiment_id: str, run_id: str) -> list:
    return [t for t in mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list")
            if "question_id" in t.info.tags]


def check_search(page, url: str, exp, traces: list, shots: Path, timeout: float) -> bool:
    """A question's trace opens, its first search's span shows the passages it returned, and the first passage
    unfolds to its id and retrieval score; True on failure."""
    firsts = [(t, min((s for s in t.data.spans if s.span_type == SpanType.RETRIEVER),
                      key=lambda s: s.start_time_ns, default=None)) for t in traces]
    found = [(t, s) for t, s in firsts if s is not None and s.outputs]  # a question's first search (the tree's)
    if not found:
        return report(False, "a trace with a search: no RETRIEVER span with documents in the run's traces")
    trace, span = found[0]
    first = span.outputs[0]
    meta = first["metadata"]
    score = json.dumps(meta["score"]).removesuffix(".0")  # as the page prints a number
    open_page(page, f"{url}/#/experiments/{exp.experiment_id}/traces?selectedEvaluationId={trace.info.trace_id}",
              span.name, timeout)
    click(page, "xpath", named(span.name))
    click(page, "xpath", f"//*[starts-with(normalize-space(text()), {xpath_literal(first['page_content'][:40])})]")
    missing = wait_for_text(page, [meta["id"], score, meta["title"]], timeout)
    page.save_screenshot(str(shots / "mlflow-trace-search.png"))
    return report(not missing, f"trace of question {trace.info.tags['question_id']}: its search shows "
                  f"{len(span.outputs)} passages, the first {meta['id']} at score {meta['score']:.3f}", missing)


def check_gate(page, url: str, exp, traces: list, shots: Path, timeout: float) -> bool:
    """A decision over passages (a GATE span with ``kept`` / ``dropped``) shows the passage ids in its attributes;
    True on failure. No such decision in the runs (a method without one): nothing checked."""
    found = [(t, s) for t in traces for s in t.data.spans
             if s.span_type == GATE_SPAN and (s.attributes.get("kept") or s.attributes.get("dropped"))]
    if not found:
        print("SKIP no decision over passages (a GATE span with kept/dropped) in the runs' traces")
        return False
    trace, span = found[0]
    kept, dropped = span.attributes.get("kept") or [], span.attributes.get("dropped") or []
    open_page(page, f"{url}/#/experiments/{exp.experiment_id}/traces?selectedEvaluationId={trace.info.trace_id}",
              span.name, timeout)
    click(page, "xpath", named(span.name))
    click(page, "xpath", named("Attributes"))
    missing = wait_for_text(page, ["kept", "dropped", *kept[:2], *dropped[:2]], timeout)
    page.save_screenshot(str(shots / "mlflow-trace-gate.png"))
    return report(not missing, f"trace of question {trace.info.tags['question_id']}: {span.name} shows "
                  f"{len(kept)} passages kept and {len(dropped)} dropped", missing)


def xpath_literal(text: str) -> str:
    """``text`` as an XPath string literal (XPath 1 has no escapes: a text with both quotes is concatenated)."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


def score_to_filter(traces: list) -> tuple[str, str]:
    """The score the traces list is filtered by: ``judge`` (else ``em``, else the first logged), at 1 when some
    question has it (else 0), as the store holds it (a float's text)."""
    values = {(a.name, a.value) for t in traces for a in t.info.assessments}
    names = sorted({n for n, _ in values})
    name = next((n for n in ("judge", "em") if n in names), names[0] if names else None)
    if name is None:
        return None, None
    return name, str(1.0 if (name, 1.0) in values else 0.0)


def check_filter(page, url: str, exp, traces: list, shots: Path, timeout: float) -> bool:
    """The experiment's traces list filtered, through its Filters control, by one score lists the questions the
    store finds with it; True on failure."""
    name, value = score_to_filter(traces)
    if name is None:
        return report(False, "traces list filtered by a score: the run's traces carry no feedback")
    expected = mlflow.search_traces(locations=[exp.experiment_id], filter_string=f"feedback.{name} = '{value}'",
                                    return_type="list")
    open_page(page, f"{url}/#/experiments/{exp.experiment_id}/traces", "Traces", timeout)
    option = "//*[@role='option'][normalize-space(.)='{}']"
    steps = [("css selector", FILTER.format("trigger")), ("css selector", FILTER.format("field")),
             ("xpath", option.format("Feedback")), ("css selector", FILTER.format("key-combobox")),
             ("xpath", option.format(name))]  # Filters > field Feedback > its name; then the value, Apply
    for by, what in steps:
        if not click(page, by, what):
            return report(False, f"traces list filtered by {name} = {value}: no control {what}")
    visible(page, "css selector", FILTER.format("value"))[0].send_keys(value)
    click(page, "css selector", FILTER.format("apply"))
    missing = wait_for_text(page, [f"{len(expected)} of "], timeout)
    body = page.find_element("tag name", "body").text
    missing += [q for q in (t.data.request[:40] for t in expected[:5]) if q not in body]  # a cell's start
    page.save_screenshot(str(shots / "mlflow-traces-filtered.png"))
    return report(not missing, f"traces list filtered by feedback {name} = {value} lists the {len(expected)} "
                  "questions the store finds", missing)


def check_compare(page, url: str, exp, pairs: list, shots: Path, timeout: float) -> bool:
    """The evaluation-runs view compares the two runs: both named with their datasets, their scores as columns;
    True on failure."""
    (first, _), (second, _) = pairs
    query = urllib.parse.urlencode({"selectedRunUuid": first.info.run_id, "compareToRunUuid": second.info.run_id})
    names = sorted({a.name for _, traces in pairs for t in traces for a in t.info.assessments})
    datasets = sorted({d.dataset.name for r, _ in pairs for d in r.inputs.dataset_inputs})
    open_page(page, f"{url}/#/experiments/{exp.experiment_id}/evaluation-runs?{query}", "Comparing", timeout)
    missing = wait_for_text(page, ["Comparing", first.info.run_name, second.info.run_name, *datasets,
                                   *names[:4]], timeout)  # the view shows four score columns at first
    page.save_screenshot(str(shots / "mlflow-compare-runs.png"))
    return report(not missing, f"evaluation runs compare {first.info.run_name!r} to {second.info.run_name!r} "
                  f"({', '.join(datasets)}) on scores {names[:4]}", missing)


def check_model(page, url: str, shots: Path, timeout: float) -> bool:
    """The latest registered version of a compiled program opens with its source run and input schema; True on
    failure."""
    client = mlflow.MlflowClient()
    versions = client.search_model_versions(f"name LIKE '{model_name('%')}'", order_by=["creation_timestamp DESC"])
    if not versions:
        return report(False, "no registered model: compile a program first (python optimize.py --program ...)")
    version = versions[0]
    run = client.get_run(version.run_id)
    open_page(page, f"{url}/#/models/{urllib.parse.quote(version.name)}/versions/{version.version}",
              f"Version {version.version}", timeout)
    click(page, "xpath", "//*[starts-with(normalize-space(text()), 'Inputs (')]")
    missing = wait_for_text(page, [version.name, f"Version {version.version}", run.info.run_name, "question"],
                            timeout)
    page.save_screenshot(str(shots / "mlflow-model-version.png"))
    return report(not missing, f"registered model {version.name} version {version.version} shows its source run "
                  f"{run.info.run_name!r} and input schema", missing)


def check_prompt(page, url: str, shots: Path, timeout: float) -> bool:
    """The latest registered prompt's page shows its compiled instructions; True on failure."""
    prompts = mlflow.genai.search_prompts()
    if not prompts:
        return report(False, "no registered prompt: compile a program first (python optimize.py --program ...)")
    name = prompts[0].name
    version = mlflow.genai.load_prompt(f"prompts:/{name}@latest")
    open_page(page, f"{url}/#/prompts/{urllib.parse.quote(name)}", name, timeout)
    first_line = version.template.splitlines()[0][:60]
    missing = wait_for_text(page, [name, first_line], timeout)
    page.save_screenshot(str(shots / "mlflow-prompt.png"))
    return report(not missing, f"prompt {name} version {version.version} shows its instructions", missing)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiment", default="agentic-rag")
    p.add_argument("--runs", nargs=2, metavar="RUN_ID",
                   help="the two evaluate.py runs to check (default: the latest two with question traces)")
    p.add_argument("--screenshot-dir", default=tempfile.gettempdir())
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    p.add_argument("--timeout", type=float, default=90, help="seconds to wait for each page to render")
    args = p.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the server would fetch prices from the web
    mlflow.set_tracking_uri(store.tracking_uri())
    exp, pairs = traced_runs(args.experiment, args.runs)
    traces = [t for _, ts in pairs for t in ts]
    shots = Path(args.screenshot_dir)
    shots.mkdir(parents=True, exist_ok=True)
    with tracking.server() as url:
        page = browser(args.chromium, args.chromedriver)
        try:
            failures = sum([check_search(page, url, exp, traces, shots, args.timeout),
                            check_gate(page, url, exp, traces, shots, args.timeout),
                            check_filter(page, url, exp, traces, shots, args.timeout),
                            check_compare(page, url, exp, pairs, shots, args.timeout),
                            check_model(page, url, shots, args.timeout),
                            check_prompt(page, url, shots, args.timeout)])
        finally:
            page.quit()
    print(f"runs checked: {', '.join(r.info.run_name for r, _ in pairs)}\nscreenshots in {shots}: "
          + ", ".join(sorted(f.name for f in shots.glob("mlflow-*.png"))))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
