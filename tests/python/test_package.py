"""The Python package (python/, pip install ./python) against attnlab-cli and transformers.

Run by tests/python/run.sh in a fresh venv the package was just installed into. The environment
names the rest: ATTNLAB_CLI and ATTNLAB_APP (the build's executables), ATTNLAB_MINILM_DIR
(all-MiniLM-L6-v2, an unmodified Hugging Face folder)."""

import csv
import json
import os
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import attnlab

CLI = os.environ["ATTNLAB_CLI"]
MINILM = os.environ["ATTNLAB_MINILM_DIR"]
TEXT = "The cat sat on the mat because it was warm."
# float32's unit roundoff: the pass and the CLI run the same ops on the same input, so their
# probabilities (at most 1) agree to a few roundings; the CLI recomputes each layer's probabilities
# from the queries and keys its pass kept, in the op the pass runs.
EPS = float(np.finfo(np.float32).eps)


def cli(*args, cwd=None):
    done = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_forward(tmp_path, model_args, text):
    out = cli("forward", *model_args, "--text", text, "--json", "--attn-out", str(tmp_path / "a.npy"), "--out",
              str(tmp_path / "h.npy"))
    return json.loads(out), np.load(tmp_path / "a.npy"), np.load(tmp_path / "h.npy")


@pytest.mark.parametrize("folder", ["default", "minilm"])
def test_forward_equals_the_cli(tmp_path, folder):
    model = attnlab.Model() if folder == "default" else attnlab.Model(MINILM)
    text = "the movie was not good at all" if folder == "default" else TEXT
    j, attn, hidden = cli_forward(tmp_path, [] if folder == "default" else ["--model", MINILM], text)
    for on_demand in (False, True):
        r = model.forward(text, on_demand=on_demand)
        assert r.tokens == j["labels"]
        assert r.pieces == j["tokens"]
        assert r.ids.tolist() == j["ids"]
        assert r.attentions.shape == tuple(j["attention_shape"])
        np.testing.assert_allclose(r.attentions, attn, rtol=0, atol=4 * EPS)
        for layer in range(model.num_layers):  # one layer, as the engine holds it
            np.testing.assert_array_equal(r.attention(layer), r.attentions[layer])
        # hidden states: the same ops in the same order; a value of size s is exact to s * eps
        np.testing.assert_allclose(r.hidden, hidden, rtol=0, atol=4 * EPS * float(np.abs(hidden).max()))
        np.testing.assert_allclose(r.logits, np.asarray(j["logits"], dtype=np.float32), rtol=0,
                                   atol=8 * EPS * max(1.0, float(np.abs(r.logits).max())) if r.logits.size else 0)
        assert not r.attentions.flags.writeable  # the engine's values: a copy to write


def test_arrays_are_views_not_copies():
    r = attnlab.Model(MINILM).forward(TEXT)
    a = r.attention(3)
    assert a.base is not None and not a.flags.owndata  # the engine's own tensor
    h = r.hidden
    assert not h.flags.owndata
    del r  # the arrays keep the result alive
    assert np.isfinite(a).all() and np.isfinite(h).all()
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=a.shape[-1] * EPS)


def test_hooks_cache_and_patch():
    m = attnlab.Model(MINILM)
    r = m.forward(TEXT, cache=["blocks.1.attn.hook_pattern", "blocks.2.hook_resid_pre"])
    np.testing.assert_array_equal(r.cache["blocks.1.attn.hook_pattern"], r.attention(1))
    assert r.cache["blocks.2.hook_resid_pre"].shape == (len(r.tokens), m.dim)
    # patching a layer's input with its own value changes nothing; zeroing it changes the output
    same = m.forward(TEXT, patch={"blocks.2.hook_resid_pre": r.cache["blocks.2.hook_resid_pre"]})
    np.testing.assert_allclose(same.hidden, r.hidden, rtol=0, atol=1e-5)
    zeroed = m.forward(TEXT, patch={"blocks.2.hook_resid_pre": np.zeros_like(r.cache["blocks.2.hook_resid_pre"])})
    assert np.abs(zeroed.hidden - r.hidden).max() > 0.1
    with pytest.raises(attnlab.Error, match="hook_names"):
        m.forward(TEXT, cache=["blocks.99.nothing"])
    # TransformerLens's run_with_cache and run_with_hooks, by their attnlab names
    patterns = m.cache(TEXT, "blocks.*.attn.hook_pattern")
    assert sorted(patterns) == [f"blocks.{l}.attn.hook_pattern" for l in range(m.num_layers)]
    np.testing.assert_array_equal(patterns["blocks.1.attn.hook_pattern"], r.attention(1))
    np.testing.assert_array_equal(m.patch(TEXT, {"blocks.2.hook_resid_pre": np.zeros((len(r.tokens), m.dim))}).hidden,
                                  zeroed.hidden)


def test_errors_are_the_engines():
    with pytest.raises(attnlab.Error, match="no such model folder"):
        attnlab.Model("/nonexistent/folder")
    m = attnlab.Model(MINILM)
    with pytest.raises(attnlab.Error, match="no tokens"):
        m.forward("")
    with pytest.raises(attnlab.Error, match="needs text"):
        m.forward()
    with pytest.raises(attnlab.Error, match="max_len|512|tokens"):
        m.forward("word " * 600)
    with pytest.raises(attnlab.Error):
        attnlab.Model(MINILM, backend="tpu")
    with pytest.raises(IndexError):
        m.forward(TEXT).attention(6)


def transformers_attention():
    torch = pytest.importorskip("torch")  # Debian's python3-torch, always there in the suite's venv
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    model = transformers.AutoModel.from_pretrained(MINILM, attn_implementation="eager")
    enc = tok(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    return out.attentions, tok.convert_ids_to_tokens(enc["input_ids"][0])


def test_transformers_attentions_give_the_clis_figure(tmp_path):
    attentions, tokens = transformers_attention()
    # the figure from outputs.attentions as they are (a tuple of [1, heads, T, T] tensors)
    fig = attnlab.figure(attentions, tokens, layer=2, path=tmp_path / "python.png")
    assert fig.data[:8] == b"\x89PNG\r\n\x1a\n" and fig._repr_png_() == fig.data
    # the same attention written by hand as the docs say, exported by attnlab-cli
    stacked = np.stack([a[0].numpy() for a in attentions])
    np.savez(tmp_path / "by_hand.npz", attentions=stacked, tokens=np.array(tokens))
    cli("export", "--attention", str(tmp_path / "by_hand.npz"), "--layer", "2", "--out", str(tmp_path / "cli.png"))
    assert (tmp_path / "cli.png").read_bytes() == fig.data
    # and transformers' probabilities are attnlab's engine's (both float32; 12 heads of 384 / 12
    # dims through 3 layers: agreement to 1e-4 as tests/crosscheck/hf_crosscheck.py finds)
    r = attnlab.Model(MINILM).forward(TEXT)
    assert r.tokens == tokens
    np.testing.assert_allclose(r.attentions, stacked, rtol=0, atol=1e-4)


def test_as_attention_takes_what_people_have():
    attentions, tokens = transformers_attention()
    import torch

    stacked = np.stack([a[0].numpy() for a in attentions])
    np.testing.assert_array_equal(attnlab.as_attention(attentions), stacked)
    np.testing.assert_array_equal(attnlab.as_attention(torch.stack(attentions)), stacked)  # [L, 1, H, T, T]
    np.testing.assert_array_equal(attnlab.as_attention(stacked[3]), stacked[3:4])  # one layer
    # a TransformerLens ActivationCache: a mapping of hook names, [batch, heads, T, T] each
    cache = {f"blocks.{l}.attn.hook_pattern": torch.cat([a, a.flip(-1)]) for l, a in enumerate(attentions)}
    cache["blocks.0.hook_resid_pre"] = torch.zeros(2, len(tokens), 384)
    np.testing.assert_array_equal(attnlab.as_attention(cache, batch=0), stacked)
    np.testing.assert_array_equal(attnlab.as_attention(cache, batch=1), stacked[..., ::-1])
    with pytest.raises(ValueError, match="batch of 2"):
        attnlab.as_attention(cache)
    with pytest.raises(ValueError, match="blocks.1.attn.hook_pattern"):
        attnlab.as_attention({k: v for k, v in cache.items() if not k.startswith("blocks.1.")})
    with pytest.raises(ValueError, match="output_attentions"):
        attnlab.as_attention([np.zeros((4, 4))])


def test_a_transformerlens_cache_file_opens(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    attentions, tokens = transformers_attention()
    stacked = np.stack([a[0].numpy() for a in attentions])
    # cache.save-style safetensors: blocks.{l}.attn.hook_pattern [batch, heads, T, T], tokens in the metadata
    tensors = {f"blocks.{l}.attn.hook_pattern": np.stack([stacked[l] * 0 + 1 / len(tokens), stacked[l]])
               for l in range(len(stacked))}
    path = tmp_path / "tl_cache.safetensors"
    safetensors_numpy.save_file(tensors, str(path), metadata={"tokens": json.dumps(tokens)})
    f = attnlab.load_attention(str(path), batch=1)
    assert f["tokens"] == tokens and len(f["layers"]) == len(stacked)
    np.testing.assert_array_equal(np.stack(f["layers"]), stacked)
    np.testing.assert_array_equal(attnlab.as_attention({k: v for k, v in tensors.items()}, batch=1), stacked)


def test_bad_attention_is_refused_with_the_documented_errors(tmp_path):
    a = np.full((2, 3, 4, 4), 0.25, dtype=np.float32)
    a[1, 2, 0, 0] = np.nan
    with pytest.raises(attnlab.Error, match="NaN"):
        attnlab.save_attention(tmp_path / "nan.npz", a, list("abcd"))
    with pytest.raises(attnlab.Error, match="token"):
        attnlab.save_attention(tmp_path / "count.npz", np.full((2, 3, 4, 4), 0.25), list("abc"))
    with pytest.raises(ValueError, match="shape"):
        attnlab.as_attention(np.zeros((2, 2)))
    with pytest.raises(attnlab.Error):
        attnlab.load_attention(str(tmp_path / "missing.npz"))
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(attnlab.Error):
        attnlab.load_attention(str(tmp_path / "junk.npz"))
    with pytest.raises(ValueError, match="Attention has 4 positions, while number of tokens is 3"):
        attnlab.head_view(np.full((1, 2, 4, 4), 0.25), list("abc"), html_action="return")


def test_saved_attention_reexported_as_csv_gives_back_the_numbers(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.random((3, 2, 5, 5)).astype(np.float32)
    a /= a.sum(-1, keepdims=True)
    tokens = ["[CLS]", "héllo", "wörld", "你好", "[SEP]"]
    attnlab.save_attention(tmp_path / "a.npz", a, tokens)
    cli("export", "--attention", str(tmp_path / "a.npz"), "--layer", "all", "--head", "all", "--out",
        str(tmp_path / "a.csv"))
    back = np.full_like(a, -1)
    with open(tmp_path / "a.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            l, h, q, k = (int(row[c]) for c in ("layer", "head", "query_index", "key_index"))
            back[l, h, q, k] = np.float32(row["probability"])
            assert row["query_token"] == tokens[q] and row["key_token"] == tokens[k]
    np.testing.assert_array_equal(back, a)  # written shortest-round-trip: the same float32s


def test_head_view_keeps_bertviz_checks_and_returns_the_figure():
    attentions, tokens = transformers_attention()
    with pytest.raises(ValueError, match="tokens' is required"):
        attnlab.head_view(attentions)
    with pytest.raises(ValueError, match="not in include_layers"):
        attnlab.head_view(attentions, tokens, layer=1, include_layers=[2, 3], html_action="return")
    fig = attnlab.head_view(attentions, tokens, layer=3, include_layers=[2, 3], html_action="return")
    expect = attnlab.figure(attentions, tokens, layer=3)
    assert fig.data == expect.data  # layers keep their numbers
    with pytest.raises(ValueError, match="html_action"):
        attnlab.head_view(attentions, tokens, html_action="print")


def test_show_opens_the_app_on_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no open window of the user's is reached
    attentions, tokens = transformers_attention()
    shot = tmp_path / "shown.png"
    path = attnlab.show(attentions, tokens, layer=2,
                        app_args=["--no-settings", "--size", "1280x720", "--screenshot", str(shot)])
    deadline = time.time() + 120
    while not shot.exists() and time.time() < deadline:  # written whole (QSaveFile) or not yet
        time.sleep(0.2)
    assert shot.exists(), "the app wrote no screenshot"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(np.stack(attnlab.load_attention(path)["layers"]),
                                  np.stack([a[0].numpy() for a in attentions]))


def test_later_calls_reuse_the_open_window(tmp_path, monkeypatch):
    app = os.environ["ATTNLAB_APP"]
    # a runtime folder of this test's own: the socket is $XDG_RUNTIME_DIR/attnlab-attention, so
    # neither a user's open window nor another run's is reached
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    a = np.full((2, 3, 4, 4), 0.25, dtype=np.float32)
    first = attnlab.save_attention(tmp_path / "first.npz", a, list("abcd"))
    second = attnlab.save_attention(tmp_path / "second.npz", np.full((3, 2, 5, 5), 0.2, dtype=np.float32),
                                    list("vwxyz"))
    window = subprocess.Popen([app, "--no-settings", "--attention", first, "--reuse-window"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, listening = time.time() + 60, False
        while not listening and time.time() < deadline and window.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(run / "attnlab-attention"))
                listening = True
            except OSError:
                time.sleep(0.2)
        assert listening and window.poll() is None, "the first window does not listen"
        done = subprocess.run([app, "--attention", second, "--reuse-window", "--layer", "2"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and f"opened {second}" in done.stdout, done.stderr
        assert window.poll() is None  # the first window is still the one open
        bad = subprocess.run([app, "--attention", str(tmp_path / "missing.npz"), "--reuse-window"],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "Could not open the attention file" in bad.stderr
        assert window.poll() is None  # a bad file leaves the window as it was
        # attnlab.show hands its file over the same way: the window has read it, the file is gone
        shown = attnlab.show(np.full((1, 2, 3, 3), 1 / 3, dtype=np.float32), list("xyz"))
        assert not os.path.exists(shown)
        assert window.poll() is None
        # a second window does not take the first one's socket
        other = subprocess.run([app, "--no-settings", "--attention", first, "--screenshot", str(tmp_path / "o.png")],
                               capture_output=True, text=True, timeout=120)
        assert other.returncode == 0
        again = subprocess.run([app, "--attention", second, "--reuse-window"], capture_output=True, text=True,
                               timeout=120)
        assert again.returncode == 0 and "opened" in again.stdout
    finally:
        window.kill()
        window.wait()


def test_show_reports_an_app_that_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_APP", "/bin/false")
    with pytest.raises(attnlab.Error, match="exited with 1"):
        attnlab.show(np.full((1, 1, 2, 2), 0.5, dtype=np.float32), ["a", "b"])
    monkeypatch.setenv("ATTNLAB_APP", str(tmp_path / "nothing-here"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises((attnlab.Error, OSError)):
        attnlab.show(np.full((1, 1, 2, 2), 0.5, dtype=np.float32), ["a", "b"])


def test_calls_on_one_model_from_threads_take_turns():
    import concurrent.futures

    m = attnlab.Model(MINILM)
    texts = [("word " * n).strip() for n in (3, 17, 40, 9, 64, 1)] * 3
    alone = [m.forward(t).attentions for t in texts]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # different shapes at once on one backend
        together = list(pool.map(lambda t: m.forward(t).attentions, texts))
    for x, y in zip(alone, together):
        np.testing.assert_array_equal(x, y)


def test_layer_and_head_indices_as_python_counts_them(tmp_path):
    a = np.random.default_rng(3).random((3, 2, 4, 4)).astype(np.float32)
    a /= a.sum(-1, keepdims=True)
    tokens = list("abcd")
    assert attnlab.figure(a, tokens, layer=-1, heads=-2).data == attnlab.figure(a, tokens, layer=2, heads=0).data
    with pytest.raises(ValueError, match="layer 3"):
        attnlab.figure(a, tokens, layer=3)
    with pytest.raises(ValueError, match="no batch axis"):
        attnlab.as_attention(a, batch=1)


def test_a_pass_exported_as_an_attention_file_is_the_pass(tmp_path):
    # attnlab-cli export --out F.npz: the attention file format, read by load_attention and numpy
    cli("export", "--model", MINILM, "--text", TEXT, "--layer", "all", "--head", "all", "--out",
        str(tmp_path / "pass.npz"))
    r = attnlab.Model(MINILM).forward(TEXT)
    f = attnlab.load_attention(str(tmp_path / "pass.npz"))
    assert f["tokens"] == r.tokens and f["warnings"] == []
    np.testing.assert_allclose(np.stack(f["layers"]), r.attentions, rtol=0, atol=4 * EPS)
    with np.load(tmp_path / "pass.npz") as z:  # numpy reads it as np.savez wrote it
        assert z["attentions"].shape == r.attentions.shape and list(z["tokens"]) == r.tokens
    # and its figure is the pass's figure
    cli("export", "--attention", str(tmp_path / "pass.npz"), "--layer", "1", "--out", str(tmp_path / "file.png"))
    cli("export", "--model", MINILM, "--text", TEXT, "--layer", "1", "--out", str(tmp_path / "model.png"))
    assert (tmp_path / "file.png").read_bytes() == (tmp_path / "model.png").read_bytes()


def test_python_inputs_and_messages_a_notebook_meets(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    m = attnlab.Model(MINILM)
    r = m.forward(TEXT)
    # ids as a tensor or an array; masks and cache as one string
    assert m.forward(ids=torch.tensor(r.ids)).tokens == r.tokens
    assert m.forward(ids=np.asarray(r.ids)).tokens == r.tokens
    assert m.forward(TEXT, masks="window:1").attentions[0, 0, 5, 0] == 0  # key 0 is 5 away from query 5
    assert list(m.forward(TEXT, cache="blocks.0.attn.hook_pattern").cache) == ["blocks.0.attn.hook_pattern"]
    with pytest.raises(attnlab.Error, match="must be a str"):
        m.forward(123)
    with pytest.raises(attnlab.Error, match="not one of the maps"):
        m.analyze("head-patterns", TEXT)
    with pytest.raises(IndexError, match="layer -7: the model has 6 layers"):
        r.attention(-7)
    # transformers' whole output, a padded batch with its attention_mask, tokens as ids
    tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    model = transformers.AutoModel.from_pretrained(MINILM, attn_implementation="eager")
    enc = tok(["the cat sat on the mat", "a dog"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
        plain = model(**enc)
    np.testing.assert_array_equal(attnlab.as_attention(out, batch=1), attnlab.as_attention(out.attentions, batch=1))
    with pytest.raises(ValueError, match="output_attentions=True"):
        attnlab.as_attention(plain, batch=1)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"][1])
    path = attnlab.save_attention(tmp_path / "padded.npz", out, tokens, mask=enc["attention_mask"], batch=1)
    assert attnlab.load_attention(path)["mask"].tolist() == enc["attention_mask"][1].tolist()
    with pytest.raises(ValueError, match="convert_ids_to_tokens"):
        attnlab.figure(out, enc["input_ids"][1], batch=1)
    with pytest.raises(attnlab.Error, match="no colour map \"jet\""):
        attnlab.figure(out, tokens, batch=1, colormap="jet")
    with pytest.warns(UserWarning, match="do not sum to 1"):
        fig = attnlab.figure(np.full((1, 1, 3, 3), 0.5, dtype=np.float32), list("abc"))
    assert fig.path is None and fig.data[:4] == b"\x89PNG"  # in memory: no file left behind
    with pytest.raises(TypeError, match="list of arguments"):
        attnlab.show(out, tokens, batch=1, app_args="--tab lines")
