"""RAG-Critic's typed correction plans: the five action functions as pydantic models, and the parser that turns a
planner's program text into a validated :class:`Plan`.

The text is read with :func:`ast.parse` (syntax only, nothing is run): every statement must be
``name = Function(arg=value, ...)`` (or a bare call) with literal values, names of earlier outputs, ``name[i]``
or lists of names. Unknown functions or arguments, wrong types and references to names not yet assigned are
rejected with :class:`PlanError`; the executor (``programs/rag_critic/executor.py``) dispatches the validated steps.
"""
from __future__ import annotations

import ast
import re
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

MAX_TOPK = 10
#: RefineDoc's instructions: the paper's six ways of rewriting retrieved knowledge (its Table 12).
REFINE_OPTIONS = ("explain", "refine", "correct", "delete", "examples", "summarize")
#: Names a plan may use without assigning them: the question and the retrieved documents.
BUILTINS = {"question": "text", "documents": "docs"}


class PlanError(ValueError):
    """The planner's text is not a valid plan (the reason is the message)."""


class Ref(BaseModel):
    """A reference to an earlier output (or a builtin), optionally one element of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    index: int | None = None


Text = Union[str, Ref]
QUESTION = Ref(name="question")


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Retrieval(_Call):
    function: Literal["Retrieval"] = "Retrieval"
    query: Text
    topk: int = 5

    @field_validator("topk")
    @classmethod
    def _clamp(cls, v: int) -> int:
        return min(max(v, 1), MAX_TOPK)


class RewriteQuery(_Call):
    function: Literal["RewriteQuery"] = "RewriteQuery"
    query: Text = QUESTION
    instruction: Literal["clarify", "expand"] = "clarify"


class DecomposeQuery(_Call):
    function: Literal["DecomposeQuery"] = "DecomposeQuery"
    query: Text = QUESTION


class RefineDoc(_Call):
    """Edit document ``doc_index`` of ``docs`` (the retrieved documents, or a Retrieval's found ones)."""

    function: Literal["RefineDoc"] = "RefineDoc"
    query: Text = QUESTION
    doc_index: int = Field(ge=0)
    instruction: Literal[*REFINE_OPTIONS] = "summarize"
    docs: Ref = Ref(name="documents")


class GenerateAnswer(_Call):
    function: Literal["GenerateAnswer"] = "GenerateAnswer"
    query: Text = QUESTION
    docs: Ref | list[Ref] | None = None  # None: all current evidence
    additional_instruction: Text = ""


Call = Annotated[Union[Retrieval, RewriteQuery, DecomposeQuery, RefineDoc, GenerateAnswer],
                 Field(discriminator="function")]
FUNCTIONS = {m.__name__: m for m in (Retrieval, RewriteQuery, DecomposeQuery, RefineDoc, GenerateAnswer)}
#: What each function returns: documents, a list of queries, or text.
OUTPUT_KIND = {"Retrieval": "docs", "RewriteQuery": "queries", "DecomposeQuery": "queries", "RefineDoc": "text",
               "GenerateAnswer": "text"}
#: Which kinds of value each argument accepts when it is a reference.
ACCEPTS = {"query": {"text", "queries"}, "additional_instruction": {"text"}, "docs": {"docs"}}


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output: str | None = None  # the name the result is assigned to
    call: Call


class Plan(BaseModel):
    """Ordered steps; every reference points to a builtin or to an earlier step's output of a fitting kind."""

    model_config = ConfigDict(extra="forbid")
    steps: list[Step] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> "Plan":
        kinds = dict(BUILTINS)
        for i, step in enumerate(self.steps, 1):
            for arg, value in step.call:
                refs = value if isinstance(value, list) else [value]
                for ref in (r for r in refs if isinstance(r, Ref)):
                    kind = kinds.get(ref.name)
                    if kind is None:
                        raise ValueError(f"step {i}: '{ref.name}' is used before it is assigned")
                    if kind not in ACCEPTS.get(arg, set()):
                        raise ValueError(f"step {i}: {arg}={ref.name} passes {kind} where {arg} needs "
                                         f"{' or '.join(sorted(ACCEPTS.get(arg, {'a literal'})))}")
                    if ref.index is not None and kind == "text":
                        raise ValueError(f"step {i}: '{ref.name}' is text and cannot be indexed")
            if step.output:
                kinds[step.output] = OUTPUT_KIND[step.call.function]
        return self

    def lines(self) -> list[str]:
        """The plan as one readable call per step (for traces)."""
        return [f"{s.output + ' = ' if s.output else ''}{s.call.function}("
                + ", ".join(f"{k}={_show(v)}" for k, v in s.call if k != "function") + ")" for s in self.steps]


def _show(value) -> str:
    if isinstance(value, Ref):
        return value.name + (f"[{value.index}]" if value.index is not None else "")
    if isinstance(value, list):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value)


_STEP = TypeAdapter(Step)
_CALL_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\s*=\s*)?[A-Za-z_]\w*\s*\(")


def oracle_plan(query: str | None, topk: int) -> Plan:
    """The plan oracle's correction (``programs.shared.oracle.Gold.plan``) as a typed plan: a supplementary
    Retrieval of the oracle ``query`` (a gold passage is missing), then GenerateAnswer over all the evidence; with no
    query, GenerateAnswer alone (regenerate from what is held)."""
    answer = Step(output="answer", call=GenerateAnswer())
    if query is None:
        return Plan(steps=[answer])
    return Plan(steps=[Step(output="found", call=Retrieval(query=query, topk=topk)), answer])


def grammar(max_steps: int) -> tuple[str, str]:
    """GBNF for plans :func:`parse_plan` accepts, of 1..``max_steps`` lines ending with GenerateAnswer, as (value
    rule, rule definitions) for ``constrained.constrained_config``. Every argument is named, in FUNCTIONS' order,
    with values from its closed set; outputs are named by kind (``found`` documents, ``queries``, ``fixed`` text,
    ``answer``) and the rules track which kinds exist so far, so a reference can only name an output already
    assigned, of the kind the argument takes (rule ``plan-QF-n``: Q/F = queries/found assigned, n = lines left)."""
    rules = ['plan-str ::= "\\"" [^"\\\\\\n]{1,120} "\\""',
             "plan-edit ::= " + " | ".join(f'"{o}"' for o in REFINE_OPTIONS)]
    for q in (0, 1):
        rules += [f'plan-text{q} ::= plan-str | "question"' + (' | "queries[" [0-2] "]"' if q else ""),
                  f'plan-docs{q} ::= "documents"' + (' | "found" | "[documents, found]"' if q else ""),
                  f'plan-retrieval{q} ::= "found = Retrieval(query=" plan-text{q} ", topk=" [1-5] ")\\n"',
                  f'plan-queries{q} ::= "queries = " ("RewriteQuery(query=" plan-text{q} ", instruction=\\"" '
                  f'("clarify" | "expand") "\\")" | "DecomposeQuery(query=" plan-text{q} ")") "\\n"']
    for q in (0, 1):
        for f in (0, 1):
            found = '(", docs=found")? ' if f else ""  # RefineDoc edits a found document once there are some
            rules.append(f'plan-refine{q}{f} ::= "fixed = RefineDoc(query=" plan-text{q} ", doc_index=" [0-9] '
                         f'", instruction=\\"" plan-edit "\\"" {found}")\\n"')
            rules.append(f'plan-answer{q}{f} ::= "answer = GenerateAnswer(query=" plan-text{q} ", docs=" '
                         f'plan-docs{f} ", additional_instruction=" plan-str ")"')
            for n in range(1, max_steps + 1):
                more = [f"plan-retrieval{q} plan-{q}1-{n - 1}", f"plan-queries{q} plan-1{f}-{n - 1}",
                        f"plan-refine{q}{f} plan-{q}{f}-{n - 1}"] if n > 1 else []
                rules.append(f"plan-{q}{f}-{n} ::= " + " | ".join([f"plan-answer{q}{f}", *more]))
    return f"plan-00-{max_steps}", "\n".join(rules)


def parse_plan(text: str, max_steps: int = 5) -> tuple[Plan, bool]:
    """The validated plan in ``text`` and whether it was cut to ``max_steps`` steps (the first ``max_steps - 1`` and
    the final GenerateAnswer, whose references to cut outputs fall back to the question and all current
    evidence); :class:`PlanError` if the text is not a plan. Code fences and prose lines around the calls are
    ignored; a call may span several lines."""
    module = _module(text)
    steps = [_step(stmt, i) for i, stmt in enumerate(module.body, 1)]
    if not steps:
        raise PlanError("no function calls found")
    truncated = len(steps) > max_steps
    if truncated:
        steps = _cut(steps, max_steps)
    try:
        return Plan(steps=steps), truncated
    except ValidationError as err:
        raise PlanError(_first_error(err)) from None


def _cut(steps: list[Step], max_steps: int) -> list[Step]:
    """The first ``max_steps`` steps, or the first ``max_steps - 1`` and the plan's final GenerateAnswer (its
    arguments that name an output of a dropped step reset to their defaults)."""
    last = steps[-1]
    if last.call.function != "GenerateAnswer":
        return steps[:max_steps]
    kept = steps[:max_steps - 1]
    assigned = set(BUILTINS) | {s.output for s in kept if s.output}

    def dangling(value) -> bool:
        refs = value if isinstance(value, list) else [value]
        return any(isinstance(r, Ref) and r.name not in assigned for r in refs)

    reset = {k for k, v in last.call if dangling(v)}
    call = last.call.model_copy(update={k: GenerateAnswer.model_fields[k].default for k in reset})
    return [*kept, last.model_copy(update={"call": call})]


def _module(text: str) -> ast.Module:
    body = (text or "").strip()
    if fenced := re.search(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", body, re.S):
        body = fenced.group(1)
    try:
        return ast.parse(body)
    except SyntaxError:
        try:
            return ast.parse("\n".join(_call_lines(body)))
        except SyntaxError as err:
            raise PlanError(f"not a sequence of calls (line {err.lineno}: {err.msg})") from None


def _call_lines(body: str) -> list[str]:
    """The lines of ``body`` that hold calls, each call joined onto one line (continuation lines kept until its
    parentheses close); prose lines between calls dropped."""
    out, depth = [], 0
    for line in body.splitlines():
        if depth > 0:
            out[-1] += " " + line.strip()
        elif _CALL_LINE.match(line):
            out.append(line.strip())
        else:
            continue
        bare = re.sub(r"\"[^\"]*\"|'[^']*'", "", line)  # parentheses inside strings do not count
        depth = max(depth + bare.count("(") + bare.count("[") - bare.count(")") - bare.count("]"), 0)
    return out


def _step(stmt: ast.stmt, i: int) -> Step:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        output, call = stmt.targets[0].id, stmt.value
    elif isinstance(stmt, ast.Expr):
        output, call = None, stmt.value
    else:
        raise PlanError(f"step {i}: only 'name = Function(...)' lines are allowed")
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        raise PlanError(f"step {i}: not a function call")
    name = call.func.id
    model = FUNCTIONS.get(name)
    if model is None:
        raise PlanError(f"step {i}: unknown function {name}; allowed: {', '.join(FUNCTIONS)}")
    params = [p for p in model.model_fields if p != "function"]
    if len(call.args) > len(params):
        raise PlanError(f"step {i}: {name} takes at most {len(params)} arguments")
    args = dict(zip(params, call.args))
    for kw in call.keywords:
        if kw.arg not in params:
            raise PlanError(f"step {i}: unknown argument {kw.arg!s} of {name}; allowed: {', '.join(params)}")
        if kw.arg in args:
            raise PlanError(f"step {i}: argument {kw.arg} given twice")
        args[kw.arg] = kw.value
    values = {k: _value(v, f"step {i}: {name}({k}=...)") for k, v in args.items()}
    try:
        return _STEP.validate_python({"output": output, "call": {"function": name, **values}})
    except ValidationError as err:
        raise PlanError(f"step {i}: {_first_error(err)}") from None


def _value(node: ast.expr, where: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return Ref(name=node.id)
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)):
        return Ref(name=node.value.id, index=node.slice.value)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e, where) for e in node.elts]
        if all(isinstance(x, Ref) for x in items):
            return items
    raise PlanError(f"{where}: only quoted strings, integers and names of earlier outputs are allowed")


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"] if x not in ("call", "steps"))
    return f"{loc}: {e['msg']}" if loc else e["msg"]
