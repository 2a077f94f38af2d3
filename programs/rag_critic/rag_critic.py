"""RAG-Critic (Dong et al., 2025) as a DSPy program: generate -> critic -> plan -> execute (Algorithm 1).

The writer answers from the top-k passages (the paper's generator answers directly, as its Standard RAG does: by default
``rag``'s plain writer; ``cot=True``, the ``rag_critic_cot`` program, is ``rag_cot``'s chain of thought); the error
critic judges that answer without the gold answer and labels its errors with the three-tier taxonomy. Only an Error
verdict is corrected, as in the paper: a Correct one ends the round, and so does an unparsed one (counted in the trace
as ``unparsed_verdicts``). A verdict gate at rest (``--decisions logprob|fused``, fitted on dev) says Correct without a
call: the stop reason is ``critic_at_rest`` and RAG-Critic runs as its first draft, which is ``rag`` (``rag_cot`` with
``cot``; :meth:`RAGCritic.resting`). For an Error the planner reads the critique, the suggested actions for the flagged
tier-1 errors and the function menu, and writes a program of calls; it is parsed into a typed
:class:`programs.rag_critic.plan.Plan` (step cap ``max_steps``) and run by the dispatcher, whose GenerateAnswer is the
draft's own writer told the step's instruction (an instruction copied from the planner's form example is read as none,
counted as ``instructions_copied``; without an instruction the writer is asked as for the draft): draft and corrections
come from one writer, so ``rag_critic`` against ``rag`` measures the correction alone. An invalid plan falls back to one
GenerateAnswer on the current evidence, guided by the critique. ``rounds=2`` critiques and corrects the corrected answer
once more.

Oracle roles (``programs.shared.oracle``): ``verdict`` (the critic's verdict; an Error is labelled by the LM unless
``plan`` is set too), ``plan`` (the planner: a supplementary Retrieval of the oracle query while a gold passage is
missing from what is held, else regeneration; no call, no labels), ``query`` (the executor's RewriteQuery and
DecomposeQuery give the oracle query from the evidence held), ``writer`` (the draft and every GenerateAnswer are the
perfect reader's; RefineDoc, which only edits what the writer reads, keeps the document as it is). ``all``: no call.
"""
from __future__ import annotations

import dspy
from dspy.evaluate.metrics import normalize_text

from decoding.choice import MCScoring
from decoding.constrained import constrained_config
from decoding.decisions import REST, rest_note
from programs.rag_critic.error_critic import CORRECT, ERROR, ErrorCritic
from programs.shared.evidence import lenient
from programs.rag_critic.executor import PlanExecutor
from programs.shared.oracle import check_roles
from programs.rag_critic.plan import GenerateAnswer, Plan, PlanError, Ref, Step, grammar, oracle_plan, parse_plan
from programs.shared.steps import RoleStep
from programs.rag_critic.taxonomy import Taxonomy
from programs.shared.writer import Writer
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from signatures.planner import ERROR_ACTIONS, EXAMPLE_INSTRUCTION, FUNCTIONS, PLAN_EXAMPLE, PlanCorrection


STOPS = {CORRECT: "critic_correct", None: "critic_unparsed"}  # why a round ends without a correction


def fallback_plan(instruction: str) -> Plan:
    """One GenerateAnswer over the current evidence, told what the critic found."""
    return Plan(steps=[Step(output="answer", call=GenerateAnswer(docs=Ref(name="documents"),
                                                                  additional_instruction=instruction))])


def own_instructions(plan: Plan) -> tuple[Plan, int]:
    """``plan`` with each GenerateAnswer instruction that copies the form example's (by normalised text) emptied --
    the writer is then asked as for the draft -- and how many: a copy says nothing about this critique (the 0.5B
    copied an earlier example's "Name the person." into all its 76 plans on 2Wiki, and the writer, told to name a
    person, answered film questions with a director)."""
    copied = [i for i, s in enumerate(plan.steps) if isinstance(s.call, GenerateAnswer)
              and isinstance(s.call.additional_instruction, str)
              and normalize_text(s.call.additional_instruction) == normalize_text(EXAMPLE_INSTRUCTION)]
    steps = [s.model_copy(update={"call": s.call.model_copy(update={"additional_instruction": ""})})
             if i in copied else s for i, s in enumerate(plan.steps)]
    return plan.model_copy(update={"steps": steps}), len(copied)


def planned(plan: Plan) -> tuple[Plan, str, None, bool]:
    """An oracle plan as :meth:`RAGCritic.plan` gives a plan: with its text, valid, not cut to the step cap."""
    return plan, "\n".join(plan.lines()), None, False


class RAGCritic(dspy.Module):
    """Critic-guided correction of a single-shot RAG answer (``rounds`` critic/plan/execute rounds at most).

    Args:
        search: the retriever.
        k: passages per search.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        rounds: critic/plan/execute rounds at most.
        max_steps: the steps of a correction plan at most.
        taxonomy: the error critic's taxonomy (default: the bundled one).
        decisions: the decision mode of the critic's verdict (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
        cot: the chain-of-thought writer drafts and corrects (``rag_critic_cot``).
    """

    ROLES = {"critic": "critic", "planner": "planner"}
    ORACLE_ROLES = ("verdict", "plan", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 5, max_chars: int | None = None, rounds: int = 1,
                 max_steps: int = 5, taxonomy: Taxonomy | None = None, decisions: str = "generate", oracle: str = "",
                 mc: MCScoring | None = None, cot: bool = False):
        super().__init__()
        self.draft_program = "rag_cot" if cot else "rag"  # what RAG-Critic is without its correction
        if rounds < 1:
            raise ValueError(f"rag_critic needs rounds >= 1 (got {rounds}); rounds=0 is the plain "
                             f"`{self.draft_program}` program")
        self.search, self.k, self.max_chars, self.rounds, self.max_steps = search, k, max_chars, rounds, max_steps
        # one writer drafts and corrects (the critic reads its reasoning where it has a chain of thought)
        self.writer = Writer(use_passages=True, reasoning=cot, max_chars=max_chars, mc=mc)
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "rag_critic")
        self.critic = ErrorCritic(taxonomy=taxonomy, max_chars=max_chars, embedder=getattr(search, "embedder", None),
                                  mode=decisions, oracle=self.oracle & {"verdict", "plan"})
        self.planner = dspy.Predict(PlanCorrection)
        self.plan_step = RoleStep(self.planner, "plan", self.oracle, field="plan", demo=lambda plan: {"plan": plan[1]},
                                  given=lambda query: planned(oracle_plan(query, k)))
        self.executor = PlanExecutor(search, self.writer, max_chars, oracle=self.oracle & {"query", "writer"})

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        passages = self.search.search(question, self.k)
        draft = self.writer(question=question, passages=passages, options=options, lang=lang)     # generate
        answer, reasoning = draft.answer, draft.get("reasoning") or ""
        rounds, stop, queries = [], "round_budget", [question]
        for _ in range(self.rounds):
            critique = self.critic(question=question, passages=passages, prediction=answer,       # critic
                                   reasoning=reasoning)
            record = {"answer_in": answer, "passages_in": [p.id for p in passages], "critique": critique.as_dict()}
            rounds.append(record)
            if not critique.flagged:
                stop = "critic_at_rest" if critique.decided == REST else STOPS[critique.verdict]
                break
            plan, record["plan_text"], record["plan_error"], record["truncated"] = self.plan(
                question, passages, answer, critique)                                             # plan
            record["plan_valid"] = record["plan_error"] is None
            plan, record["instructions_copied"] = own_instructions(plan or fallback_plan(critique.analysis))
            record["plan"] = plan.lines()
            out = self.executor(plan=plan, question=question, passages=passages, options=options,  # execute
                                lang=lang)
            record["steps"], record["supplementary"] = out.steps, out.supplementary
            record["step_errors"] = sum(not s["ok"] for s in out.steps)
            queries += out.queries
            if out.answer:
                answer, passages, reasoning = out.answer, out.passages, ""
        last = rounds[-1]
        trace = {"iterations": len(rounds), "queries": queries, "stop_reason": stop, "rounds": rounds,
                 "flagged": rounds[0]["critique"]["verdict"] == ERROR,
                 "unparsed_verdicts": sum(r["critique"]["verdict"] is None for r in rounds),
                 "at_rest": sum(r["critique"]["decided"] == REST for r in rounds),
                 "plans": sum("plan_valid" in r for r in rounds),
                 "plans_valid": sum(r.get("plan_valid", False) for r in rounds),
                 "fallbacks": sum(r.get("plan_valid") is False for r in rounds),
                 "plans_supplementary": sum(r.get("supplementary", False) for r in rounds),
                 "plans_clean": sum(r.get("plan_valid", False) and r["step_errors"] == 0 for r in rounds),
                 "instructions_copied": sum(r.get("instructions_copied", 0) for r in rounds),
                 "labels_snapped": sum(r["critique"]["snapped"] for r in rounds),
                 "labels_dropped": sum(r["critique"]["dropped"] for r in rounds)}
        tags = {tier: last["critique"][tier] for tier in ("tier1", "tier2", "tier3")}
        return dspy.Prediction(answer=answer, passages=passages, trace=trace, critique=last["critique"], tags=tags,
                               plan=last.get("plan"), steps=last.get("steps", []))

    def resting(self) -> str | None:
        """What RAG-Critic runs as while its verdict gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest nothing is corrected."""
        return rest_note("verdict", self.critic.verdict_gate, self.draft_program)

    def plan_config(self) -> dict:
        """The planner's call decodes under the plan grammar where the endpoint takes one (llama.cpp)."""
        value, rules = grammar(self.max_steps)
        return constrained_config(self.planner, {"plan": value}, rules)

    def plan(self, question: str, passages: list[Passage], answer: str, critique
             ) -> tuple[Plan | None, str, str | None, bool]:
        """(plan or None, the planner's text, why it was rejected or None, whether it was cut to the step cap); the
        plan oracle's correction of the ``passages`` held."""
        flagged = critique.tier1 or list(ERROR_ACTIONS)
        inputs = {"question": question, "prediction": answer, "critique": critique.text(),
                  "passages": [f"[{i}] {p.format(self.max_chars)}" for i, p in enumerate(passages)],
                  "suggested_actions": [f"{t}: {ERROR_ACTIONS[t]}" for t in flagged if t in ERROR_ACTIONS],
                  "functions": FUNCTIONS, "example": PLAN_EXAMPLE}
        return self.plan_step(inputs, passages, ask=lambda: self.ask_plan(inputs)).value

    def ask_plan(self, inputs: dict) -> tuple[Plan | None, str, str | None, bool]:
        """The planner's plan, as :meth:`plan` returns it."""
        out = lenient(self.planner, **inputs, config=self.plan_config())
        if out is None:
            return None, "", "planner output not parsed", False
        try:
            plan, truncated = parse_plan(out.plan, self.max_steps)
            return plan, out.plan, None, truncated
        except PlanError as err:
            return None, out.plan, str(err), False
