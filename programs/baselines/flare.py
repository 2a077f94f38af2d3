"""FLARE-direct (Jiang et al., 2023, "Active Retrieval Augmented Generation"), a baseline of RAG-Critic.

Retrieve the top ``k`` for the question (the paper's first retrieval, for the input). Then reason towards the answer
one sentence at a time: each step writes a look-ahead sentence from the passages held and the sentences so far,
reading each token's probability from the endpoint's logprobs. If any token of it has probability below ``theta``,
search with the sentence, its tokens below ``beta`` masked out (the question when no content word is left), let the
top ``k`` replace the passages held, and write the sentence again from them; else the look-ahead sentence stands.
Stop when a sentence states the answer ("So the answer is ...") or after ``loops`` sentences. The shared
chain-of-thought writer (the one RAG-Critic drafts with) answers from everything FLARE retrieved, the passages it
held last first, cut to ``context_tokens`` (IRCoT's reader rule, ``programs.baselines.iterative.reader_context``).

The trigger is read from token probabilities whatever ``--decisions`` says: FLARE has no written form, so an endpoint
that returns no token logprobs stops the run with one line naming the fix.

Oracle roles: IRCoT's (``programs.baselines.iterative``): under ``controller`` the step that states the answer comes
once every gold passage has been retrieved; under ``query`` each look-ahead is unsure and searches the oracle query
from what was retrieved, which stands as the sentence (no rewrite); ``writer``: the perfect reader. ``all``: no call.
"""
from __future__ import annotations

import dspy

from decoding.choice import MCScoring
from decoding.tokens import field_tokens, spelling
from programs.baselines.iterative import ANSWERED, STEP_ROLES, OracleThought, first_sentence, reader_context
from programs.shared.evidence import lenient
from programs.shared.oracle import check_roles
from programs.shared.text import content_words
from programs.shared.writer import Writer
from retrieval.corpus import Passage, dedup
from retrieval.retriever import Retriever
from signatures.reasoning import NextThought

#: The look-ahead call: its tokens' logprobs (llama.cpp returns them only with ``top_logprobs`` set).
LOOK_AHEAD = {"logprobs": True, "top_logprobs": 1}
NO_LOGPROBS = ("flare decides when to search from the probabilities of the tokens it writes, and {model} returned no "
               "token logprobs: run it on an endpoint that returns them (the embedded local: server does)")


def masked(tokens: list[tuple[str, float]], beta: float) -> str:
    """The sentence spelled by ``tokens`` with every token of probability below ``beta`` left out (FLARE's masked
    query: what the model is unsure of is not searched for)."""
    return " ".join("".join(token if prob >= beta else " " for token, prob in tokens).split())


class FLARE(dspy.Module):
    """Forward-looking active retrieval: search when a look-ahead sentence holds a token below ``theta``, with the
    sentence's tokens at or above ``beta``; at most ``loops`` sentences. ``lang`` goes to the writer.

    Args:
        search: the retriever.
        k: passages per search.
        loops: look-ahead sentences at most.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        theta: a look-ahead sentence holding a token below this probability searches.
        beta: the search query keeps the sentence's tokens at or above this probability.
        context_tokens: estimated tokens of passage text the writer sees (:func:`reader_context`).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ORACLE_ROLES = STEP_ROLES

    def __init__(self, search: Retriever, *, k: int = 5, loops: int = 5, max_chars: int | None = None,
                 theta: float = 0.8, beta: float = 0.4, context_tokens: int = 3000, oracle: str = "",
                 mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "flare")
        if not 0 <= beta <= theta <= 1:
            raise ValueError(f"flare needs 0 <= beta <= theta <= 1 (got beta={beta}, theta={theta}): a masked token "
                             "must be a low-probability one")
        self.search, self.k, self.loops, self.max_chars = search, k, loops, max_chars
        self.theta, self.beta, self.context_tokens = theta, beta, context_tokens
        self.step = dspy.Predict(NextThought)
        self.oracle_thought = OracleThought(self.oracle)
        self.writer = Writer(use_passages=True, reasoning=True, max_chars=max_chars, mc=mc)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        held = self.search.search(question, self.k)
        retrieved, queries, sentences, steps = list(held), [question], [], []
        stop, fallbacks = "sentence_budget", 0
        for _ in range(self.loops):
            if (sentence := self.oracle_thought(retrieved)) is not None:  # no call
                if not ANSWERED.search(sentence):
                    held = self.search.search(sentence, self.k)
                    retrieved = dedup([*retrieved, *held])
                    queries.append(sentence)
                sentences.append(sentence)
                steps.append({"oracle": sentence})
                if ANSWERED.search(sentence):
                    stop = "answered"
                    break
                continue
            sentence, tokens = self.look_ahead(question, held, sentences)
            if not content_words(sentence):
                stop = "unusable_sentence"
                break
            low = [token for token, prob in tokens if prob < self.theta]
            step = {"look_ahead": sentence, "min_prob": min((p for _, p in tokens), default=None), "low": low}
            if low:                                                     # unsure: search, then write it again
                query = masked(tokens, self.beta)
                step["query_from"] = "sentence" if content_words(query) else "question"
                query = query if content_words(query) else question
                held = self.search.search(query, self.k)
                retrieved, step["query"] = dedup([*retrieved, *held]), query
                queries.append(query)
                again = self.next_sentence(question, held, sentences)[0]
                fallbacks += not content_words(again)
                sentence = again if content_words(again) else sentence
                step["sentence"] = sentence
            sentences.append(sentence)
            steps.append(step)
            if ANSWERED.search(sentence):
                stop = "answered"
                break
        shown = reader_context(held, retrieved, self.context_tokens, self.max_chars)
        answer = self.writer(question=question, passages=shown, options=options, lang=lang).answer
        trace = {"iterations": len(sentences), "queries": queries, "stop_reason": stop, "retrievals": len(queries) - 1,
                 "sentences": sentences, "steps": steps, "fallbacks": fallbacks,
                 "context_tokens": self.context_tokens, "context_size": len(retrieved), "shown": len(shown)}
        return dspy.Prediction(answer=answer, passages=shown, retrieved=retrieved, trace=trace)

    def next_sentence(self, question: str, held: list[Passage], sentences: list[str],
              config: dict | None = None) -> tuple[str, dspy.Prediction | None]:
        """The next sentence from the passages held ('' when the reply is unreadable), and the reply."""
        out = lenient(self.step, passages=[p.format(self.max_chars) for p in held], question=question,
                      thoughts=" ".join(sentences), config=config or {})
        return (first_sentence(out.next_sentence) if out is not None else ""), out

    def look_ahead(self, question: str, held: list[Passage],
                   sentences: list[str]) -> tuple[str, list[tuple[str, float]]]:
        """The next sentence and the probability of each of its tokens; a reply without logprobs is refused."""
        sentence, out = self.next_sentence(question, held, sentences, LOOK_AHEAD)
        if out is None:
            return "", []
        tokens = field_tokens(out.get("logprobs"), "next_sentence")
        if tokens is None:
            lm = self.step.lm or dspy.settings.lm
            raise ValueError(NO_LOGPROBS.format(model=getattr(lm, "model", lm)))
        return sentence, spelling(tokens, sentence)
