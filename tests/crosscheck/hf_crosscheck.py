"""Cross-check attnlab against Hugging Face's own code (transformers 4.40.2, tokenizers 0.19).

Run with the venv that scripts/attnlab.sh makes (--system-site-packages on Debian's torch).
1. Tokenizer, every code point: BertNormalizer's output and BertPreTokenizer's words for each
   character must equal `tokenizers`' (normalize_str / pre_tokenize_str).
2. Tokenizer ids on >= 300 hard strings (accents, CJK, Hangul, kana, emoji, control and
   zero-width characters, every punctuation category, numbers, 150-character words, typed
   special tokens, pairs), for a WordPiece tokenizer trained here, the same built from vocab.txt
   (transformers' BertTokenizerFast), and MiniLM's tokenizer.json when given.
3. Tiny random BERT (with / without pooler and classifier, the bert. prefix, gelu_new, F16 and
   BF16 weights, sharded) and DistilBERT (base, classifier, sinusoidal) folders saved by
   save_pretrained(safe_serialization=True): per-head probabilities, hidden states and logits
   against transformers' eager forward with output_attentions=True run in float64 (the oracle),
   within pyutil.oracle_bound (8x the same forward's float32 distance from it, never below a
   first-principles floor).
4. Bad folders: each gives its own clear error and exit code 2.
5. MiniLM (all-MiniLM-L6-v2, real weights) when its folder is given: ids equal, attention and
   hidden states within the same bounds.
Usage: hf_crosscheck.py PATH/TO/attnlab-cli [MINILM_DIR]
"""
import copy
import inspect
import json
import os
import shutil
import sys
import tempfile
import unicodedata

import numpy as np
import torch

import transformers
from pyutil import CliChecks, WorstShare, oracle_bound, stack_floor
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel,
                          BertTokenizerFast, DistilBertConfig, DistilBertForSequenceClassification,
                          DistilBertModel)

torch.set_num_threads(2)
torch.manual_seed(0)
CLI = sys.argv[1]
MINILM = sys.argv[2] if len(sys.argv) > 2 else ""



checks = CliChecks(CLI)
fail, run, failures = checks.fail, checks.run, checks.failures


# ------------------------------------------------------------------ tokenizers

CORPUS = """The movie was not good. It was great! Unbelievably, the playing children ran home.
Attention is all you need; transformers attend to every token. Don't stop believing — café naïve résumé.
東京は日本の首都です。 서울은 한국의 수도입니다. カタカナとひらがな。 数字 12345 and 3.14159 or 1,000,000.
""" * 3


def train_wordpiece(folder):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(CORPUS.splitlines(), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return tok


def hard_strings():
    s = [
        "", " ", "hello", "Hello World", "HELLO", "The movie was not good.", "don't", "can't won't",
        "café", "naïve", "résumé", "Ångström", "Øresund", "straße", "İstanbul", "ΣΊΣΥΦΟΣ", "ὀδυσσεύς",
        "Ｆｕｌｌｗｉｄｔｈ", "ﬁ ligature", "x²", "½", "Ⅻ", "①②③", "東京", "北京大学", "𠀋𡈽", "豈更",
        "서울", "한국어 텍스트", "ᄀᄁ", "カタカナ", "ひらがな", "ｶﾀｶﾅ", "😀", "👍🏽", "👨‍👩‍👧", "🇩🇪", "🥰 love",
        "a\u200bb", "a\u200cb", "a\u200db", "\ufeffbom", "a\u00adb", "a\x00b", "a\x07b", "a\x1bb", "a\x7fb",
        "a\u0085b", "tab\there", "new\nline", "cr\rlf", "nb\u00a0sp", "em\u2003sp", "ideo\u3000sp", "line\u2028sep",
        "para\u2029sep", "a\ufffdb", "a\ue000b", "\U000f0000", "mixed 123 abc", "3.14159", "1,000,000", "٣٤٥",
        "१२३", "x" * 99, "y" * 100, "z" * 101, "w" * 150, "a" * 150 + " b", "unbelievably " * 5,
        "[CLS]", "[SEP] between [SEP]", "[MASK]ed", "a[MASK]b", "[mask]", "[UNK]", "[PAD]", "[ CLS ]",
        "e\u0301", "a\u0308\u0301", "\u0301alone", "o\u0302\u0323", "ḍ̇", "Å", "Å", "ǅ", "ﬀ", "ß",
        "..." , "?!", "--", "a-b", "a_b", "a~b", "`quoted`", "«guillemets»", "„Anführung“", "‘single’",
        "“double”", "¿qué?", "¡hola!", "«»‹›", "、。", "【】", "（）", "「」", "『』", "〈〉", "…", "‥", "·",
        "§¶", "@#$%^&*", "€100", "£5", "¥", "±×÷", "→←", "∑∫", "ℕ", "√2", "°C", "™®©",
    ]
    # one string per punctuation category and per symbol category, from Python's Unicode tables
    cats = {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = unicodedata.category(chr(cp))
        if c[0] in "PSZCM" and len(cats.setdefault(c, [])) < 40:
            cats[c].append(chr(cp))
    for c, chars in sorted(cats.items()):
        s.append("x" + "y".join(chars) + "z")
        s.append(" ".join(chars))
    rng = np.random.default_rng(0)
    scripts = ["Привет мир", "Γειά σου", "שלום", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดี", "ሰላም", "გამარჯობა",
               "Բարեւ", "ᚠᚢᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "Ⓐⓑⓒ", "ａｂｃ１２３", "ｱｲｳ", "ℌℑℜ", "Ǆǅǆ", "ﬃﬄ", "Ｑ＆Ａ"]
    s += scripts + [w.upper() for w in scripts] + [w + "s" * 3 for w in scripts]
    for _ in range(120):  # random mixes of everything above
        n = int(rng.integers(1, 12))
        s.append(" ".join(s[int(rng.integers(0, len(s)))] for _ in range(n)))
    return s


def check_code_points(folder, tok, name):
    """BertNormalizer and BertPreTokenizer on every code point, against tokenizers."""
    cps = [cp for cp in range(0x110000) if not (0xD800 <= cp <= 0xDFFF) and cp != 0x0A]
    lines = ["a" + chr(cp) + "b" for cp in cps]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lines.txt")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
        norm = run(["tokenize", "--model", folder, "--lines", path, "--stage", "normalize"]).stdout.splitlines()
        pre = run(["tokenize", "--model", folder, "--lines", path, "--stage", "pre-tokenize"]).stdout.splitlines()
    if len(norm) != len(lines) or len(pre) != len(lines):
        fail(f"{name}: tokenize --lines gave {len(norm)}/{len(pre)} lines for {len(lines)}")
        return
    bad_norm, bad_pre = [], []
    for i, line in enumerate(lines):
        want = tok.normalizer.normalize_str(line)
        if json.loads(norm[i]) != want:
            bad_norm.append((hex(cps[i]), json.loads(norm[i]), want))
        want_pre = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(want)]
        if json.loads(pre[i]) != want_pre:
            bad_pre.append((hex(cps[i]), json.loads(pre[i]), want_pre))
    # A tokenizers built on a newer Unicode than the engine's ICU (tokenizers 0.23 knows Unicode
    # 16's letters; Debian 12's ICU 72 is Unicode 15) lower-cases characters the engine has never
    # heard of. Only those are set aside, and only when the engine left them exactly as typed and
    # Python's own Unicode data (older still) has them unassigned; every other difference fails.
    def newer(entry):
        cp, ours = int(entry[0], 16), entry[1]
        typed = "a" + chr(cp) + "b"
        return unicodedata.category(chr(cp)) == "Cn" and ours in (typed, [typed], typed.lower(), [typed.lower()])
    newer_norm = [e for e in bad_norm if newer(e)]
    newer_pre = [e for e in bad_pre if newer(e)]
    bad_norm = [e for e in bad_norm if not newer(e)]
    bad_pre = [e for e in bad_pre if not newer(e)]
    if bad_norm:
        fail(f"{name}: normalizer differs on {len(bad_norm)} code points, e.g. {bad_norm[:12]}")
    if bad_pre:
        fail(f"{name}: pre-tokenizer differs on {len(bad_pre)} code points, e.g. {bad_pre[:12]}")
    if newer_norm or newer_pre:
        print(f"{name}: {len(newer_norm)} + {len(newer_pre)} code points newer than Unicode "
              f"{unicodedata.unidata_version} that this tokenizers maps and the engine's ICU does not know "
              f"(e.g. {[e[0] for e in newer_norm[:6]]}): set aside")
    print(f"{name}: normalizer and pre-tokenizer on {len(lines)} code points: "
          f"{len(bad_norm)} + {len(bad_pre)} differences")


def check_ids(folder, encode, name, strings):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lines.txt")
        texts = [t.replace("\n", " ") for t in strings]  # one text per line
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(texts) + "\n")
        out = [json.loads(l) for l in run(["tokenize", "--model", folder, "--lines", path]).stdout.splitlines()]
    bad = 0
    for t, got in zip(texts, out):
        want_ids, want_types = encode(t)
        if not got.get("ids") and len(want_ids) == 2 and "error" not in got:
            want_ids, want_types = [], []  # nothing left of the text: attnlab has no input, not "[CLS] [SEP]"
        if got.get("ids") != want_ids or got.get("token_type_ids") != want_types:
            bad += 1
            if bad <= 8:
                fail(f"{name}: {t!r}: ids {got.get('ids')} {got.get('error', '')}, tokenizers {want_ids}")
    print(f"{name}: ids of {len(texts)} strings: {bad} differ")
    if bad:
        fail(f"{name}: {bad} of {len(texts)} strings tokenized differently")


def check_pairs(folder, encode_pair, name, strings):
    bad = 0
    for a, b in zip(strings[:40], strings[40:80]):
        if not a.strip() or not b.strip() or "\x00" in a + b:  # NUL cannot be an argument
            continue
        got = json.loads(run(["tokenize", "--model", folder, "--text", a, "--pair", b, "--json"]).stdout)
        want_ids, want_types = encode_pair(a, b)
        if got["ids"] != want_ids or got["token_type_ids"] != want_types:
            bad += 1
            fail(f"{name}: pair {a!r} / {b!r}: {got['ids']} vs {want_ids}")
    print(f"{name}: 40 pairs: {bad} differ")


def check_truncation(folder, encode_cut, name, max_len, cases):
    """attnlab-cli tokenize --truncation S (cut to the model's max_len) against the same cut made
    by Hugging Face's code (encode_cut(a, b, strategy, max_len) -> (ids, types), raising where it
    refuses): the same ids and token types, or both refuse."""
    bad = 0
    for a, b in cases:
        for strategy in ("longest_first", "only_first", "only_second"):
            args = ["tokenize", "--model", folder, "--text", a, "--truncation", strategy, "--json"]
            if b is not None:
                args[5:5] = ["--pair", b]
            p = run(args, check=False)
            try:
                want = encode_cut(a, b, strategy, max_len)
            except Exception:
                want = None
            what = f"{name}: {len(a.split())} / {len(b.split()) if b else '-'} words, {strategy}"
            if want is None:
                if p.returncode == 0:
                    bad += 1
                    fail(f"{what}: Hugging Face refuses, attnlab cut it: {p.stdout[:200]}")
                continue
            if p.returncode != 0:
                bad += 1
                fail(f"{what}: attnlab refused ({p.stderr.strip()}), Hugging Face cut it to {len(want[0])}")
                continue
            got = json.loads(p.stdout)
            if got["ids"] != want[0] or got["token_type_ids"] != want[1]:
                bad += 1
                fail(f"{what}: {len(got['ids'])} ids {got['ids'][:12]}... vs {len(want[0])} {want[0][:12]}...")
    print(f"{name}: truncation of {len(cases)} inputs x 3 strategies to {max_len} tokens: {bad} differ")


# ------------------------------------------------------------------ models

def forward_cli(folder, text, pair=None, extra=()):
    with tempfile.TemporaryDirectory() as d:
        a, h = os.path.join(d, "a.npy"), os.path.join(d, "h.npy")
        cmd = ["forward", "--model", folder, "--text", text, "--attn-out", a, "--out", h, "--json", *extra]
        if pair is not None:
            cmd += ["--pair", pair]
        j = json.loads(run(cmd).stdout)
        return j, np.load(a), np.load(h)


def hf_floors(model, T, hidden):
    """First-principles floors (pyutil.stack_floor) for a Hugging Face encoder: its layers, the
    longest reduction (intermediate size, hidden size or T), probabilities of magnitude 1 and
    hidden states of magnitude max|hidden|."""
    c = model.config
    layers = getattr(c, "num_hidden_layers", None) or c.n_layers
    K = max(getattr(c, "intermediate_size", 0) or getattr(c, "hidden_dim", 0), getattr(c, "hidden_size", 0), T)
    return stack_floor(layers, K), stack_floor(layers, K, float(np.abs(hidden).max())), layers, K


def takes_token_types(model):
    # the signature, not forward.__code__: transformers 5.x wraps forward in decorators whose own
    # code takes (*args, **kwargs), so the pairs' token types went unsaid and B ran as segment A
    return "token_type_ids" in inspect.signature(model.forward).parameters


def compare_model(name, folder, model, tok_encode, texts, pairs=()):
    """attnlab's forward against transformers' in float64 (the oracle), each within
    oracle_bound(float32 transformers, float64 transformers, floor)."""
    model.eval()
    m64 = copy.deepcopy(model).double().eval()
    worst = WorstShare("p", "h", "l")
    note = worst.note
    names = {"p": "probabilities", "h": "hidden states", "l": "logits"}

    for text, pair in [(t, None) for t in texts] + list(pairs):
        j, attn, hidden = forward_cli(folder, text, pair)
        ids, types = tok_encode(text, pair)
        if j["ids"] != ids or j["token_type_ids"] != types:
            fail(f"{name}: {text!r}: ids {j['ids']} / types {j['token_type_ids']} vs {ids} / {types}")
            continue
        kwargs = {"input_ids": torch.tensor([ids]), "output_attentions": True, "output_hidden_states": True}
        if takes_token_types(model):
            kwargs["token_type_ids"] = torch.tensor([types])
        with torch.no_grad():
            out, out64 = model(**kwargs), m64(**kwargs)
        ref_attn, ref_attn64 = (torch.stack([a[0] for a in o.attentions]).double().numpy() for o in (out, out64))
        ref_hidden, ref_hidden64 = (o.hidden_states[-1][0].double().numpy() for o in (out, out64))
        if attn.shape != ref_attn.shape:
            fail(f"{name}: attention shape {attn.shape} vs {ref_attn.shape}")
            continue
        p_floor, h_floor, layers, K = hf_floors(model, len(ids), ref_hidden64)
        note("p", attn, ref_attn64, ref_attn, p_floor)
        note("h", hidden, ref_hidden64, ref_hidden, h_floor)
        if hasattr(out, "logits") and out.logits is not None and "logits" in j and j["logits"]:
            # the pooler and the classifier: two more reductions over the hidden states
            note("l", j["logits"], out64.logits[0].numpy(), out.logits[0].double().numpy(),
                 stack_floor(layers + 2, K, float(np.abs(ref_hidden64).max())))
            labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
            if j["predicted_label"] != labels[int(out64.logits[0].argmax())]:
                fail(f"{name}: predicted {j['predicted_label']}, transformers {labels[int(out64.logits[0].argmax())]}")
        elif hasattr(out, "logits") and not isinstance(model, BertForMaskedLM):
            fail(f"{name}: attnlab gave no logits")
    print(f"{name}: max |diff| from float64 transformers (share of the bound): {worst.summary(names)}")
    for msg in worst.failed(names):
        fail(f"{name}: {msg}")


def check_analysis(name, folder, model, text, ids, types, pair=None):
    """rollout and grad-attention (the predicted class's logit) against transformers' attentions and
    their autograd gradients, float64 as the oracle (float32 PyTorch's own distance sets the bound)."""
    T = len(ids)

    def attentions(dtype, target=None):
        m = copy.deepcopy(model).to(dtype).eval()
        kwargs = {"input_ids": torch.tensor([ids]), "output_attentions": True}
        if takes_token_types(m):
            kwargs["token_type_ids"] = torch.tensor([types])
        out = m(**kwargs)
        target = int(out.logits[0].argmax()) if target is None else target
        grads = torch.autograd.grad(out.logits[0, target], out.attentions)
        R = np.eye(T)
        for a, g in zip(out.attentions, grads):
            R = R + np.clip((g[0] * a[0]).double().detach().numpy(), 0, None).mean(0) @ R
        roll = np.eye(T)
        for a in out.attentions:
            A = 0.5 * a[0].double().detach().numpy().mean(0) + 0.5 * np.eye(T)
            roll = (A / A.sum(-1, keepdims=True)) @ roll
        return R, roll, target

    R, roll, target = attentions(torch.float64)
    R32, roll32, _ = attentions(torch.float32, target)
    extra = ["--pair", pair] if pair is not None else []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.npy")
        run(["analyze", "--model", folder, "--text", text, *extra, "--method", "grad-attention", "--target", str(target),
             "--out", out])
        got_r = np.load(out)
        run(["analyze", "--model", folder, "--text", text, *extra, "--method", "rollout", "--out", out])
        got_roll = np.load(out)
    p_floor, _, layers, K = hf_floors(model, T, np.zeros(1))
    # the backward doubles the reductions (2 L blocks); relevance entries reach max|R|
    bound = oracle_bound(R32, R, stack_floor(2 * layers, K, float(np.abs(R).max())))
    roll_bound = oracle_bound(roll32, roll, p_floor)
    err, roll_err = float(np.abs(got_r - R).max()), float(np.abs(got_roll - roll).max())
    print(f"{name}: grad-attention max |diff| {err:.2e} (bound {bound:.2e}), rollout {roll_err:.2e} "
          f"(bound {roll_bound:.2e})")
    # far above any rounding bound: a map this close to I would prove nothing
    if float(np.abs(R - np.eye(T)).max()) < 1e-4:
        fail(f"{name}: grad-attention is the identity: the check would prove nothing")
    if err > bound:
        fail(f"{name}: grad-attention differs by {err:.3e} > {bound:.3e}")
    if roll_err > roll_bound:
        fail(f"{name}: rollout differs by {roll_err:.3e} > {roll_bound:.3e}")


def check_patching_bert(name, folder, model, enc, clean_text, corrupted_text, answer, wrong):
    """attnlab-cli patch on a BERT classifier against the same sweep written with PyTorch forward
    hooks on transformers' modules (post-norm names: resid_pre the layer input, z the input of
    BertSelfOutput.dense, attn_out its output, mlp_out BertOutput.dense's), every entry, the
    classifier's logits as the metric."""
    clean, types = enc(clean_text)
    corrupted, types_k = enc(corrupted_text)
    if len(clean) != len(corrupted):
        fail(f"{name}: the patching prompts tokenize to {len(clean)} and {len(corrupted)} tokens")
        return
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    a, w = labels.index(answer), labels.index(wrong)
    T, H = len(clean), model.config.num_attention_heads
    D = model.config.hidden_size // H
    worst = WorstShare("a")
    layers = model.config.num_hidden_layers
    K = max(model.config.hidden_size, T, model.config.intermediate_size)

    def sweep(m, what):
        blocks = m.bert.encoder.layer
        point = {"resid_pre": lambda b: (b, "pre"), "z": lambda b: (b.attention.output.dense, "pre"),
                 "attn_out": lambda b: (b.attention.output.dense, "out"),
                 "mlp_out": lambda b: (b.output.dense, "out")}[what]

        def metric(ids, tt, hook=None):
            handles = [hook()] if hook else []
            try:
                logits = m(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([tt])).logits[0]
            finally:
                for h in handles:
                    h.remove()
            return float(logits[a] - logits[w])
        cache = {}
        handles = []
        for l, blk in enumerate(blocks):
            mod, kind = point(blk)
            if kind == "pre":
                handles.append(mod.register_forward_pre_hook(lambda mm, i, l=l: cache.__setitem__(l, i[0].clone())))
            else:
                handles.append(mod.register_forward_hook(lambda mm, i, o, l=l: cache.__setitem__(l, o.clone())))
        m_clean = metric(clean, types)
        for h in handles:
            h.remove()
        m_corr = metric(corrupted, types_k)
        cols = H if what == "z" else T
        out = np.zeros((len(blocks), cols))
        for l, blk in enumerate(blocks):
            mod, kind = point(blk)
            for j in range(cols):
                def put(x, l=l, j=j):
                    x = x.clone()
                    if what == "z":
                        x[0, :, j * D:(j + 1) * D] = cache[l][0, :, j * D:(j + 1) * D]
                    else:
                        x[0, j] = cache[l][0, j]
                    return x

                def hook(mod=mod, kind=kind, put=put):
                    if kind == "pre":
                        return mod.register_forward_pre_hook(lambda mm, i: (put(i[0]),) + tuple(i[1:]))
                    return mod.register_forward_hook(lambda mm, i, o: put(o))
                out[l, j] = (metric(corrupted, types_k, hook) - m_corr) / (m_clean - m_corr)
        return {"values": out, "span": abs(m_clean - m_corr), "m": max(abs(m_clean), abs(m_corr), 1.0)}

    for what in ("resid_pre", "attn_out", "mlp_out", "z"):
        j = json.loads(run(["patch", "--model", folder, "--clean", clean_text, "--corrupted", corrupted_text,
                            "--answer", answer, "--wrong", wrong, "--what", what, "--json"]).stdout)
        got = np.array(j["values"]).reshape(j["shape"])
        model.eval()
        m64 = copy.deepcopy(model).double().eval()
        with torch.no_grad():
            r, r32 = sweep(m64, what), sweep(model, what)
        if got.shape != r["values"].shape:
            fail(f"{name}: patch --what {what} shape {got.shape} vs {r['values'].shape}")
            continue
        floor = 2 * stack_floor(layers + 2, K, r["m"])  # the classifier: the pooler and the head past the layers
        worst.note("a", got, r["values"], r32["values"], floor / r["span"])
        if what == "resid_pre":
            changed = [t for t in range(T) if clean[t] != corrupted[t]]
            if len(changed) == 1 and got[0, changed[0]] != 1.0:
                fail(f"{name}: resid_pre at layer 0, the changed position, restored {got[0, changed[0]]}, not 1")
    print(f"{name}: activation patching (resid_pre, attn_out, mlp_out, z) vs PyTorch hooks on transformers: "
          f"{worst.summary({'a': 'max |diff|'})}")
    for msg in worst.failed({"a": "patching"}):
        fail(f"{name}: {msg}")


def check_embed_hooks_bert(name, folder, model, enc, text, pair):
    """The embedding's named parts of a pair (embed.hook_embed, hook_pos_embed,
    hook_token_type_embed, TransformerLens's BertEmbed) against the outputs of transformers'
    BertEmbeddings modules: table rows, so equal to the float32 bit."""
    ids, types = enc(text, pair)
    emb = (model.bert if hasattr(model, "bert") else model).embeddings
    want, handles = {}, []
    for mod, key in ((emb.word_embeddings, "embed.hook_embed"), (emb.position_embeddings, "embed.hook_pos_embed"),
                     (emb.token_type_embeddings, "embed.hook_token_type_embed")):
        handles.append(mod.register_forward_hook(lambda m, i, o, key=key: want.__setitem__(key, o[0].detach().numpy())))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]))
    finally:
        for h in handles:
            h.remove()
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "embed.npz")
        run(["forward", "--model", folder, "--text", text, "--pair", pair, "--cache", "embed.*", "--cache-out", out])
        z = np.load(out)
        got = {k: z[k] for k in z.files}
    if sorted(got) != sorted(want):
        fail(f"{name}: embedding hooks {sorted(got)}, transformers' modules {sorted(want)}")
        return
    for k, w in want.items():
        if got[k].shape != w.shape or not np.array_equal(got[k], w):
            fail(f"{name}: {k} differs from transformers' (shape {got[k].shape} vs {w.shape})")
    print(f"{name}: {', '.join(sorted(got))} equal transformers' embedding modules")


def bert_config(vocab, **kw):
    base = dict(vocab_size=vocab, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                max_position_embeddings=64, type_vocab_size=2, attn_implementation="eager")
    base.update(kw)
    return BertConfig(**base)


def randomize(model):
    # transformers initialises LayerNorm to 1 / 0 and biases to 0; make every tensor matter.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def main():
    root = tempfile.mkdtemp(prefix="attnlab-hf-")
    try:
        wp = os.path.join(root, "bert")
        tok = train_wordpiece(wp)
        V = tok.get_vocab_size()

        def enc(text, pair=None):
            e = tok.encode(text, pair) if pair is not None else tok.encode(text)
            return e.ids, e.type_ids

        # 3. models first (fast), then the tokenizer sweeps
        texts = ["The movie was not good.", "unbelievably great", "a", "東京 서울 カタカナ café 😀",
                 " ".join(["token"] * 60)]
        pairs = [("The movie was not good.", "It was great!"), ("a", "b")]

        m = randomize(BertModel(bert_config(V)))
        m.save_pretrained(wp, safe_serialization=True)
        compare_model("BertModel (pooler)", wp, m, enc, texts, pairs)

        d = os.path.join(root, "bert-cls")
        shutil.copytree(wp, d)
        m = randomize(BertForSequenceClassification(bert_config(V, num_labels=3, hidden_act="gelu_new",
                                                                id2label={0: "neg", 1: "neu", 2: "pos"},
                                                                label2id={"neg": 0, "neu": 1, "pos": 2})))
        m.save_pretrained(d, safe_serialization=True)
        compare_model("BertForSequenceClassification (gelu_new)", d, m, enc, texts, pairs)
        a, b = pairs[0]
        check_analysis("BertForSequenceClassification, a pair", d, m, a, *enc(a, b), pair=b)
        check_patching_bert("BertForSequenceClassification", d, m, enc, "The movie was not good.",
                            "The movie was movie good.", "neg", "pos")  # one token changed
        check_embed_hooks_bert("BertForSequenceClassification", d, m, enc, a, b)

        d = os.path.join(root, "bert-mlm")
        shutil.copytree(wp, d)
        m = randomize(BertForMaskedLM(bert_config(V)))
        m.save_pretrained(d, safe_serialization=True)
        compare_model("BertForMaskedLM (bert. prefix, no pooler)", d, m.bert, enc, texts[:2])
        j = json.loads(run(["forward", "--model", d, "--text", "x", "--json"]).stdout)
        if not any("not used" in n for n in j.get("notes", [])):
            fail(f"BertForMaskedLM: no note that the MLM head is not used: {j.get('notes')}")

        for dtype in (torch.float16, torch.bfloat16):
            d = os.path.join(root, f"bert-{dtype}")
            shutil.copytree(wp, d)
            m = randomize(BertModel(bert_config(V)))
            m.to(dtype).save_pretrained(d, safe_serialization=True)
            # the reference runs the same rounded weights in float32
            compare_model(f"BertModel saved as {dtype}", d, m.float(), enc, texts[:2])

        d = os.path.join(root, "bert-sharded")
        os.makedirs(d)
        shutil.copy(os.path.join(wp, "tokenizer.json"), d)
        m = randomize(BertModel(bert_config(V, hidden_size=64, intermediate_size=128)))
        m.save_pretrained(d, safe_serialization=True, max_shard_size="100KB")
        if not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
            fail("sharded save did not shard")
        compare_model("BertModel (sharded)", d, m, enc, texts[:2])

        def dcfg(**kw):
            base = dict(vocab_size=V, dim=32, n_heads=4, n_layers=2, hidden_dim=64, max_position_embeddings=64,
                        attn_implementation="eager")
            base.update(kw)
            return DistilBertConfig(**base)

        d = os.path.join(root, "distilbert")
        shutil.copytree(wp, d)
        m = randomize(DistilBertModel(dcfg()))
        m.save_pretrained(d, safe_serialization=True)
        compare_model("DistilBertModel", d, m, lambda t, p=None: (enc(t, p)[0], [0] * len(enc(t, p)[0])), texts[:3])

        d = os.path.join(root, "distilbert-cls")
        shutil.copytree(wp, d)
        m = randomize(DistilBertForSequenceClassification(dcfg(num_labels=2, sinusoidal_pos_embds=True)))
        m.save_pretrained(d, safe_serialization=True)
        compare_model("DistilBertForSequenceClassification (sinusoidal)", d, m,
                      lambda t, p=None: (enc(t, p)[0], [0] * len(enc(t, p)[0])), texts[:3])
        check_analysis("DistilBertForSequenceClassification", d, m, texts[1], enc(texts[1])[0], [0] * len(enc(texts[1])[0]))

        # vocab.txt + tokenizer_config.json only: transformers' BertTokenizerFast
        vt = os.path.join(root, "bert-vocab-txt")
        os.makedirs(vt)
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        with open(os.path.join(vt, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t, _ in vocab))
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(wp, f), vt)
        cased = os.path.join(root, "bert-vocab-txt-cased")
        shutil.copytree(vt, cased)
        with open(os.path.join(cased, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": False, "tokenize_chinese_chars": False}, f)
        slow_fast = BertTokenizerFast(os.path.join(vt, "vocab.txt"))
        cased_fast = BertTokenizerFast(os.path.join(cased, "vocab.txt"), do_lower_case=False,
                                       tokenize_chinese_chars=False)

        # 1. every code point
        check_code_points(wp, tok, "trained WordPiece (uncased)")
        cased_tok = Tokenizer.from_str(cased_fast.backend_tokenizer.to_str())
        check_code_points(cased, cased_tok, "vocab.txt, cased, no CJK split")

        # 2. ids on hard strings
        strings = hard_strings()
        if len(strings) < 300:
            fail(f"only {len(strings)} hard strings")

        def hf_ids(t):
            e = tok.encode(t)
            return e.ids, e.type_ids

        def fast_ids(fast):
            return lambda t: (fast(t)["input_ids"], fast(t)["token_type_ids"])

        check_ids(wp, hf_ids, "trained tokenizer.json", strings)
        check_ids(vt, fast_ids(slow_fast), "vocab.txt (BertTokenizerFast)", strings)
        check_ids(cased, fast_ids(cased_fast), "vocab.txt cased", strings)
        check_pairs(wp, lambda a, b: (tok.encode(a, b).ids, tok.encode(a, b).type_ids), "trained tokenizer.json",
                    strings)

        def tokenizers_cut(a, b, strategy, max_len):  # tokenizers' own truncation (what transformers' fast tokenizers run)
            t = Tokenizer.from_file(os.path.join(wp, "tokenizer.json"))
            t.enable_truncation(max_len, strategy=strategy)
            e = t.encode(a, b) if b is not None else t.encode(a)
            return e.ids, e.type_ids

        def words(n, w="movie"):
            return " ".join([w] * n)
        # 64 tokens, 3 added to a pair: only the longer cut (70 / 3), both cut to halves (40 / 40,
        # 41 / 40 and an odd share), one text (100 words), and inputs that need no cut
        cut_cases = [(words(70), words(3)), (words(3), words(70, "good")), (words(40), words(40, "good")),
                     (words(41), words(40, "good")), (words(30), words(34, "good")), (words(100), None),
                     (words(10), words(10)), (words(61), None)]
        check_truncation(wp, tokenizers_cut, "trained tokenizer.json", 64, cut_cases)

        # added tokens with single_word / lstrip / rstrip / normalized (user-added vocabulary)
        at = os.path.join(root, "bert-added")
        shutil.copytree(wp, at)
        tok2 = Tokenizer.from_file(os.path.join(wp, "tokenizer.json"))
        tok2.add_tokens([AddedToken("movie", single_word=True), AddedToken("Café", normalized=True),
                         AddedToken("<x>", lstrip=True, rstrip=True, normalized=False)])
        tok2.add_special_tokens([AddedToken("<eot>", single_word=False, normalized=False)])
        tok2.save(os.path.join(at, "tokenizer.json"))
        with open(os.path.join(at, "config.json")) as f:
            cfg = json.load(f)
        cfg["vocab_size"] = tok2.get_vocab_size()
        with open(os.path.join(at, "config.json"), "w") as f:
            json.dump(cfg, f)
        m = randomize(BertModel(bert_config(tok2.get_vocab_size())))
        m.save_pretrained(at, safe_serialization=True)
        added_strings = ["the movie", "themovie", "movies", "movie_x", "a CAFÉ b", "café", "cafe", "x <x> y", "x<x>y",
                         "x   <x>   y", "<x><x>", "<eot>", "a<eot>b", "<EOT>", "movie<eot>movie", "[MASK]<x>movie"]
        check_ids(at, lambda t: (tok2.encode(t).ids, tok2.encode(t).type_ids), "added tokens",
                  added_strings + strings[:100])

        # fine-tuning: the saved folder opens in transformers and gives attnlab's numbers; a frozen
        # encoder stays as it was
        fine_tune(root, os.path.join(root, "bert"), BertForSequenceClassification, enc, "BERT")
        fine_tune(root, os.path.join(root, "distilbert"), DistilBertForSequenceClassification,
                  lambda t, p=None: (enc(t, p)[0], [0] * len(enc(t, p)[0])), "DistilBERT")

        # 4. bad folders
        bad_folders(root, wp)

        # 5. MiniLM, real weights
        if MINILM:
            minilm(strings)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def load_safetensors(path):
    from safetensors.numpy import load_file
    return load_file(path)


def fine_tune(root, base, cls, enc, name, epochs=1, rows=300, min_acc=None, freeze_check=True):
    data = os.path.join(root, f"neg-{name}.tsv")
    run(["make-data", "--task", "negation", "--out", data, "--n", str(rows), "--seed", "5"])
    out = os.path.join(root, f"{name}-tuned")
    p = run(["train", "--init", base, "--data", data, "--out", out, "--epochs", str(epochs), "--seed", "1"])
    accs = [float(line.split("val_acc ")[1].split()[0]) for line in p.stdout.splitlines() if "val_acc" in line]
    print(f"fine-tuned {name}: val_acc {accs}")
    if min_acc is not None and (not accs or max(accs) < min_acc):
        fail(f"fine-tuning {name}: validation accuracy {accs} < {min_acc}")
    model = cls.from_pretrained(out, attn_implementation="eager")
    compare_model(f"fine-tuned {name} opened by transformers", out, model, enc,
                  ["the film was not good", "a very good film"])
    if freeze_check:
        frozen = os.path.join(root, f"{name}-frozen")
        run(["train", "--init", base, "--data", data, "--out", frozen, "--epochs", "1", "--seed", "1",
             "--freeze-encoder"])
        a, b = load_safetensors(os.path.join(base, "model.safetensors")), load_safetensors(
            os.path.join(frozen, "model.safetensors"))
        prefix = "bert." if name == "BERT" else "distilbert."
        changed = [k for k, v in a.items() if "position_ids" not in k and "pooler" not in k and
                   not np.array_equal(v, b.get(prefix + k, b.get(k)))]  # the pooler is part of the head
        if changed:
            fail(f"--freeze-encoder changed {len(changed)} encoder tensors, e.g. {changed[:3]}")
        heads = [k for k in b if k.startswith(("classifier", "pre_classifier")) or "pooler" in k]
        if not heads:
            fail(f"{name}: the frozen fine-tune saved no classifier")


def expect_error(name, folder, needle):
    p = run(["forward", "--model", folder, "--text", "hello"], check=False)
    if p.returncode != 2 or needle not in p.stderr:
        fail(f"bad folder '{name}': exit {p.returncode}, stderr {p.stderr.strip()!r}; expected {needle!r}")
    else:
        print(f"bad folder '{name}': {p.stderr.strip()}")


def bad_folders(root, good):
    def variant(name, edit):
        d = os.path.join(root, "bad-" + name)
        shutil.copytree(good, d)
        edit(d)
        return d

    def set_config(d, **kw):
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        c.update(kw)
        json.dump(c, open(p, "w"))

    expect_error("unknown model_type", variant("type", lambda d: set_config(d, model_type="t5")),
                 'model_type "t5" is not supported (supported: bert, distilbert, gpt2, llama, mistral, qwen2, phi3, qwen3, gemma2, gemma3_text, bart)')
    expect_error("no tokenizer", variant("notok", lambda d: os.remove(os.path.join(d, "tokenizer.json"))),
                 "no tokenizer")
    expect_error("vocabulary larger than the embedding",
                 variant("vocab", lambda d: set_config(d, vocab_size=10)), "rows (vocab_size)")

    def only_bin(d):
        os.remove(os.path.join(d, "model.safetensors"))
        open(os.path.join(d, "pytorch_model.bin"), "wb").write(b"\x80\x02not really a pickle")
    expect_error("only pytorch_model.bin", variant("bin", only_bin), "attnlab never reads one")

    def drop_shard(d):
        os.remove(os.path.join(d, "model.safetensors"))
        json.dump({"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight": "model-00002-of-00002.safetensors"}},
                  open(os.path.join(d, "model.safetensors.index.json"), "w"))
    expect_error("a shard missing", variant("shard", drop_shard), "is listed but missing")
    expect_error("hidden size not divisible by heads",
                 variant("heads", lambda d: set_config(d, num_attention_heads=5)), "not divisible by the 5 attention heads")

    def truncate(d):
        p = os.path.join(d, "model.safetensors")
        data = open(p, "rb").read()
        open(p, "wb").write(data[: len(data) // 2])
    expect_error("truncated safetensors", variant("trunc", truncate), "lie outside the data")


def minilm(strings):
    tok = Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()

    def enc(t, p=None):
        e = tok.encode(t, p) if p is not None else tok.encode(t)
        return e.ids, e.type_ids

    check_ids(MINILM, lambda t: enc(t), "MiniLM tokenizer.json", strings)
    check_pairs(MINILM, lambda a, b: enc(a, b), "MiniLM tokenizer.json", strings)
    fast = transformers.AutoTokenizer.from_pretrained(MINILM)

    def transformers_cut(a, b, strategy, max_len):  # what a user writes: tokenizer(a, b, truncation=...)
        e = fast(a, b, truncation=strategy, max_length=max_len) if b is not None else \
            fast(a, truncation=strategy, max_length=max_len)
        return e["input_ids"], e["token_type_ids"]
    long_a = " ".join(["attention"] * 600)
    check_truncation(MINILM, transformers_cut, "MiniLM (transformers' tokenizer)", 512,
                     [(long_a, "Is it all you need?"), (" ".join(["heads"] * 300), " ".join(["layers"] * 301)),
                      (long_a, None)])
    # fine-tuning the real model on the negation task: 1 epoch of 595 rows (~10 s)
    root = tempfile.mkdtemp(prefix="attnlab-minilm-")
    try:
        fine_tune(root, MINILM, BertForSequenceClassification, enc, "MiniLM", rows=700, min_acc=0.95,
                  freeze_check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    model = BertModel.from_pretrained(MINILM, attn_implementation="eager")
    long_text = " ".join(s for s in strings[:120] if "\x00" not in s)[:1500]
    compare_model("all-MiniLM-L6-v2", MINILM, model, enc,
                  ["The movie was not good.", "Attention is all you need.", long_text],
                  [("How old are you?", "I am six years old.")])


if __name__ == "__main__":
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    main()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all Hugging Face cross-checks passed")
