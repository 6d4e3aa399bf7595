"""The serving graph's encoder, kept once exported (redkit/bundle/encoder_cache.py): an entry that does not load is
removed and the encoder exported again; the key is of the encoder and the exporter; the cache keeps the most recently
used within its limits, and nothing with REDKIT_CACHE=off. (A second export reading the encoder back and writing the
same graph byte for byte: tests/test_bundle.py.)"""

import os
import time

import pytest

from redkit.bundle import encoder_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(encoder_cache.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / encoder_cache.FOLDER


def test_an_entry_that_does_not_load_is_removed_and_the_encoder_exported_again(cache, monkeypatch):
    pytest.importorskip("onnx_ir")
    import onnx_ir

    from redkit.bundle import graph

    class Features:  # what _encoder reads of ServingFeatures
        pretrained = None

        def identity(self) -> dict:
            return {"encoder": "Backbone", "fingerprint": "0" * 16, "pretrained": None}

    key = encoder_cache.encoder_key(Features().identity(), graph.OPSET)
    cache.mkdir(parents=True)
    (cache / f"{key}.onnx").write_bytes(b"cut sh")
    exported = onnx_ir.Model(onnx_ir.Graph([], [], nodes=[], name="stand-in"), ir_version=10)
    monkeypatch.setattr(graph, "_export", lambda *args: exported)
    model, reused = graph._encoder(Features(), {"input_ids": None, "attention_mask": None})
    assert model is exported and reused is False
    assert onnx_ir.load(cache / f"{key}.onnx").graph.name == "stand-in"  # the fresh export kept in its place


def test_the_key_is_of_the_encoder_and_the_opset():
    identity = {"encoder": "Backbone", "fingerprint": "a" * 16, "pretrained": None}
    key = encoder_cache.encoder_key(identity, 20)
    assert key == encoder_cache.encoder_key(dict(identity), 20)
    assert key != encoder_cache.encoder_key(identity | {"fingerprint": "b" * 16}, 20)
    assert key != encoder_cache.encoder_key(identity | {"pretrained": "c" * 16}, 20)
    assert key != encoder_cache.encoder_key(identity, 21)


def test_the_least_recently_used_go_first_and_off_keeps_nothing(cache, monkeypatch):
    monkeypatch.setattr(encoder_cache, "MAX_ENTRIES", 2)
    for age, key in ((100, "a"), (50, "b")):
        assert encoder_cache.keep(key, lambda path: path.write_bytes(b"x" * 10)) == cache / f"{key}.onnx"
        os.utime(cache / f"{key}.onnx", (time.time() - age, time.time() - age))  # used that long ago
    assert encoder_cache.cached("a") == cache / "a.onnx"  # used again: the most recent now
    encoder_cache.keep("c", lambda path: path.write_bytes(b"x" * 10))
    assert sorted(p.name for p in cache.glob("*.onnx")) == ["a.onnx", "c.onnx"]  # b the least recently used
    monkeypatch.setattr(encoder_cache, "MAX_BYTES", 15)
    assert encoder_cache.keep("d", lambda path: path.write_bytes(b"x" * 20)) is None  # larger than the cache
    assert not (cache / "d.onnx").exists() and encoder_cache.cached("d") is None
    monkeypatch.setenv(encoder_cache.ENV, "off")
    assert encoder_cache.cache_dir() is None and encoder_cache.keep("e", lambda path: path.write_bytes(b"x")) is None
    assert encoder_cache.cached("a") is None
