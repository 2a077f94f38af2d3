"""Dispatcher for RAG-Critic plans: runs validated :class:`programs.rag_critic.plan.Plan` steps in order with the writer
model (the paper's executor), never ``exec``/``eval``. GenerateAnswer is the program's own writer, the one that wrote
the draft, told the step's additional instruction (the paper's executor generates with the same model and prompt);
without one (empty, the paper's None) it is the draft's request as it was, on the step's documents.

State: ``question``, ``documents`` (the retrieved passages) and each step's named output; the *evidence* list
(the documents, then what Retrieval found) grows with Retrieval and is edited by RefineDoc, which addresses a
document by its index in ``documents`` or in a Retrieval's output. A step
whose LM output cannot be parsed, whose ``doc_index`` or index is out of range, or which reads a name an earlier
failed step left unassigned, is logged as failed and leaves the state unchanged. If no GenerateAnswer of the plan
produced an answer (none at the end, or it failed), one on the current evidence is added.
"""
from __future__ import annotations

import dataclasses

import dspy

from programs.shared.evidence import lenient
from programs.rag_critic.plan import GenerateAnswer, Plan, Ref, Step
from programs.shared.steps import Role, RoleStep
from programs.shared.text import query_text
from programs.shared.writer import Writer
from retrieval.corpus import Passage, dedup
from retrieval.retriever import Retriever
from signatures.revise import REFINE_INSTRUCTIONS, DecomposeQuestion, RefineDocument, RewriteForSearch

MAX_QUERIES = 3  # queries searched when Retrieval gets a list of them
MAX_DOCS = 10  # documents GenerateAnswer reads (the first ones: retrieved documents, then added ones)


class StepError(Exception):
    """A step that could not run (reason in the message)."""


@dataclasses.dataclass
class _Run:
    """One plan execution's state (kept off the module, so concurrent questions do not share it)."""

    state: dict
    evidence: list[Passage | None]  # None marks a deleted document
    options: dict[str, str] | None = None
    lang: str | None = None  # the question's language, where the dataset gives it
    used: list[Passage] | None = None  # the documents the last GenerateAnswer read
    queries: list[str] = dataclasses.field(default_factory=list)  # every query Retrieval searched

    @property
    def current(self) -> list[Passage]:
        return [p for p in self.evidence if p is not None]


class PlanExecutor(dspy.Module):
    def __init__(self, search: Retriever, writer: Writer, max_chars: int | None = None,
                 oracle: frozenset[str] = frozenset()):
        super().__init__()
        self.search, self.max_chars = search, max_chars
        self.rewrite = dspy.Predict(RewriteForSearch)
        self.decompose = dspy.Predict(DecomposeQuestion)
        # the query oracle's one query from the documents held stands in for a rewrite and a decomposition
        self.rewrite_step = RoleStep(self.rewrite, "query", oracle, field="queries", given=lambda query: [query],
                                     read=lambda out: _lines(out.queries)[:MAX_QUERIES],
                                     demo=lambda queries: {"queries": "\n".join(queries)})
        self.decompose_step = RoleStep(self.decompose, "query", oracle, field="sub_questions",
                                       given=lambda query: [query], read=lambda out: _lines(out.sub_questions)[:4],
                                       demo=lambda queries: {"sub_questions": "\n".join(queries)})
        self.reader = Role("writer", oracle)  # the perfect reader: reads documents as they are, answers as the writer
        self.refine = dspy.Predict(RefineDocument)
        self.writer = writer  # the program's draft writer (one predictor, named under the program's ``writer``)

    def forward(self, plan: Plan, question: str, passages: list[Passage],
                options: dict[str, str] | None = None, lang: str | None = None) -> dspy.Prediction:
        """Run ``plan``; the answer is the last GenerateAnswer's (None if every answer step failed);
        ``supplementary``: the answer read original documents and documents a Retrieval added."""
        run = _Run({"question": question, "documents": list(passages)}, list(passages), options, lang)
        answer, log = None, []
        for i, step in enumerate(plan.steps):
            value = self._run_step(run, step, i, log)
            if step.call.function == "GenerateAnswer" and value is not None:
                answer = value
        if answer is None or plan.steps[-1].call.function != "GenerateAnswer":  # the fallback answer step
            answer = self._run_step(run, Step(call=GenerateAnswer()), len(plan.steps), log, True) or answer
        used, original = run.used or run.current, {p.id for p in passages}
        supplementary = any(p.id in original for p in used) and any(p.id not in original for p in used)
        return dspy.Prediction(answer=answer, passages=used, steps=log, queries=run.queries,
                               supplementary=supplementary)

    def _run_step(self, run: _Run, step: Step, i: int, log: list[dict], added: bool = False):
        """Run one step (``added``: not the planner's), log it, assign its output; its value, or None if it failed."""
        entry = {"step": i, "function": step.call.function, "output": step.output, "added": added}
        try:
            value = HANDLERS[step.call.function](self, run, step.call)
            entry |= {"ok": value is not None, "result": _preview(value)}
        except StepError as err:
            value, entry = None, entry | {"ok": False, "error": str(err)}
        if step.output and value is not None:
            run.state[step.output] = value
        log.append(entry)
        return value

    # --- argument resolution ---------------------------------------------------------------------------------

    @staticmethod
    def _lookup(run: _Run, ref: Ref):
        if ref.name not in run.state:  # the plan assigns it, but the step that does failed
            raise StepError(f"'{ref.name}' has no value: the step that assigns it failed")
        value = run.state[ref.name]
        if ref.index is None:
            return value
        if not isinstance(value, list) or not -len(value) <= ref.index < len(value):
            raise StepError(f"{ref.name}[{ref.index}] is out of range")
        item = value[ref.index]
        return [item] if isinstance(item, Passage) else item

    def _queries(self, run: _Run, value) -> list[str]:
        value = self._lookup(run, value) if isinstance(value, Ref) else value
        queries = [query_text(q) for q in (value if isinstance(value, list) else [value]) if isinstance(q, str)]
        queries = [q for q in queries if q]
        if not queries:
            raise StepError("empty query")
        return queries

    def _text(self, run: _Run, value) -> str:
        return self._queries(run, value)[0] if value != "" else ""

    # --- the five functions ----------------------------------------------------------------------------------

    def _retrieval(self, run: _Run, call) -> list[Passage]:
        queries = self._queries(run, call.query)[:MAX_QUERIES]
        run.queries += queries
        found = dedup([p for q in queries for p in self.search.search(q, call.topk)])
        known = {p.id for p in run.current}
        run.evidence += [p for p in found if p.id not in known]
        return found

    def _rewrite_query(self, run: _Run, call) -> list[str]:
        query = self._text(run, call.query)
        queries = self.rewrite_step({"query": query, "instruction": call.instruction}, run.current).value
        if queries is None:
            raise StepError("rewrite output not parsed")
        return queries or [query]

    def _decompose_query(self, run: _Run, call) -> list[str]:
        query = self._text(run, call.query)
        queries = self.decompose_step({"question": query}, run.current).value
        if queries is None:
            raise StepError("decomposition output not parsed")
        return queries or [query]

    def _refine_doc(self, run: _Run, call) -> str:
        docs = self._lookup(run, call.docs)
        if call.doc_index >= len(docs):
            raise StepError(f"no document {call.doc_index} in {call.docs.name} (it has {len(docs)})")
        target = docs[call.doc_index].id
        slot = next((i for i, p in enumerate(run.evidence) if p is not None and p.id == target), None)
        if slot is None:
            raise StepError(f"document {call.doc_index} of {call.docs.name} was deleted")
        doc = run.evidence[slot]
        if call.instruction == "delete":
            run.evidence[slot] = None
            return f"deleted {doc.title}"
        if self.reader.from_gold:  # refining serves only the writer; the perfect reader reads the document as is
            return doc.text
        out = lenient(self.refine, query=self._text(run, call.query), document=doc.format(self.max_chars),
                      instruction=REFINE_INSTRUCTIONS[call.instruction])
        if out is None or not out.rewritten.strip():
            raise StepError("refined document not parsed")
        run.evidence[slot] = dataclasses.replace(doc, text=out.rewritten.strip())
        return out.rewritten.strip()

    def _generate_answer(self, run: _Run, call) -> str:
        if call.docs is None:
            docs = run.current
        else:
            refs = call.docs if isinstance(call.docs, list) else [call.docs]
            current = {p.id: p for p in run.current}  # refined text in, deleted documents out
            docs = dedup([current[p.id] for r in refs for p in self._lookup(run, r) if p.id in current])
        question = self._text(run, call.query)
        run.used = docs = docs[:MAX_DOCS]
        out = lenient(self.writer, question=question, passages=docs, options=run.options, lang=run.lang,
                      instruction=self._text(run, call.additional_instruction) or None)
        if out is None:
            raise StepError("answer not parsed")
        return out.answer


#: The dispatch table: plan function name -> the method that runs it.
HANDLERS = {"Retrieval": PlanExecutor._retrieval, "RewriteQuery": PlanExecutor._rewrite_query,
            "DecomposeQuery": PlanExecutor._decompose_query, "RefineDoc": PlanExecutor._refine_doc,
            "GenerateAnswer": PlanExecutor._generate_answer}


def _lines(text: str) -> list[str]:
    """Non-empty lines of model output, without bullets or numbering."""
    return [line.strip().lstrip("-*•0123456789.) ").strip() for line in (text or "").splitlines()
            if line.strip().lstrip("-*•0123456789.) ").strip()]


def _preview(value) -> str | list | None:
    if isinstance(value, list):
        return [p.title if isinstance(p, Passage) else str(p)[:200] for p in value]
    return None if value is None else str(value)[:300]
