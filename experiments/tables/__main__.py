"""``python -m experiments.tables list | run NAME [flags] | render NAME | check [--write] | export NAME``."""
from __future__ import annotations

import sys
from pathlib import Path

from experiments import cli
from experiments.cli import fail, interruptible
from experiments.tables import render, run, stamp, stored
from experiments.tables.declared import TABLES, Table
from experiments.tables.export import export

USAGE = ("usage: python -m experiments.tables list | run NAME [--lm ... --api-base ... --threads N --ray ... "
         "--estimate --price-in USD --price-out USD --yes] | render NAME | check [--write] [--no-data] [--strict] | "
         "export NAME [--out DIR]")


def table(name: str | None) -> Table:
    if name not in TABLES:
        fail(f"unknown table '{name}'; one of: {', '.join(TABLES)}")
    return TABLES[name]


def listing() -> str:
    """Every table with its size (cells, questions asked) and its status."""
    lines = ["| table | kind | datasets (test questions) | arms | cells | questions asked | LM | status |",
             "|" + "---|" * 8]
    for t in TABLES.values():
        cells = stored.planned(t)[0] * max(1, len(t.variants))
        asked = sum(t.sizes[c.dataset] for c in cells)
        lines.append(f"| {t.name} | {t.kind} | {', '.join(f'{d} {n}' for d, n in t.sizes.items())} | "
                     f"{len(t.programs)} | {len(cells)} | {asked} | {t.lm} | "
                     f"{render.status(t, render.load_stamp(t))} |")
    return "\n".join(lines)


def check(write: bool, data: bool) -> dict[str, str]:
    """Each rendered table's status against today's code (and data, with ``data``); ``write`` marks the docs."""
    out = {}
    for t in TABLES.values():
        made = render.load_stamp(t)
        prints = stamp.data_fingerprints(list(made["data"]), t.settings) if made and data else None
        out[t.name] = render.status(t, made, prints)
        if write:
            render.set_status(t, out[t.name])
    if write:
        render.write_index(states=out)
    return out


@interruptible
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "list":
        print(listing())
    elif command == "run":
        chosen, flags = table(rest[0] if rest else None), rest[1:]
        p = run.parser()
        return run.run(chosen, p.parse_args(flags), cli.given_flags(p, flags), argv)
    elif command == "render":
        print(render.render(table(rest[0] if rest else None)))
    elif command == "check":
        unknown = [a for a in rest if a not in ("--write", "--no-data", "--strict")]
        if unknown:
            fail(f"check takes --write, --no-data, --strict (got {unknown[0]})")
        states = check("--write" in rest, "--no-data" not in rest)
        width = max(map(len, states))
        print("\n".join(f"{name:<{width}}  {state}" for name, state in states.items()))
        if "--strict" in rest and any(s.startswith("**stale") for s in states.values()):
            raise SystemExit(1)
        return states
    elif command == "export":
        name = rest[0] if rest else None
        out = Path(rest[rest.index("--out") + 1]) if "--out" in rest[:-1] else Path("exports") / str(name)
        return export(table(name), out)
    else:
        fail(USAGE.removeprefix("usage: "))


if __name__ == "__main__":
    main()
