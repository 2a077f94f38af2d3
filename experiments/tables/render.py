"""``render NAME``: a table's markdown written from its kept runs (``stored.keep``) -- the leaderboard (rows, cost
columns, paired differences with intervals, McNemar / paired t, Holm: ``evaluation.leaderboard``), a cost-quality plot
per dataset (``evaluation.plots.frontier`` against LM calls and prompt tokens a question, logged to the table's newest
run and embedded), the command, the runs, n, and the stamp of the code that made it (docs/results/tables/NAME.json),
which ``check`` compares with today's code; and the generated list of tables in docs/results.md."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import mlflow

from evaluation import leaderboard, plots, tracking
from experiments.cli import fail
from experiments.tables import stamp, stored
from experiments.tables.declared import TABLES, Table

STATUS = re.compile(r"<!-- status -->.*?<!-- /status -->", re.S)
INDEX = re.compile(r"<!-- tables:begin -->.*?<!-- tables:end -->", re.S)


def folder(docs: Path | None = None) -> Path:
    """Where rendered tables go (``docs``: the docs folder, default the project's)."""
    return (docs or stored.DOCS) / "results" / "tables"


def made_by(table: Table, rows: list[stored.Row]) -> dict:
    """The table's stamp from its rows: per cell its run, commit, code and data; per program and dataset the one
    value its cells share (``mixed`` where parts ran on different code or data: never today's)."""
    cells = {f"{r.result.cell.label}@{r.result.cell.dataset}": {
        "run": r.result.run_id, "parent": r.parent, "commit": r.commit, "n": r.result.summary.get("n"),
        "program": r.result.cell.program,
        "code": r.stamp.get("programs", {}).get(r.result.cell.program, "unstamped"),
        "data": (r.params.get("data_fingerprint") or "")[:12], "settings": r.stamp.get("settings", "unstamped"),
        "lm": r.params.get("lm", "")} for r in rows}

    def shared(key: str, group) -> dict:
        """Per group of cells (``group(cell)``), the one value of ``key`` they share, else ``mixed``."""
        values: dict = {}
        for r, c in zip(rows, cells.values()):
            values.setdefault(group(r.result.cell), set()).add(c[key])
        return {g: v.pop() if len(v) == 1 else "mixed" for g, v in values.items()}
    return {"table": table.name, "commit": shared("commit", lambda c: "")[""],
            "settings": shared("settings", lambda c: "")[""], "programs": shared("code", lambda c: c.program),
            "data": shared("data", lambda c: c.dataset), "declared_cells": len(stored.planned(table)[0]),
            "commands": list(dict.fromkeys(r.stamp.get("command", "") for r in rows if r.stamp.get("command"))),
            "cells": cells}


def timed_on(rows: list[stored.Row]) -> str:
    """Which machine took each cell's seconds: one line, or, where cells were timed on several, which cells on each
    (their s/q compare only within one machine)."""
    machines: dict[str, list[str]] = {}
    for r in rows:
        machines.setdefault(r.params.get("machine") or "not recorded", []).append(
            f"{r.result.label}@{r.result.cell.dataset}")
    if len(machines) == 1:
        return f"Seconds timed on one machine: {next(iter(machines))}."
    return (f"**Seconds timed on {len(machines)} machines: compare s/q only between cells of one.** "
            + "; ".join(f"{m}: {', '.join(cells)}" for m, cells in machines.items()) + ".")


def status(table: Table, made: dict | None, data: dict | None = None) -> str:
    """The status line of a rendered table: fresh, or stale since the commit that changed what it ran."""
    if not made:
        return "not rendered"
    now = stamp.current(table)
    if problems := stamp.differences(table, made, now, data):
        differ = "differs" if len(problems) == 1 else "differ"
        return f"**stale since {stamp.stale_since(table, made, now)}**: {', '.join(problems)} {differ} from today's"
    part = (f"; {len(made['cells'])} of {made['declared_cells']} cells run"
            if len(made["cells"]) < made.get("declared_cells", 0) else "")
    return f"current (measured on {made['commit'][:12]}){part}"


def load_stamp(table: Table, docs: Path | None = None) -> dict | None:
    path = folder(docs) / f"{table.name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def set_status(table: Table, line: str, docs: Path | None = None) -> None:
    path = folder(docs) / f"{table.name}.md"
    if path.exists():
        text = path.read_text(encoding="utf-8")
        path.write_text(STATUS.sub(lambda _: f"<!-- status -->{line}<!-- /status -->", text), encoding="utf-8")


def render(table: Table, docs: Path | None = None) -> str:
    """Write docs/results/tables/NAME.md (+ .json, plots) from the table's runs; returns the markdown."""
    rows = stored.rows(table, docs)
    if not rows:
        fail(f"table {table.name} has no finished run: python -m experiments.tables run {table.name}")
    results = [r.result for r in rows]
    _, pairs = stored.planned(table)
    lms = sorted({r.params.get("lm", "") for r in rows})
    board = leaderboard.report(results, pairs, f"{table.name}, lm {', '.join(lms)}, judge "
                                                f"{'yes' if table.judge else '-'}")
    made = made_by(table, rows)
    out = folder(docs)
    out.mkdir(parents=True, exist_ok=True)
    images, elsewhere = [], set()
    tracking.setup("Default")  # this machine's store, which holds the parents of the cells run here
    parents = list(dict.fromkeys(r.parent for r in rows if r.parent))
    for dataset in dict.fromkeys(r.cell.dataset for r in results):
        fig = plots.frontier(dataset, [r for r in results if r.cell.dataset == dataset], plots.CALLS_AND_PROMPT)
        name = f"{table.name}-{dataset.replace(':', '_')}.png"
        fig.savefig(out / name, dpi=80)
        for parent in parents:  # the runs the table was rendered from, where this machine's store holds them
            try:
                mlflow.MlflowClient().log_figure(parent, fig, f"plots/{name}")
            except mlflow.exceptions.MlflowException:
                elsewhere.add(parent)
        plots.close(fig)
        images.append(f"![{dataset}: quality vs cost]({name})")
    runs = ["| cell | dataset | n | run | parent | commit | code | data |", "|" + "---|" * 8]
    runs += [f"| {key.split('@')[0]} | {key.split('@')[1]} | {c['n']} | {c['run'][:8]} | {c['parent'][:8]} | "
             f"{c['commit'][:12]} | {c['code']} | {c['data']} |" for key, c in made["cells"].items()]
    sizes = ", ".join(f"{d} {n}" for d, n in table.sizes.items())
    text = "\n\n".join([
        f"# Table {table.name}: {table.paper}",
        f"<!-- status -->{status(table, made)}<!-- /status -->",
        "Generated by `python -m experiments.tables render " + table.name + "` from the runs below; do not edit.",
        f"Declared test questions: {sizes}. Metrics: {', '.join(table.metrics)}. Settings: "
        + (", ".join(f"{k} {v}" for k, v in table.settings.items()) or "the methods' own")
        + (f". {table.note}" if table.note else "") + ".",
        "Commands: " + ("; ".join(f"`{c}`" for c in made["commands"]) or "-"),
        board.markdown.replace("# Leaderboard: ", "## Leaderboard: ", 1).replace("\n## ", "\n### "),
        timed_on(rows),
        "## Cost and quality\n\n" + "\n\n".join(images),
        "## Runs and the code that made them\n\n" + "\n".join(runs)
        + f"\n\nSettings hash {made['settings']}; program code: "
        + ", ".join(f"{p} {c}" for p, c in made["programs"].items()) + "; data: "
        + ", ".join(f"{d} {f}" for d, f in made["data"].items()) + "."]) + "\n"
    (out / f"{table.name}.md").write_text(text, encoding="utf-8")
    (out / f"{table.name}.json").write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")
    write_index(docs)
    if elsewhere:
        print(f"plots not logged to {len(elsewhere)} parent run(s) this machine's MLflow store does not hold "
              f"({', '.join(sorted(p[:8] for p in elsewhere))}): kept runs made elsewhere", file=sys.stderr)
    return text


def write_index(docs: Path | None = None, states: dict | None = None) -> str:
    """The generated list of tables in docs/results.md (between its ``tables`` markers), with each one's status
    (``states``: as ``check`` found them; else against today's code)."""
    lines = ["<!-- tables:begin -->", "| table | reproduces | test questions | status |", "|---|---|---|---|"]
    for table in TABLES.values():
        made = load_stamp(table, docs)
        link = f"[{table.name}](results/tables/{table.name}.md)" if made else table.name
        lines.append(f"| {link} | {table.paper.split(':')[0]} | {sum(table.sizes.values())} | "
                     f"{(states or {}).get(table.name) or status(table, made)} |")
    block = "\n".join(lines + ["<!-- tables:end -->"])
    path = (docs or stored.DOCS) / "results.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(INDEX.sub(lambda _: block, text) if INDEX.search(text) else text, encoding="utf-8")
    return block
