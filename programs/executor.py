"""Dispatcher for RAG-Critic plans: runs validated :class:`programs.plan.Plan` steps in order with the writer
model (the paper's executor), never ``exec``/``eval``.

State: ``question``, ``documents`` (the retrieved passages) and each step's named output; the *evidence* list
(the documents, indexed from 0 as the planner saw them) grows with Retrieval and is edited by RefineDoc. A step
whose LM output cannot be parsed, or whose ``doc_index`` is out of range, is logged as failed and leaves the
state unchanged. If the plan does not end with GenerateAnswer, one on the current evidence is added.
"""
from __future__ import annotations

import dataclasses

import dspy

from programs.evidence import lenient
from programs.plan import GenerateAnswer, Plan, Ref, Step
from programs.retrieval import Passage, Retriever, dedup
from programs.writer import Writer
from signatures.revise import (REFINE_INSTRUCTIONS, AnswerWithInstruction, DecomposeQuestion, RefineDocument,
                               RewriteForSearch)

MAX_QUERIES = 3  # queries searched when Retrieval gets a list of them


class StepError(Exception):
    """A step that could not run (reason in the message)."""


class PlanExecutor(dspy.Module):
    def __init__(self, search: Retriever, max_chars: int = 600):
        super().__init__()
        self.search, self.max_chars = search, max_chars
        self.rewrite = dspy.Predict(RewriteForSearch)
        self.decompose = dspy.Predict(DecomposeQuestion)
        self.refine = dspy.Predict(RefineDocument)
        self.generate = dspy.Predict(AnswerWithInstruction)
        self.choice = Writer(use_passages=True, max_chars=max_chars)  # multiple choice: the shared letter writer
        self.handlers = {"Retrieval": self._retrieval, "RewriteQuery": self._rewrite_query,
                         "DecomposeQuery": self._decompose_query, "RefineDoc": self._refine_doc,
                         "GenerateAnswer": self._generate_answer}

    def forward(self, plan: Plan, question: str, passages: list[Passage],
                options: dict[str, str] | None = None) -> dspy.Prediction:
        """Run ``plan``; the answer is the last GenerateAnswer's (None if every answer step failed)."""
        self._state = {"question": question, "documents": list(passages)}
        self._evidence: list[Passage | None] = list(passages)  # None marks a deleted document
        self._options, self._used, answer, log = options, None, None, []
        steps = list(plan.steps)
        if steps[-1].call.function != "GenerateAnswer":
            steps.append(Step(call=GenerateAnswer()))
        for i, step in enumerate(steps):
            entry = {"step": i, "function": step.call.function, "output": step.output,
                     "added": i >= len(plan.steps)}
            try:
                value = self.handlers[step.call.function](step.call)
                entry |= {"ok": value is not None, "result": _preview(value)}
            except StepError as err:
                value, entry = None, entry | {"ok": False, "error": str(err)}
            if step.output and value is not None:
                self._state[step.output] = value
            if step.call.function == "GenerateAnswer" and value is not None:
                answer = value
            log.append(entry)
        return dspy.Prediction(answer=answer, passages=self._used or self.evidence, steps=log)

    @property
    def evidence(self) -> list[Passage]:
        return [p for p in self._evidence if p is not None]

    # --- argument resolution ---------------------------------------------------------------------------------

    def _lookup(self, ref: Ref):
        value = self._state[ref.name]  # the plan validator guarantees the name was assigned before
        if ref.index is None:
            return value
        if not isinstance(value, list) or not -len(value) <= ref.index < len(value):
            raise StepError(f"{ref.name}[{ref.index}] is out of range")
        item = value[ref.index]
        return [item] if isinstance(item, Passage) else item

    def _queries(self, value) -> list[str]:
        value = self._lookup(value) if isinstance(value, Ref) else value
        queries = [q for q in (value if isinstance(value, list) else [value]) if isinstance(q, str) and q.strip()]
        if not queries:
            raise StepError("empty query")
        return queries

    def _text(self, value) -> str:
        return self._queries(value)[0] if value != "" else ""

    # --- the five functions ----------------------------------------------------------------------------------

    def _retrieval(self, call) -> list[Passage]:
        found = dedup([p for q in self._queries(call.query)[:MAX_QUERIES] for p in self.search.search(q, call.topk)])
        known = {p.id for p in self._evidence if p is not None}
        self._evidence += [p for p in found if p.id not in known]
        return found

    def _rewrite_query(self, call) -> list[str]:
        query = self._text(call.query)
        out = lenient(self.rewrite, query=query, instruction=call.instruction)
        if out is None:
            raise StepError("rewrite output not parsed")
        return _lines(out.queries)[:MAX_QUERIES] or [query]

    def _decompose_query(self, call) -> list[str]:
        query = self._text(call.query)
        out = lenient(self.decompose, question=query)
        if out is None:
            raise StepError("decomposition output not parsed")
        return _lines(out.sub_questions)[:4] or [query]

    def _refine_doc(self, call) -> str:
        if call.doc_index >= len(self._evidence) or self._evidence[call.doc_index] is None:
            raise StepError(f"no document {call.doc_index} (evidence has {len(self._evidence)})")
        doc = self._evidence[call.doc_index]
        if call.instruction == "delete":
            self._evidence[call.doc_index] = None
            return f"deleted {doc.title}"
        out = lenient(self.refine, query=self._text(call.query), document=doc.format(self.max_chars),
                      instruction=REFINE_INSTRUCTIONS[call.instruction])
        if out is None or not out.rewritten.strip():
            raise StepError("refined document not parsed")
        self._evidence[call.doc_index] = dataclasses.replace(doc, text=out.rewritten.strip())
        return out.rewritten.strip()

    def _generate_answer(self, call) -> str:
        if call.docs is None:
            docs = self.evidence
        else:
            refs = call.docs if isinstance(call.docs, list) else [call.docs]
            current = {p.id: p for p in self.evidence}  # refined text in, deleted documents out
            docs = dedup([current[p.id] for r in refs for p in self._lookup(r) if p.id in current])
        question = self._text(call.query)
        self._used = docs
        if self._options:
            return self.choice(question=question, passages=docs, options=self._options).answer
        out = lenient(self.generate, passages=[p.format(self.max_chars) for p in docs], question=question,
                      instruction=self._text(call.additional_instruction))
        if out is None:
            raise StepError("answer not parsed")
        return out.answer.strip()


def _lines(text: str) -> list[str]:
    """Non-empty lines of model output, without bullets or numbering."""
    return [line.strip().lstrip("-*•0123456789.) ").strip() for line in (text or "").splitlines()
            if line.strip().lstrip("-*•0123456789.) ").strip()]


def _preview(value) -> str | list | None:
    if isinstance(value, list):
        return [p.title if isinstance(p, Passage) else str(p)[:200] for p in value]
    return None if value is None else str(value)[:300]
