"""Grammar-constrained closed-set outputs: the GBNF the embedded llama.cpp server gets, and no grammar elsewhere."""
import dspy
import pytest

from decoding.constrained import BOOL, FREE_LINE, chat_grammar, constrained_config, name_list, one_of
from signatures.critic import CheckSufficiency


def test_grammar_spells_the_chat_adapter_layout_with_only_allowed_values():
    g = chat_grammar([("corpora", name_list(["en", "ko"], 2)), ("query", FREE_LINE)])
    assert g.startswith('root ::= "[[ ## corpora ## ]]\\n" "[" ("\\"en\\"" | "\\"ko\\"")')
    assert g.count('("\\"en\\"" | "\\"ko\\"")') == 2 and g.endswith('"[[ ## completed ## ]]"')
    assert one_of(["0", "1"]) == '("0" | "1")'


def test_grammar_parses_in_llama_cpp():
    llama_cpp = pytest.importorskip("llama_cpp")
    for g in (chat_grammar([("corpora", name_list(["en", "ko", "zh"], 3)), ("query", FREE_LINE)]),
              chat_grammar([("enough", BOOL), ("reason", FREE_LINE)])):
        assert llama_cpp.LlamaGrammar.from_string(g, verbose=False) is not None


def test_no_grammar_for_endpoints_without_one(dummy):
    lm = dummy([{"enough": True, "reason": "x"}])
    predictor = dspy.Predict(CheckSufficiency)
    assert constrained_config(predictor, {"enough": BOOL}) == {}  # DummyLM / remote endpoint: the fallback path
    lm.server = object()
    config = constrained_config(predictor, {"enough": BOOL})
    assert '"[[ ## enough ## ]]\\n" ("True" | "False")' in config["extra_body"]["grammar"]
    assert '"[[ ## reason ## ]]\\n" [^\\n]{1,160}' in config["extra_body"]["grammar"]  # unnamed: one short line


def test_plan_grammar_parses_in_llama_cpp_and_tracks_assigned_names(dummy):
    from programs.rag_critic.plan import grammar
    from signatures.planner import PlanCorrection

    llama_cpp = pytest.importorskip("llama_cpp")
    lm = dummy([{"plan": "x"}])
    lm.server = object()  # an embedded-server LM: the planner call gets the plan grammar
    value, rules = grammar(3)
    g = constrained_config(dspy.Predict(PlanCorrection), {"plan": value}, rules)["extra_body"]["grammar"]
    assert '"[[ ## plan ## ]]\\n" plan-00-3 "\\n\\n"' in g
    assert llama_cpp.LlamaGrammar.from_string(g, verbose=False) is not None
    # before anything is assigned only the builtins can be referenced; after a Retrieval, `found` too
    assert 'plan-docs0 ::= "documents"\n' in g and 'plan-docs1 ::= "documents" | "found"' in g
    assert "plan-00-2 ::= plan-answer00 | plan-retrieval0 plan-01-1 | plan-queries0 plan-10-1" in g


def test_a_field_with_a_default_may_be_left_out_of_the_reply(dummy):
    """Issue 75 item 4: CORAL's re-planner may leave out ``dropped_because`` (the signature's default), under the
    grammar too; the other fields stay required."""
    from signatures.planner import ReplanSearch

    llama_cpp = pytest.importorskip("llama_cpp")
    lm = dummy([{"corpora": ["en"], "query": "q"}])
    lm.server = object()
    g = constrained_config(dspy.Predict(ReplanSearch), {"corpora": name_list(["en", "ko"], 2)})["extra_body"]["grammar"]
    assert '("[[ ## dropped_because ## ]]\\n" [^\\n]{1,160} "\\n\\n")? "[[ ## query ## ]]\\n"' in g
    assert g.startswith('root ::= "[[ ## corpora ## ]]\\n"')
    assert llama_cpp.LlamaGrammar.from_string(g, verbose=False) is not None
