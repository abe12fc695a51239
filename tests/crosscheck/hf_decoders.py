"""Cross-check attnlab's decoder models and byte-level BPE against Hugging Face's own code
(transformers 4.40.2, tokenizers 0.19), in the venv scripts/attnlab.sh makes.

1. Byte-level BPE: tokenizers trained here on the repository's own text (a few thousand merges):
   GPT-2's ByteLevel pre-tokenizer, a Llama-3-style Split(regex) + ByteLevel(use_regex=false)
   with a BOS template, a Qwen2-style one with NFC, and a SentencePiece-style BPE (Prepend /
   Replace, byte fallback, fused [UNK]) as TinyLlama ships. Each as tokenizer.json, the byte-level
   ones also as vocab.json + merges.txt (transformers' GPT2TokenizerFast): ids equal on >= 300
   hard strings (spaces, newlines, tabs, contractions, digit runs, emoji, CJK, added tokens).
2. Random GPT-2 (GPT2Model, GPT2LMHeadModel tied and untied), Llama (grouped-query: 4 query heads
   per key/value head; LlamaModel without a head), Mistral (a sliding window shorter than the
   input), Qwen2 (q/k/v biases, tied embeddings) folders saved by save_pretrained: per-head
   probabilities, last hidden state and next-token probabilities against transformers' eager
   forward in float64, within pyutil.oracle_bound (8x float32's own distance, never below a
   first-principles floor); the top-10 next tokens and the logit lens (top-1 per layer and
   position) equal to what transformers' hidden states give. BF16 weights converted on load.
   Phi-3 (fused qkv_proj and gate_up_proj, grouped-query, longrope, a window) and Qwen3 (per-head
   q_norm / k_norm; attention_bias and tied; a decoupled head_dim) under 5.x; Gemma 2 (soft caps
   on scores and logits, sandwich norms, 1 + w gains, the scaled embedding, alternating windowed
   layers) under 5.x with the loss, hooks, logit attribution, generation and fine-tuning too;
   Gemma 3's text model (q/k norms, a rotary base per layer kind) under 5.x.
   Rotary scaling: rope_type linear and dynamic (4.40 and 5.x), llama3, yarn (with and without
   truncation, mscale) and longrope (its short and long factors) under 5.x, each a folder as
   that version writes it (rope_scaling or rope_parameters).
   Decoders trained here from scratch and saved with train --objective lm --hf (GPT-2 style, and an
   attention-only Llama style): from_pretrained and AutoTokenizer open them, with attnlab's
   probabilities and token ids.
3. Bad folders: unknown model_type, heads not divisible by key/value heads, vocab.json without
   merges.txt, an unknown rope_type, a rope factor missing, partial_rotary_factor: each a clear
   error and exit code 2.
Usage: hf_decoders.py PATH/TO/attnlab-cli REPO_ROOT
"""
import copy
import glob
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

import transformers
from pyutil import CliChecks, U32, WorstShare, load_safetensors, oracle_bound, save_safetensors, stack_floor
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, GPT2Model, GPT2TokenizerFast, LlamaConfig, LlamaForCausalLM,
                          LlamaModel, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

torch.set_num_threads(2)
torch.manual_seed(0)
CLI, REPO = sys.argv[1], sys.argv[2]


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


checks = CliChecks(CLI)
fail, run, failures = checks.fail, checks.run, checks.failures


# ------------------------------------------------------------------ tokenizers

def corpus():
    files = sorted(glob.glob(os.path.join(REPO, "README.md")) + glob.glob(os.path.join(REPO, "docs", "*.md")) +
                   glob.glob(os.path.join(REPO, "engine", "*.cpp")) + glob.glob(os.path.join(REPO, "ui", "*.cpp")))
    lines = []
    for f in files:
        with open(f, encoding="utf-8") as h:
            lines += h.read().splitlines()
    lines += ["東京は日本の首都です。 서울은 한국의 수도입니다。 café naïve résumé 😀 👍🏽 数字 12345"] * 20
    return lines


SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|im_start|>"]


def train_byte_level(kind):
    tok = Tokenizer(models.BPE())
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        pattern = LLAMA3_PATTERN if kind == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens(["attention head"])  # a user-added token, matched whole
    return tok


def train_sentencepiece_bpe():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # TinyLlama's decoder: the prepended space stripped again
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  show_progress=False, limit_alphabet=200)
    tok.train_from_iterator(corpus(), trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", bos)])
    return tok


def hard_strings():
    s = [
        "", " ", "  ", "   x", "x   ", " leading", "trailing ", "two  spaces", "tab\there", "\ttab first",
        "new\nline", "\n\nlead", "end\n", "cr\r\nlf", "mixed \n\t \n spaces", "a\u00a0b", "ideo\u3000sp",
        "mongol\u180evowel", "line\u2028sep", "hello", "Hello World", "HELLO WORLD", "The movie was not good.",
        "don't", "Don'T", "I'm", "we're", "they've", "she'll", "he'd", "it's", "IT'S", "'s alone", "rock'n'roll",
        "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "v1.2.3", "x2y3z4", "٣٤٥", "१२३", "½ ⅓",
        "café", "naïve", "résumé", "cafe\u0301", "Å vs Å", "Ångström", "straße", "İstanbul", "ΣΊΣΥΦΟΣ",
        "东京", "東京は日本の首都です。", "서울은 한국의 수도입니다.", "カタカナ", "ひらがな", "𠀋𡈽",
        "😀", "😀😀😀", "👍🏽", "👨‍👩‍👧", "🇩🇪🇫🇷", "🥰 love", "a😀b", "emoji at end 🎉",
        "a\u200bb", "a\u200db", "\ufeffbom", "a\x00b", "a\x07b", "a\x1bb", "a\x7fb", "a\ufffdb", "\U000f0000",
        "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "<|begin_of_text|>hi", "<|im_start|> x",
        "attention head", "the attention head attends", "attention  head", "Attention head",
        "#include <vector>", "std::vector<int> v{1, 2, 3};", "if (x != y) { return -1; }", "a->b", "i++ && --j",
        "// comment", "/* block */", "x = y * 2 + z / 3;", "https://example.com/path?q=1&r=2", "user@example.com",
        "!!!", "???", "...", "—", "–", "…", "«»", "„“", "‘’", "¿qué?", "¡hola!", "§¶", "€100", "£5", "±×÷", "→←",
        "x" * 300, "ab" * 150, " " * 40 + "x", "\n" * 10, "word " * 60,
    ]
    rng = np.random.default_rng(0)
    base = list(s)
    for _ in range(230):
        n = int(rng.integers(1, 8))
        sep = [" ", "", "\n", "  ", "\t"][int(rng.integers(0, 5))]
        s.append(sep.join(base[int(rng.integers(0, len(base)))] for _ in range(n)))
    return s


def check_tokenizer(name, folder, encode, strings, decode=None):
    """ids of every string through `tokenize` (one call per string with a newline, --lines otherwise);
    with `decode` (tokenizers' Tokenizer.decode, skip_special_tokens=False), the ids back to text too."""
    plain = [t for t in strings if "\n" not in t and "\r" not in t and "\x00" not in t]
    special = [t for t in strings if t not in plain and "\x00" not in t]
    got = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lines.txt")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(plain) + "\n")
        out = run(["tokenize", "--model", folder, "--lines", path]).stdout.split("\n")
        for t, line in zip(plain, out):
            got[t] = json.loads(line)
    for t in special:
        p = run(["tokenize", "--model", folder, "--text", t, "--json"], check=False)
        got[t] = json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr}
    bad = 0
    for t in plain + special:
        want = encode(t)
        have = got.get(t, {}).get("ids")
        if have is None and "error" not in got.get(t, {}):
            have = []
        if not have and want and len(want) <= 1 and "error" not in got.get(t, {}):
            want = []  # only the BOS: attnlab has no input, as for "[CLS] [SEP]"
        if have != want:
            bad += 1
            if bad <= 8:
                fail(f"{name}: {t!r}: attnlab {have} {got.get(t, {}).get('error', '')}, tokenizers {want}")
        elif decode is not None and have and got[t].get("decoded") != decode(have):
            bad += 1
            if bad <= 8:
                fail(f"{name}: {t!r} decoded: attnlab {got[t].get('decoded')!r}, tokenizers {decode(have)!r}")
    print(f"{name}: ids{' and decoded text' if decode else ''} of {len(plain) + len(special)} strings: {bad} differ")
    if bad:
        fail(f"{name}: {bad} strings tokenized differently")


def check_labels(name, folder):
    """Readable labels: spaces shown as U+2423, a character split over byte tokens shown once (on the
    token where it starts; the others show U+2026), so the labels spell the text."""
    text = "hello world\t🦜 parrot"  # the parrot is not in the training text: four byte tokens
    j = json.loads(run(["tokenize", "--model", folder, "--text", text, "--json"]).stdout)
    labels = [l for l, sp in zip(j["labels"], j["special"]) if not sp]
    spelled = "".join(l for l in labels if l != "…")
    want = text.replace(" ", "␣").replace("\t", "⇥")
    if spelled != want or labels.count("…") < 1 or sum(l.count("🦜") for l in labels) != 1:
        fail(f"{name}: labels {labels} spell {spelled!r} (want {want!r}, the parrot once, continuation marks)")


# ------------------------------------------------------------------ models

def forward_cli(folder, ids):
    with tempfile.TemporaryDirectory() as d:
        a, h = os.path.join(d, "a.npy"), os.path.join(d, "h.npy")
        j = json.loads(run(["forward", "--model", folder, "--ids", ",".join(map(str, ids)), "--attn-out", a,
                            "--out", h, "--json"]).stdout)
        return j, np.load(a), np.load(h)


def lens_cli(folder, ids):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.npy")
        run(["analyze", "--model", folder, "--ids", ",".join(map(str, ids)), "--method", "logit-lens", "--out", out])
        return np.load(out)


def reference_pair(model, call):
    """(float32 result, oracle) of call(m) for the model. The oracle is the model in float64; where
    transformers cannot run it in float64 (4.40's sliding-window mask on torch 1.13), it is the
    float32 model itself, and the float32 result stands in for float32's error by the same model
    with every weight perturbed by one unit roundoff (w (1 + U32 z), z ~ N(0, 1)): a forward's
    float32 error is, to first order, its response to such perturbations of every operation, so
    the perturbed run's distance measures the model's conditioning (statistical condition
    estimation, Kenney & Laub 1994)."""
    try:
        m64 = copy.deepcopy(model).double().eval()
        with torch.no_grad():
            return call(model), call(m64)
    except RuntimeError:
        pass
    with torch.no_grad():
        return call(perturbed(model)), call(model)


def perturbed(model):
    """A float32 copy of the model with every weight w replaced by w (1 + U32 z), z ~ N(0, 1)."""
    g = torch.Generator().manual_seed(11)
    mp = copy.deepcopy(model).eval()
    with torch.no_grad():
        for prm in mp.parameters():
            prm.mul_(1 + U32 * torch.randn(prm.shape, generator=g, dtype=torch.float64).float())
    return mp


def decoder_floors(model, T, hidden):
    """First-principles floors (pyutil.stack_floor): the layers, the longest reduction
    (intermediate size, hidden size or T), probabilities of magnitude 1, hidden states of
    magnitude max|hidden|."""
    c = model.config
    layers = getattr(c, "num_hidden_layers", None) or c.n_layer
    heads_width = (getattr(c, "head_dim", None) or 0) * (getattr(c, "num_attention_heads", None) or 0)
    K = max(getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * c.hidden_size,
            c.hidden_size, T, heads_width)  # heads_width: o_proj's reduction when head_dim is set apart
    return stack_floor(layers, K), stack_floor(layers, K, float(np.abs(hidden).max())), layers, K


def softcapped(m, logits):
    """Gemma 2's final_logit_softcapping, as Gemma2ForCausalLM applies it after lm_head (the lens too)."""
    cap = getattr(m.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def compare_decoder(name, folder, model, lengths, vocab):
    model.eval()
    worst = WorstShare("p", "h", "n")
    note = worst.note
    names = {"p": "probabilities", "h": "hidden states", "n": "next-token probabilities"}

    rng = np.random.default_rng(1)
    head = model.get_output_embeddings() if hasattr(model, "lm_head") else None
    if head is None and model.config.tie_word_embeddings:  # a base model: its tied head is the embedding
        head = lambda h, m: h @ m.get_input_embeddings().weight.T  # noqa: E731
    elif head is not None:
        head = lambda h, m: softcapped(m, m.get_output_embeddings()(h))  # noqa: E731
    for T in lengths:
        ids = [int(x) for x in rng.integers(0, vocab, T)]
        j, attn, hidden = forward_cli(folder, ids)

        def call(m):
            """Everything compared, from one forward of m: attentions, last hidden state, and (with
            an LM head) the next-token probabilities and every layer's logit lens."""
            out = m(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
            r = {"attn": torch.stack([a[0] for a in out.attentions]).double().numpy(),
                 "hidden": out.hidden_states[-1][0].double().numpy()}
            if head is not None:
                logits = out.logits[0, -1] if hasattr(out, "logits") else head(out.hidden_states[-1][0, -1], m)
                r["next"] = torch.softmax(logits.double(), -1).numpy()
                base = m.transformer if hasattr(m, "transformer") else getattr(m, "model", m)
                norm = base.ln_f if hasattr(base, "ln_f") else base.norm
                L = len(out.attentions)
                r["lens"] = [torch.softmax(head(out.hidden_states[l + 1][0] if l == L - 1
                                                else norm(out.hidden_states[l + 1][0]), m).double(), -1).numpy()
                             for l in range(L)]
            return r

        r32, r = reference_pair(model, call)
        if attn.shape != r["attn"].shape:
            fail(f"{name}: attention shape {attn.shape} vs {r['attn'].shape}")
            continue
        p_floor, h_floor, layers, K = decoder_floors(model, T, r["hidden"])
        note("p", attn, r["attn"], r32["attn"], p_floor)
        note("h", hidden, r["hidden"], r32["hidden"], h_floor)
        if head is None:
            if "next_tokens" in j:
                fail(f"{name}: a model without an LM head gave next_tokens")
            continue
        probs = r["next"]
        top = [t["id"] for t in j["next_tokens"]]
        want_top = [int(i) for i in np.argsort(-probs, kind="stable")[:10]]
        if top[:3] != want_top[:3]:
            fail(f"{name}: next tokens {top} vs transformers {want_top}")
        # the head: one more reduction of hidden-size terms (probabilities, magnitude 1)
        n_floor = stack_floor(layers + 1, K)
        note("n", [t["probability"] for t in j["next_tokens"]], probs[top], r32["next"][top], n_floor)
        # logit lens: every layer's residual through the final norm and the LM head
        lens = lens_cli(folder, ids)
        for l, p in enumerate(r["lens"]):
            want_id = p.argmax(-1)
            got_id = lens[0, l].astype(np.int64)
            rows = np.arange(len(want_id))
            # ids equal except where two candidates are within the bound of each other
            tie = oracle_bound(r32["lens"][l], p, n_floor)
            for t in np.nonzero(got_id != want_id)[0]:
                if abs(float(p[t, got_id[t]]) - float(p[t, want_id[t]])) > 2 * tie:
                    fail(f"{name}: logit lens layer {l} position {t}: {got_id[t]} vs {want_id[t]}")
                    break
            note("n", lens[1, l], p.max(-1), r32["lens"][l][rows, r32["lens"][l].argmax(-1)], n_floor)
    print(f"{name}: max |diff| from float64 transformers (share of the bound): {worst.summary(names)}")
    for msg in worst.failed(names):
        fail(f"{name}: {msg}")


def check_grad_attention(name, folder, model, T, vocab):
    """grad-attention (Chefer et al. 2021) for the top next token, against transformers' autograd:
    d logit / d attentions from output_attentions=True (the tensors that weight the values)."""
    ids = [int(x) for x in np.random.default_rng(7).integers(0, vocab, T)]

    def relevance(dtype, target=None, base=model):
        m = copy.deepcopy(base).to(dtype).eval()
        out = m(input_ids=torch.tensor([ids]), output_attentions=True)
        logits = out.logits[0, -1]
        target = int(logits.argmax()) if target is None else target
        grads = torch.autograd.grad(logits[target], out.attentions)
        R = np.eye(T)
        for a, g in zip(out.attentions, grads):
            R = R + np.clip((g[0] * a[0]).double().detach().numpy(), 0, None).mean(0) @ R
        return R, target

    try:
        R, target = relevance(torch.float64)
        R32, _ = relevance(torch.float32, target)
    except RuntimeError:  # transformers 4.40's sliding-window mask cannot be made in float64 on torch 1.13
        R, target = relevance(torch.float32)  # as in reference_pair: the perturbed model measures
        R32, _ = relevance(torch.float32, target, perturbed(model))
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.npy")
        run(["analyze", "--model", folder, "--ids", ",".join(map(str, ids)), "--method", "grad-attention",
             "--target", str(target), "--out", out])
        got = np.load(out)
    _, _, layers, K = decoder_floors(model, T, np.zeros(1))
    # the backward doubles the reductions (2 L blocks); relevance entries reach max|R|
    bound = oracle_bound(R32, R, stack_floor(2 * layers, K, float(np.abs(R).max())))
    err = float(np.abs(got - R).max())
    print(f"{name}: grad-attention max |diff| {err:.2e} (bound {bound:.2e})")
    # far above any rounding bound: a map this close to I would prove nothing
    if float(np.abs(R - np.eye(T)).max()) < 1e-4:
        fail(f"{name}: grad-attention is the identity: the check would prove nothing")
    if err > bound:
        fail(f"{name}: grad-attention differs by {err:.3e} > {bound:.3e}")


def check_lm_loss(name, folder, model, T, vocab):
    """attnlab-cli lm-loss (the training step's loss and backward) against transformers: the loss of
    model(ids, labels=ids) (ForCausalLMLoss: the labels shifted by one, the mean over T - 1
    positions) and autograd's gradient of every parameter, named and laid out as the folder stores
    them (GPT-2's Conv1D [in, out] and fused c_attn, Phi-3's fused qkv_proj / gate_up_proj)."""
    ids = [int(x) for x in np.random.default_rng(5).integers(0, vocab, T)]

    def loss_grads(m):
        m.eval()  # no dropout, as lm-loss
        m.zero_grad(set_to_none=True)
        out = m(input_ids=torch.tensor([ids]), labels=torch.tensor([ids]))
        out.loss.backward()
        return float(out.loss), {n: p.grad.double().numpy() for n, p in m.named_parameters() if p.grad is not None}

    try:
        L64, G64 = loss_grads(copy.deepcopy(model).double())
        L32, G32 = loss_grads(copy.deepcopy(model).float())
    except RuntimeError:  # as reference_pair: the float32 model, and the perturbed one for float32's error
        L64, G64 = loss_grads(copy.deepcopy(model).float())
        L32, G32 = loss_grads(perturbed(model))
    with tempfile.TemporaryDirectory() as d:
        gout = os.path.join(d, "g.safetensors")
        j = json.loads(run(["lm-loss", "--model", folder, "--ids", ",".join(map(str, ids)), "--grad-out", gout,
                            "--json"]).stdout)
        got = load_safetensors(gout)
    _, _, layers, K = decoder_floors(model, T, np.zeros(1))
    K = max(K, vocab)  # the LM head's softmax runs over the vocabulary
    if j["scored"] != T - 1:
        fail(f"{name}: lm-loss scored {j['scored']} positions, transformers {T - 1}")
    # the loss: a mean of -log p, each through the stack and the head (layers + 1 reductions)
    bound = oracle_bound(L32, L64, stack_floor(layers + 1, K, abs(L64)))
    err = abs(j["loss"] - L64)
    worst = (0.0, "")
    if err > bound:
        fail(f"{name}: lm-loss {j['loss']:.8f}, transformers {L64:.8f} (|diff| {err:.2e} > {bound:.2e})")
    if set(got) != set(G64):
        fail(f"{name}: lm-loss gradients name {sorted(set(got) ^ set(G64))[:6]} that transformers' parameters do not "
             "(or miss them)")
    for n in sorted(set(got) & set(G64)):
        if got[n].shape != G64[n].shape:
            fail(f"{name}: gradient {n} has shape {got[n].shape}, transformers' {G64[n].shape}")
            continue
        # the backward doubles the forward's reductions (2 L blocks, and the head)
        b = oracle_bound(G32[n], G64[n], stack_floor(2 * layers + 1, K, float(np.abs(G64[n]).max())))
        e = float(np.abs(got[n] - G64[n]).max())
        worst = max(worst, (e / b, n))
        if e > b:
            fail(f"{name}: gradient {n} differs by {e:.3e} > {b:.3e}")
    if max(float(np.abs(g).max()) for g in G64.values()) < 1e-6:
        fail(f"{name}: every gradient is ~0: the check would prove nothing")
    print(f"{name}: lm-loss {j['loss']:.6f} (|diff| {err:.2e}, bound {bound:.2e}); {len(got)} gradients, worst "
          f"{worst[0]:.0%} of its bound ({worst[1]})")


def check_fine_tune(name, folder, model, cls, root, vocab):
    """train --objective lm --init FOLDER --data TEXT: a few steps on a text, saved as a Hugging Face
    folder of the same kind; transformers' from_pretrained opens it and gives attnlab's
    probabilities and hidden states (compare_decoder), and its weights moved."""
    text = os.path.join(root, name.split()[0] + "-text.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(corpus()[:400]))
    out = os.path.join(root, name.split()[0] + "-tuned")
    r = run(["train", "--objective", "lm", "--init", folder, "--data", text, "--seq", "32", "--steps", "4",
             "--batch", "4", "--lr", "1e-3", "--out", out, "--quiet"])
    tuned = cls.from_pretrained(out, attn_implementation="eager").eval()
    before = dict(model.named_parameters())
    moved = max(float((p - before[n]).abs().max()) for n, p in tuned.named_parameters())
    print(f"{name}: fine-tuned 4 steps ({r.stdout.strip().splitlines()[-1] if r.stdout.strip() else 'quiet'}); "
          f"largest weight change {moved:.2e}")
    if moved < 1e-5:
        fail(f"{name}: fine-tuning left the weights as they were (largest change {moved:.2e})")
    compare_decoder(name + " fine-tuned, opened by transformers", out, tuned, [9], vocab)


def check_trained_export(root):
    """train --objective lm --hf: a decoder trained here from scratch, saved as a Hugging Face folder.
    transformers' from_pretrained opens it and gives attnlab's probabilities and hidden states
    (compare_decoder), and its tokenizer.json (loaded by PreTrainedTokenizerFast from the folder's
    tokenizer_config.json) gives attnlab's ids on strings that test the word tokenizer's rules."""
    texts = ["w1 w2 | w3", "W1  w2\t(w3)|W4\n", "don't  stop! w1,w2", "h\u00e9llo W\u00c9 w5", "#w1## {w2}~",
             "w1\u00a0w2", "   ", "[PAD] w1 [UNK]"]
    for arch, cls, flags in [("gpt2", GPT2LMHeadModel, ["--ff", "48"]),
                             ("llama", LlamaForCausalLM, ["--ff", "0", "--kv-heads", "2"])]:
        out = os.path.join(root, "trained-" + arch)
        run(["train", "--objective", "lm", "--task", "reverse", "--task-seq", "6", "--task-vocab", "30", "--arch", arch,
             "--layers", "2", "--heads", "4", "--dim", "32", *flags, "--steps", "30", "--n", "300", "--hf", "--out",
             out, "--quiet"])
        name = f"a {arch}-style decoder trained here ({' '.join(flags)}), saved with --hf"
        model = cls.from_pretrained(out, attn_implementation="eager").eval()
        compare_decoder(name, out, model, [7, 13], 30)
        tok = transformers.AutoTokenizer.from_pretrained(out)
        for text in texts:
            want = tok(text, add_special_tokens=True)["input_ids"]
            got = json.loads(run(["forward", "--model", out, "--text", text, "--json"], check=False).stdout or "{}")
            if not want and not got:
                continue  # white space only: no tokens on either side (attnlab refuses an empty input)
            if got.get("ids") != want:
                fail(f"{name}: tokenizer on {text!r}: attnlab {got.get('ids')} vs transformers {want}")
        print(f"{name}: transformers opens it; {len(texts)} strings tokenized alike")
    # a character model of a text (train --objective lm --data, --tokenizer char): its tokenizer.json
    # (white-space runs to one space and trimmed, a piece per code point, WordPiece, Fuse)
    text_file = os.path.join(root, "chars.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(("Hello,\tWorld!\n\n  caf\u00e9 \u4e2d\u6587 a\u00a0b \x0b\x0c\r end. " * 30) + "x" * 50)
    out = os.path.join(root, "trained-chars")
    run(["train", "--objective", "lm", "--data", text_file, "--seq", "24", "--arch", "gpt2", "--layers", "1",
         "--heads", "2", "--dim", "16", "--ff", "32", "--steps", "10", "--hf", "--out", out, "--quiet"])
    name = "a character model of a text, saved with --hf"
    model = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
    compare_decoder(name, out, model, [7, 13], model.config.vocab_size)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    char_texts = ["Hello, World!", "  \t lead and trail \n\r ", "a\r\n\r\nb\x0b\x0cc", "caf\u00e9\u4e2d Z \U0001F642",
                  "a\u00a0b", "x", "HHH,,,", "\u2028line\u0085sep"]
    for text in char_texts:
        want = tok(text, add_special_tokens=True)["input_ids"]
        got = json.loads(run(["forward", "--model", out, "--text", text, "--json"], check=False).stdout or "{}")
        if got.get("ids") != want:
            fail(f"{name}: tokenizer on {text!r}: attnlab {got.get('ids')} vs transformers {want}")
    if tok.decode(tok("Hello, World")["input_ids"]) != "Hello, World":
        fail(f"{name}: transformers decodes {tok.decode(tok('Hello, World')['input_ids'])!r}")
    print(f"{name}: transformers opens it; {len(char_texts)} strings tokenized alike, decoded without spaces")
    check_learned_bpe(root)


def check_learned_bpe(root):
    """train --objective lm --data --tokenizer bpe: the byte-level BPE learned from the text is the one
    tokenizers' BpeTrainer learns from it (the same vocabulary with the same ids, the same merges in the
    same order), and transformers opens the folder with attnlab's ids and probabilities."""
    with open(os.path.join(REPO, "resources", "data", "dhammapada.txt"), encoding="utf-8") as f:
        text = f.read()
    text += "\n\u6771\u4eac caf\u00e9 na\u00efve \U0001F642 \t tabs  and   runs 12345 it's we'll\n" * 20
    text_file = os.path.join(root, "bpe.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(text)
    out = os.path.join(root, "trained-bpe")
    run(["train", "--objective", "lm", "--data", text_file, "--tokenizer", "bpe", "--vocab-size", "700",
         "--min-count", "2", "--seq", "16", "--arch", "gpt2", "--layers", "1", "--heads", "2", "--dim", "16",
         "--ff", "32", "--steps", "5", "--out", out, "--quiet"])
    name = "a byte-level BPE learned from the Dhammapada (--tokenizer bpe)"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer)
    want = json.loads(tok.to_str())["model"]
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        got = json.load(f)["model"]
    pairs = lambda merges: [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]  # noqa: E731
    if got["vocab"] != want["vocab"]:
        diff = sorted(set(got["vocab"].items()) ^ set(want["vocab"].items()), key=lambda kv: kv[1])[:6]
        fail(f"{name}: vocabulary differs from tokenizers' ({len(got['vocab'])} vs {len(want['vocab'])}): {diff}")
    elif pairs(got["merges"]) != pairs(want["merges"]):
        at = next(i for i, (a, b) in enumerate(zip(pairs(got["merges"]), pairs(want["merges"]))) if a != b)
        fail(f"{name}: merge {at} differs: attnlab {pairs(got['merges'])[at]} vs tokenizers "
             f"{pairs(want['merges'])[at]}")
    model = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
    compare_decoder(name, out, model, [7, 13], model.config.vocab_size)
    fast = transformers.AutoTokenizer.from_pretrained(out)
    strings = ["Hello, World!", "  lead and trail \n\r ", "The mind is wayward; caf\u00e9 \u4e2d\U0001F642",
               "<|endoftext|>after", "x", "it's we'll THEY'RE 3.14"]
    for s in strings:
        ids = fast(s, add_special_tokens=True)["input_ids"]
        got_ids = json.loads(run(["forward", "--model", out, "--text", s, "--json"], check=False).stdout or "{}")
        if got_ids.get("ids") != ids:
            fail(f"{name}: tokenizer on {s!r}: attnlab {got_ids.get('ids')} vs transformers {ids}")
        if fast.decode(ids) != s:
            fail(f"{name}: transformers decodes {s!r} as {fast.decode(ids)!r}")
    print(f"{name}: {len(want['vocab'])} tokens and {len(want['merges'])} merges as tokenizers' BpeTrainer learns "
          f"them; transformers opens the folder; {len(strings)} strings tokenized alike")


def randomize(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def save(model, folder, tok):
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(os.path.join(folder, "tokenizer.json"))


def expect_error(name, folder, needle):
    p = run(["forward", "--model", folder, "--text", "hello"], check=False)
    if p.returncode != 2 or needle not in p.stderr:
        fail(f"bad folder {name}: exit {p.returncode}, stderr {p.stderr.strip()!r} (want {needle!r})")
    else:
        print(f"bad folder {name}: {p.stderr.strip()}")


def hook_activations(model, ids):
    """TransformerLens's named activations of one forward of a transformers GPT-2 or Llama-family
    model, taken with PyTorch forward hooks on transformers' own modules (what a notebook writes
    today): {name: array}, shapes without the batch axis, per-head values as [T, heads, d_head]."""
    c = model.config
    base = model.transformer if hasattr(model, "transformer") else getattr(model, "model", model)
    gpt2 = hasattr(base, "h")
    E, H = c.hidden_size, c.num_attention_heads
    D = getattr(c, "head_dim", None) or E // H
    KV = getattr(c, "num_key_value_heads", None) or H
    T = len(ids)
    acts, handles, rope = {}, [], {}

    def keep(name, shape=None):
        def put(x):
            x = x[0] if isinstance(x, tuple) else x
            x = x[0].detach().double()
            acts[name] = (x.reshape(shape) if shape else x).numpy()
        return put

    def out_hook(module, name, shape=None):
        f = keep(name, shape)
        handles.append(module.register_forward_hook(lambda m, i, o: f(o)))

    def in_hook(module, name, shape=None):
        f = keep(name, shape)
        handles.append(module.register_forward_pre_hook(lambda m, i: f(i)))

    blocks = base.h if gpt2 else base.layers
    out_hook(base.wte if gpt2 else base.embed_tokens, "hook_embed")
    if gpt2:
        out_hook(base.wpe, "hook_pos_embed")
    for l, blk in enumerate(blocks):
        b = f"blocks.{l}."
        in_hook(blk, b + "hook_resid_pre")
        out_hook(blk, b + "hook_resid_post")
        if gpt2:
            out_hook(blk.ln_1, b + "ln1.hook_normalized")
            def split(m, i, o, b=b):  # c_attn: q, k, v side by side
                q, k, v = o[0].detach().double().split(E, dim=-1)
                for n, t in (("q", q), ("k", k), ("v", v)):
                    acts[b + "attn.hook_" + n] = t.reshape(T, H, D).numpy()
            handles.append(blk.attn.c_attn.register_forward_hook(split))
            in_hook(blk.attn.c_proj, b + "attn.hook_z", (T, H, D))
            out_hook(blk.attn.c_proj, b + "hook_attn_out")
            in_hook(blk.ln_2, b + "hook_resid_mid")
            out_hook(blk.ln_2, b + "ln2.hook_normalized")
            out_hook(blk.mlp.c_fc, b + "mlp.hook_pre")
            in_hook(blk.mlp.c_proj, b + "mlp.hook_post")
            out_hook(blk.mlp, b + "hook_mlp_out")
        else:
            at = blk.self_attn
            out_hook(blk.input_layernorm, b + "ln1.hook_normalized")
            out_hook(at.q_proj, b + "attn.hook_q", (T, H, D))
            out_hook(at.k_proj, b + "attn.hook_k", (T, KV, D))
            out_hook(at.v_proj, b + "attn.hook_v", (T, KV, D))
            if hasattr(at, "rotary_emb"):  # transformers 4.40: each attention has its rotary module
                handles.append(at.rotary_emb.register_forward_hook(
                    lambda m, i, o: rope.__setitem__("cos_sin", o)))
            in_hook(at.o_proj, b + "attn.hook_z", (T, H, D))
            sandwich = hasattr(blk, "pre_feedforward_layernorm")  # Gemma 2: a norm on each output too
            # TransformerLens's hook_attn_out / hook_mlp_out: what is added to the stream (after ln1_post / ln2_post)
            out_hook(blk.post_attention_layernorm if sandwich else at.o_proj, b + "hook_attn_out")
            ln2 = blk.pre_feedforward_layernorm if sandwich else blk.post_attention_layernorm
            in_hook(ln2, b + "hook_resid_mid")
            out_hook(ln2, b + "ln2.hook_normalized")
            out_hook(blk.mlp.gate_proj, b + "mlp.hook_pre")
            out_hook(blk.mlp.up_proj, b + "mlp.hook_pre_linear")
            in_hook(blk.mlp.down_proj, b + "mlp.hook_post")
            out_hook(blk.post_feedforward_layernorm if sandwich else blk.mlp, b + "hook_mlp_out")
    if not gpt2 and hasattr(base, "rotary_emb"):  # transformers 4.48 and 5.x: one rotary module per model
        handles.append(base.rotary_emb.register_forward_hook(lambda m, i, o: rope.__setitem__("cos_sin", o)))
    out_hook(base.ln_f if gpt2 else base.norm, "ln_final.hook_normalized")
    try:
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    if not gpt2:  # transformers' own rotation (apply_rotary_pos_emb) of the hooked q and k
        cos, sin = rope["cos_sin"]
        for l in range(len(blocks)):
            b = f"blocks.{l}."
            q = torch.tensor(acts[b + "attn.hook_q"]).to(cos.dtype).transpose(0, 1)[None]
            k = torch.tensor(acts[b + "attn.hook_k"]).to(cos.dtype).transpose(0, 1)[None]
            rq, rk = transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
            acts[b + "attn.hook_rot_q"] = rq[0].transpose(0, 1).double().numpy()
            acts[b + "attn.hook_rot_k"] = rk[0].transpose(0, 1).double().numpy()
    for l, a in enumerate(out.attentions):
        acts[f"blocks.{l}.attn.hook_pattern"] = a[0].detach().double().numpy()
        # TransformerLens's hook_attn_scores: q . k / sqrt(d_head) from the hooked (rotated) q and
        # k, each query head on its key/value group (repeat_kv), -inf where the causal mask blocks
        b = f"blocks.{l}."
        q = acts[b + ("attn.hook_q" if gpt2 else "attn.hook_rot_q")]
        k = np.repeat(acts[b + ("attn.hook_k" if gpt2 else "attn.hook_rot_k")], H // KV, axis=1)
        # (Gemma 2: scaled by query_pre_attn_scalar^-1/2, soft-capped, and a window on its sliding layers)
        scale = getattr(c, "query_pre_attn_scalar", None) or D
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(scale)
        cap = getattr(c, "attn_logit_softcapping", None)
        if cap:
            scores = np.tanh(scores / cap) * cap
        scores[:, np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
        if (getattr(c, "layer_types", None) or [""] * (l + 1))[l] == "sliding_attention" and c.sliding_window:
            scores[:, np.tril(np.ones((T, T), dtype=bool), -c.sliding_window)] = -np.inf
        acts[b + "attn.hook_attn_scores"] = scores
    return acts


def check_hooks(name, folder, model, T, vocab):
    """attnlab-cli forward --cache '*' against hook_activations: every named activation, within
    the float32 bound of the computation that leads to it (its magnitude, the layers, the longest
    reduction); and the names are the same set, so a hook point added on one side only fails."""
    model.eval()
    ids = [int(x) for x in np.random.default_rng(5).integers(0, vocab, T)]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cache.npz")
        j = json.loads(run(["forward", "--model", folder, "--ids", ",".join(map(str, ids)), "--cache", "*",
                            "--cache-out", out, "--json"]).stdout)
        z = np.load(out)
        got = {k: z[k] for k in z.files}
    listed = run(["forward", "--model", folder, "--list-hooks"]).stdout.split()
    r32, r = reference_pair(model, lambda m: hook_activations(m, ids))
    if set(got) != set(r) or set(listed) != set(r) or sorted(j["cache"]) != sorted(got):
        fail(f"{name}: named activations differ: attnlab only {sorted(set(got) - set(r))}, transformers only "
             f"{sorted(set(r) - set(got))}, --list-hooks {len(listed)}, --json {len(j['cache'])}")
        return
    worst = WorstShare("a")
    _, _, layers, K = decoder_floors(model, T, r["ln_final.hook_normalized"])
    for k, want in r.items():
        if got[k].shape != want.shape:
            fail(f"{name}: {k} has shape {got[k].shape}, transformers' {want.shape}")
            continue
        if k.endswith("hook_attn_scores"):  # the blocked keys: -inf on both sides, then the rest compared
            blocked = np.isneginf(want)
            if not np.array_equal(np.isneginf(got[k]), blocked):
                fail(f"{name}: {k}: the -inf (blocked) entries differ from the causal mask's")
                continue
            got[k], want, r32[k] = (np.where(blocked, 0.0, x) for x in (got[k], want, r32[k]))
        before = worst.worst["a"][0]
        worst.note("a", got[k], want, r32[k], stack_floor(layers, K, float(np.abs(want).max())))
        if worst.worst["a"][0] > before:
            worst_name = k
    print(f"{name}: {len(r)} named activations (hooks) vs transformers' modules: worst {worst_name} "
          f"{worst.summary({'a': 'max |diff|'})}")
    for msg in worst.failed({"a": worst_name}):
        fail(f"{name}: {msg}")


def torch_patching(model, clean, corrupted, answer, wrong, what):
    """Activation patching written as a user writes it today: PyTorch forward hooks on
    transformers' modules put each clean activation into the corrupted run (TransformerLens's
    get_act_patch_resid_pre / attn_out / mlp_out / z semantics), normalised as attnlab reports it."""
    base = model.transformer if hasattr(model, "transformer") else model.model
    gpt2 = hasattr(base, "h")
    blocks = base.h if gpt2 else base.layers
    dtype = next(model.parameters()).dtype
    acts = hook_activations(model, clean)
    E, H = model.config.hidden_size, model.config.num_attention_heads
    D = E // H
    T = len(clean)

    def metric(ids, register=None):
        handle = register() if register else None
        try:
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        finally:
            if handle:
                handle.remove()
        return float(logits[answer] - logits[wrong])

    m_clean, m_corr = metric(clean), metric(corrupted)
    L = len(blocks)
    cols = H if what in ("z", "pattern") else T
    out = np.zeros((L, cols))
    for l, blk in enumerate(blocks):
        proj = blk.attn.c_proj if gpt2 else blk.self_attn.o_proj
        value = torch.tensor(acts[f"blocks.{l}." + {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out",
                                                     "mlp_out": "hook_mlp_out", "z": "attn.hook_z",
                                                     "pattern": "attn.hook_pattern"}[what]]).to(dtype)
        for j in range(cols):
            def register(j=j, blk=blk, proj=proj, value=value):
                if what == "resid_pre":
                    def pre(m, i):
                        x = i[0].clone()
                        x[0, j] = value[j]
                        return (x,) + tuple(i[1:])
                    return blk.register_forward_pre_hook(pre)
                if what == "pattern":  # GPT-2's eager attention: attn_dropout(softmax(...)) is the pattern
                    def post_p(m, i, o):
                        o = o.clone()
                        o[0, j] = value[j]
                        return o
                    return blk.attn.attn_dropout.register_forward_hook(post_p)
                if what == "z":
                    def pre_z(m, i):
                        x = i[0].clone()
                        x[0, :, j * D:(j + 1) * D] = value[:, j, :]
                        return (x,) + tuple(i[1:])
                    return proj.register_forward_pre_hook(pre_z)
                module = proj if what == "attn_out" else blk.mlp
                def post(m, i, o):
                    o = o.clone()
                    o[0, j] = value[j]
                    return o
                return module.register_forward_hook(post)
            out[l, j] = (metric(corrupted, register) - m_corr) / (m_clean - m_corr)
    return {"values": out, "span": abs(m_clean - m_corr)}


def pattern_hookable(model):
    """Whether transformers' attention passes its probabilities through a module a forward hook can
    replace them at: GPT-2's attn_dropout in 4.40; 5.x (and Llama) drop out with a function."""
    if not hasattr(model, "transformer"):
        return False
    fired = []
    h = model.transformer.h[0].attn.attn_dropout.register_forward_hook(lambda m, i, o: fired.append(1))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2]]))
    finally:
        h.remove()
    return bool(fired)


def check_patching(name, folder, model, T, vocab):
    """attnlab-cli patch against torch_patching, every entry of every kind, within the float32
    bound of a logit difference divided by the clean-corrupted span."""
    model.eval()
    rng = np.random.default_rng(8)
    clean = [int(x) for x in rng.integers(0, vocab, T)]
    corrupted = list(clean)
    corrupted[T // 2] = (clean[T // 2] + 7) % vocab  # one token changed, as in the IOI-style setups
    answer, wrong = 3, 11
    worst = WorstShare("a")
    layers = model.config.num_hidden_layers
    K = max(model.config.hidden_size, T, getattr(model.config, "intermediate_size", None) or 4 * model.config.hidden_size)
    # the pattern: where transformers' attention has a module to hook it (pattern_hookable)
    kinds = ("resid_pre", "attn_out", "mlp_out", "z") + (("pattern",) if pattern_hookable(model) else ())
    for what in kinds:
        j = json.loads(run(["patch", "--model", folder, "--clean-ids", ",".join(map(str, clean)), "--corrupted-ids",
                            ",".join(map(str, corrupted)), "--answer-id", str(answer), "--wrong-id", str(wrong),
                            "--what", what, "--json"]).stdout)
        got = np.array(j["values"]).reshape(j["shape"])
        r32, r = reference_pair(model, lambda m: torch_patching(m, clean, corrupted, answer, wrong, what))
        if got.shape != r["values"].shape:
            fail(f"{name}: patch --what {what} shape {got.shape} vs {r['values'].shape}")
            continue
        # a logit difference: one more reduction of hidden-size terms past the layers, of logit
        # magnitude, over the span it is divided by
        floor = 2 * stack_floor(layers + 1, K, max(abs(j["clean_logit_diff"]), abs(j["corrupted_logit_diff"]), 1.0))
        worst.note("a", got, r["values"], r32["values"], floor / r["span"])
        if what == "resid_pre":  # the one changed position at layer 0 restores everything
            if abs(got[0, T // 2] - 1) > 1e-6:
                fail(f"{name}: resid_pre at layer 0, the changed position, restored {got[0, T // 2]}, not 1")
    print(f"{name}: activation patching ({', '.join(kinds)}) vs PyTorch hooks on transformers: "
          f"{worst.summary({'a': 'max |diff|'})}")
    for msg in worst.failed({"a": "patching"}):
        fail(f"{name}: {msg}")


def torch_attribution(model, clean, corrupted, answer, wrong, what):
    """Attribution patching written with PyTorch autograd on transformers' modules (Nanda 2023;
    Syed et al. 2023): (a_clean - a_corrupted) . d m / d a at the corrupted run, summed over one
    position (or one head's columns at every position), over m(clean) - m(corrupted)."""
    base = model.transformer if hasattr(model, "transformer") else model.model
    gpt2 = hasattr(base, "h")
    blocks = base.h if gpt2 else base.layers
    dtype = next(model.parameters()).dtype
    key = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
           "z": "attn.hook_z", "pattern": "attn.hook_pattern"}[what]
    acts = hook_activations(model, clean)
    E, H = model.config.hidden_size, model.config.num_attention_heads
    D, T = E // H, len(clean)
    with torch.no_grad():
        lc = model(input_ids=torch.tensor([clean])).logits[0, -1]
    m_clean = float(lc[answer] - lc[wrong])
    kept, handles = {}, []

    def keep(l, t):
        t.retain_grad()
        kept[l] = t

    for l, blk in enumerate(blocks):
        proj = blk.attn.c_proj if gpt2 else blk.self_attn.o_proj
        if what == "resid_pre":
            handles.append(blk.register_forward_pre_hook(lambda m, i, l=l: keep(l, i[0])))
        elif what == "z":
            handles.append(proj.register_forward_pre_hook(lambda m, i, l=l: keep(l, i[0])))
        elif what == "pattern":
            handles.append(blk.attn.attn_dropout.register_forward_hook(lambda m, i, o, l=l: keep(l, o)))
        else:
            module = proj if what == "attn_out" else blk.mlp
            handles.append(module.register_forward_hook(lambda m, i, o, l=l: keep(l, o)))
    try:
        with torch.enable_grad():
            logits = model(input_ids=torch.tensor([corrupted])).logits[0, -1]
            metric = logits[answer] - logits[wrong]
            metric.backward()
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    m_corr = float(metric)
    cols = H if what in ("z", "pattern") else T
    out = np.zeros((len(blocks), cols))
    for l in range(len(blocks)):
        a = kept[l][0].detach().double().numpy()
        g = kept[l].grad[0].double().numpy()
        if what == "pattern":  # [heads, T, T]
            out[l] = ((acts[f"blocks.{l}.{key}"] - a) * g).sum(axis=(1, 2))
            continue
        delta = acts[f"blocks.{l}.{key}"].reshape(T, -1) - a
        prod = delta * g
        out[l] = prod.reshape(T, H, D).sum(axis=(0, 2)) if what == "z" else prod.sum(axis=1)
    return {"values": out / (m_clean - m_corr), "span": abs(m_clean - m_corr)}


def check_attribution(name, folder, model, T, vocab):
    """attnlab-cli patch --method attribution against torch_attribution, every entry of every
    kind, within the float32 bound of a logit difference's gradient over the span."""
    model.eval()
    rng = np.random.default_rng(9)
    clean = [int(x) for x in rng.integers(0, vocab, T)]
    corrupted = list(clean)
    corrupted[T // 2] = (clean[T // 2] + 5) % vocab
    answer, wrong = 4, 10
    worst = WorstShare("a")
    layers = model.config.num_hidden_layers
    K = max(model.config.hidden_size, T, getattr(model.config, "intermediate_size", None) or 4 * model.config.hidden_size)
    kinds = ("resid_pre", "attn_out", "mlp_out", "z") + (("pattern",) if pattern_hookable(model) else ())
    for what in kinds:
        j = json.loads(run(["patch", "--model", folder, "--clean-ids", ",".join(map(str, clean)), "--corrupted-ids",
                            ",".join(map(str, corrupted)), "--answer-id", str(answer), "--wrong-id", str(wrong),
                            "--what", what, "--method", "attribution", "--json"]).stdout)
        got = np.array(j["values"]).reshape(j["shape"])
        r32, r = reference_pair(model, lambda m: torch_attribution(m, clean, corrupted, answer, wrong, what))
        if got.shape != r["values"].shape:
            fail(f"{name}: patch --method attribution --what {what} shape {got.shape} vs {r['values'].shape}")
            continue
        # a forward and a backward through the layers, then a sum of T * width products, of logit magnitude
        floor = 4 * stack_floor(2 * layers + 2, K, max(abs(j["clean_logit_diff"]), abs(j["corrupted_logit_diff"]), 1.0))
        worst.note("a", got, r["values"], r32["values"], floor / r["span"])
    print(f"{name}: attribution patching ({', '.join(kinds)}) vs PyTorch autograd on transformers: "
          f"{worst.summary({'a': 'max |diff|'})}")
    for msg in worst.failed({"a": "attribution patching"}):
        fail(f"{name}: {msg}")


def write_sae(folder, arch, hook, d_in, d_sae, norm, seed, k=None, rescale=False):
    """A random sparse autoencoder saved as SAELens 6 saves one (cfg.json with metadata.hook_name,
    sae_weights.safetensors); returns its weights as float64 tensors."""
    g = torch.Generator().manual_seed(seed)
    w = {"W_enc": torch.randn(d_in, d_sae, generator=g, dtype=torch.float64) / d_in ** 0.5,
         "b_enc": torch.randn(d_sae, generator=g, dtype=torch.float64) * 0.1,
         "W_dec": torch.randn(d_sae, d_in, generator=g, dtype=torch.float64) / d_sae ** 0.5,
         "b_dec": torch.randn(d_in, generator=g, dtype=torch.float64) * 0.1}
    if arch == "jumprelu":
        w["threshold"] = torch.rand(d_sae, generator=g, dtype=torch.float64) * 0.3
    w = {n: t.float().double() for n, t in w.items()}  # what the float32 file holds
    cfg = {"architecture": arch, "d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": norm,
           "reshape_activations": "hook_z" if hook.endswith("hook_z") else "none",
           "metadata": {"hook_name": hook, "sae_lens_version": "6.5.0", "model_name": "random"}}
    if arch == "topk":
        cfg["k"], cfg["rescale_acts_by_decoder_norm"] = k, rescale
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(cfg, f)
    save_safetensors(os.path.join(folder, "sae_weights.safetensors"), w)
    return cfg, w


def torch_sae(cfg, w, x):
    """SAELens's encode and decode (saes/sae.py, standard_sae.py, jumprelu_sae.py, topk_sae.py)
    written out in PyTorch on rows x [T, d_in]: (features, reconstruction function of features)."""
    norm = cfg["normalize_activations"]
    if norm == "constant_norm_rescale":
        coeff = cfg["d_in"] ** 0.5 / x.norm(dim=-1, keepdim=True)
        n_in, n_out = (lambda v: v * coeff), (lambda v: v / coeff)
    elif norm == "layer_norm":
        mu = x.mean(dim=-1, keepdim=True)
        std = (x - mu).std(dim=-1, keepdim=True)
        n_in, n_out = (lambda v: (v - mu) / (std + 1e-5)), (lambda v: v * std + mu)
    else:
        n_in = n_out = lambda v: v
    sae_in = n_in(x) - w["b_dec"] * cfg["apply_b_dec_to_input"]
    pre = sae_in @ w["W_enc"] + w["b_enc"]
    dec_norm = w["W_dec"].norm(dim=-1)
    rescale = cfg.get("rescale_acts_by_decoder_norm", False)
    if cfg["architecture"] == "topk":
        if rescale:
            pre = pre * dec_norm
        vals, idx = torch.topk(pre, k=cfg["k"], dim=-1)
        f = torch.zeros_like(pre).scatter_(-1, idx, vals.relu())
    elif cfg["architecture"] == "jumprelu":
        f = pre.relu() * (pre > w["threshold"]).to(pre.dtype)
    else:
        f = pre.relu()

    def decode(feats):
        if rescale:
            feats = feats / dec_norm
        return n_out(feats @ w["W_dec"] + w["b_dec"])
    return f, decode


def check_sae(name, folder, model, T, vocab, root):
    """attnlab-cli sae against torch_sae on transformers' own activations: the features of three
    random SAEs (standard on resid_pre, jumprelu with layer_norm on hook_z, topk with
    constant_norm_rescale and decoder-norm rescaling on mlp_out), and the logits with a feature
    clamped (the reconstruction error added back, SAELens's use_error_term) put in with a forward
    hook; clamping a feature to its own value changes no logit."""
    model.eval()
    gpt2 = hasattr(model, "transformer")
    E = model.config.hidden_size
    ids = [int(x) for x in np.random.default_rng(12).integers(0, vocab, T)]
    worst = WorstShare("f", "l")
    layers = model.config.num_hidden_layers
    K = max(E, T, getattr(model.config, "intermediate_size", None) or 4 * E)
    cases = [("standard", "blocks.1.hook_resid_pre", "none", None, False),
             ("jumprelu", "blocks.0.attn.hook_z", "layer_norm", None, False),
             ("topk", "blocks.0.hook_mlp_out", "constant_norm_rescale", 7, True)]
    for n, (arch, hook, norm, k, rescale) in enumerate(cases):
        d_sae = 48
        sdir = os.path.join(root, f"sae-{arch}")
        cfg, w = write_sae(sdir, arch, hook, E, d_sae, norm, 30 + n, k, rescale)
        l = int(hook.split(".")[1])
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "f.npy")
            base_run = json.loads(run(["sae", "--model", folder, "--sae", sdir, "--ids", ",".join(map(str, ids)),
                                       "--out", out, "--json"]).stdout)
            got_f = np.load(out)
        # the most active feature at the last position, clamped to 3x its value (or 2.0) there
        feat = int(np.argmax(got_f[T - 1]))
        value = float(3 * got_f[T - 1, feat]) or 2.0
        own = float(got_f[T - 2, feat])
        clamped = json.loads(run(["sae", "--model", folder, "--sae", sdir, "--ids", ",".join(map(str, ids)),
                                  "--clamp", f"{feat}={value}:{T - 1}", "--json"]).stdout)
        same = json.loads(run(["sae", "--model", folder, "--sae", sdir, "--ids", ",".join(map(str, ids)),
                               "--clamp", f"{feat}={own!r}:{T - 2}", "--json"]).stdout)
        if same["clamped_logits"] != base_run["logits"]:
            fail(f"{name}: {arch} SAE: clamping feature {feat} to its own value changed the logits")

        def reference(m):  # m: the float32 model or its float64 copy (hooks go on m's own modules)
            dt = next(m.parameters()).dtype
            mb = m.transformer if gpt2 else m.model
            blk = (mb.h if gpt2 else mb.layers)[l]
            proj = blk.attn.c_proj if gpt2 else blk.self_attn.o_proj
            acts = hook_activations(m, ids)
            x = torch.tensor(acts[hook]).reshape(T, -1).to(dt)  # the SAE in the model's precision
            f, decode = torch_sae(cfg, {n: t.to(dt) for n, t in w.items()}, x)
            g = f.clone()
            g[T - 1, feat] = value
            delta = (decode(g) - decode(f)).to(dt)  # x^(clamped) + (x - x^) = x + delta

            def add(t):
                return t + delta.reshape(t.shape[1:])[None]
            if hook.endswith("hook_resid_pre"):
                h = blk.register_forward_pre_hook(lambda mod, i: (add(i[0]),) + tuple(i[1:]))
            elif hook.endswith("hook_z"):
                h = proj.register_forward_pre_hook(lambda mod, i: (add(i[0]),) + tuple(i[1:]))
            else:
                h = blk.mlp.register_forward_hook(lambda mod, i, o: add(o))
            try:
                logits = m(input_ids=torch.tensor([ids])).logits[0, -1].double().numpy()
            finally:
                h.remove()
            return {"f": f.double().numpy(), "l": logits}
        r32, r = reference_pair(model, reference)
        worst.note("f", got_f, r["f"], r32["f"], stack_floor(layers + 1, K, float(np.abs(r["f"]).max())))
        got_l = np.array(clamped["clamped_logits"], dtype=np.float64)
        worst.note("l", got_l, r["l"], r32["l"], stack_floor(layers + 2, K, float(np.abs(r["l"]).max())))
    print(f"{name}: SAE features (standard, jumprelu + layer_norm on hook_z, topk + constant_norm_rescale) and "
          f"clamped logits vs PyTorch: {worst.summary({'f': 'features', 'l': 'clamped logits'})}")
    for msg in worst.failed({"f": "SAE features", "l": "clamped logits"}):
        fail(f"{name}: {msg}")


def check_detectors(name, folder, model, seq):
    """analyze --method induction / previous-token / duplicate-token against the same definitions
    (detectors.h) applied to transformers' own attention on the sequence attnlab read."""
    model.eval()
    worst = WorstShare("a")
    for method, score in (("induction", lambda P, S: np.mean([P[:, i, i - S + 1] for i in range(S, 2 * S)], 0)),
                          ("previous-token", lambda P, S: np.mean([P[:, i, i - 1] for i in range(1, 2 * S)], 0)),
                          ("duplicate-token", lambda P, S: np.mean([P[:, i, i - S] for i in range(S, 2 * S)], 0))):
        j = json.loads(run(["analyze", "--model", folder, "--method", method, "--seq", str(seq), "--seed", "3",
                            "--json"]).stdout)
        ids = j["ids"]
        if len(ids) != 2 * seq or ids[:seq] != ids[seq:]:
            fail(f"{name}: {method} did not read a sequence repeated twice")
            continue
        got = np.array(j["scores"]).reshape(j["shape"])

        def call(m):
            out = m(input_ids=torch.tensor([ids]), output_attentions=True)
            return np.stack([score(a[0].double().numpy(), seq) for a in out.attentions])

        r32, r = reference_pair(model, call)
        p_floor, _, _, _ = decoder_floors(model, 2 * seq, np.zeros(1))
        worst.note("a", got, r, r32, p_floor)
    print(f"{name}: head detectors (induction, previous-token, duplicate-token) vs transformers' attention: "
          f"{worst.summary({'a': 'max |diff|'})}")
    for msg in worst.failed({"a": "head detectors"}):
        fail(f"{name}: {msg}")


def torch_dla(model, ids, answer, wrong):
    """Direct logit attribution from transformers' modules: z by forward hooks (hook_activations),
    W_O, the final norm and W_U from the modules' own weights; [layers, heads + 1] and the
    model's logit difference."""
    base = model.transformer if hasattr(model, "transformer") else model.model
    gpt2 = hasattr(base, "h")
    blocks = base.h if gpt2 else base.layers
    acts = hook_activations(model, ids)
    E, H = model.config.hidden_size, model.config.num_attention_heads
    D, L = getattr(model.config, "head_dim", None) or E // H, len(blocks)
    w = lambda t: t.detach().double().numpy()  # noqa: E731
    gemma = hasattr(blocks[0], "pre_feedforward_layernorm")  # RMSNorms scale by 1 + w
    W_U = w(model.get_output_embeddings().weight)
    u = W_U[answer] - W_U[wrong]
    x = acts[f"blocks.{L - 1}.hook_resid_post"][-1]
    norm = base.ln_f if gpt2 else base.norm
    g = w(norm.weight) + (1 if gemma else 0)
    if gpt2:
        scale = np.sqrt(x.var() + norm.eps)
        f = lambda p: float(np.sum((p - p.mean()) / scale * g * u))  # noqa: E731
    else:
        scale = np.sqrt(np.mean(x * x) + (norm.eps if gemma else norm.variance_epsilon))
        f = lambda p: float(np.sum(p / scale * g * u))  # noqa: E731
    out = np.zeros((L, H + 1))
    for l, blk in enumerate(blocks):
        z = acts[f"blocks.{l}.attn.hook_z"][-1]  # [H, D]
        WO = w(blk.attn.c_proj.weight) if gpt2 else w(blk.self_attn.o_proj.weight).T  # [in = H*D, out = E]
        heads = [z[h] @ WO[h * D:(h + 1) * D] for h in range(H)]
        post = 1.0
        if gemma:  # post_attention_layernorm on the heads' sum, its scale frozen from the run
            pn = blk.post_attention_layernorm
            total = sum(heads)
            post = (w(pn.weight) + 1) / np.sqrt(np.mean(total * total) + pn.eps)
        for h in range(H):
            out[l, h] = f(post * heads[h])
        out[l, H] = f(acts[f"blocks.{l}.hook_mlp_out"][-1])
    out_m = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    if getattr(model.config, "final_logit_softcapping", None):  # the parts explain the logits before the cap
        logits = (out_m.hidden_states[-1][0, -1].double() @ model.get_output_embeddings().weight.double().T)
    else:
        logits = out_m.logits[0, -1].double()
    return {"parts": out, "diff": float(logits[answer] - logits[wrong])}


def check_dla(name, folder, model, T, vocab):
    """analyze --method logit-attribution against torch_dla entry by entry, and the parts summing
    (with the embedding and biases) to the model's own logit difference."""
    model.eval()
    ids = [int(x) for x in np.random.default_rng(9).integers(0, vocab, T)]
    answer, wrong = 5, 12
    j = json.loads(run(["analyze", "--model", folder, "--ids", ",".join(map(str, ids)), "--method",
                        "logit-attribution", "--answer-id", str(answer), "--wrong-id", str(wrong), "--json"]).stdout)
    got = np.array(j["parts"]).reshape(j["shape"])
    r32, r = reference_pair(model, lambda m: torch_dla(m, ids, answer, wrong))
    layers = model.config.num_hidden_layers
    K = max(model.config.hidden_size, T, getattr(model.config, "intermediate_size", None) or 4 * model.config.hidden_size)
    floor = stack_floor(layers + 1, K, max(np.abs(r["parts"]).max(), abs(r["diff"]), 1e-3))
    worst = WorstShare("a", "t")
    worst.note("a", got, r["parts"], r32["parts"], floor)
    worst.note("t", [j["total"], j["logit_diff"]], [r["diff"], r["diff"]], [r32["diff"], r32["diff"]], 2 * floor)
    print(f"{name}: direct logit attribution vs transformers' modules: "
          f"{worst.summary({'a': 'parts', 't': 'total and logit difference'})}")
    for msg in worst.failed({"a": "parts", "t": "total"}):
        fail(f"{name}: logit attribution {msg}")


def check_generate(name, folder, model, T, vocab, new=12):
    """generate --greedy against transformers' generate(do_sample=False) (its KV cache, float32):
    the same tokens, except where transformers' two likeliest were closer than the two float32
    passes' difference could explain (then the texts may part, and the rest is not compared). And a
    sampled run: its every step's distribution is transformers' warpers (Temperature, TopK, TopP,
    MinP, in its order) on the float64 logits of the same prefix, kept set and probabilities."""
    g = torch.Generator().manual_seed(T + 101)
    ids = torch.randint(3, vocab, (T,), generator=g).tolist()
    fresh = type(model).from_pretrained(folder, attn_implementation="eager")  # the folder, as a user opens it
    if getattr(model.config, "sliding_window", None) is not None:  # 4.40's window as the caller set it (main)
        fresh.config.sliding_window = model.config.sliding_window
    model = fresh
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, output_scores=True,
                             return_dict_in_generate=True)
    want = out.sequences[0, T:].tolist()
    j = json.loads(run(["generate", "--model", folder, "--ids", ",".join(map(str, ids)), "--max-new", str(new),
                        "--ignore-eos", "--json", "--json-top", "2"]).stdout)
    have = j["generated_ids"]
    if j["ids"] != ids + have or len(have) != new:
        fail(f"{name}: generate --json ids {j['ids']} are not the prompt plus {new} generated ids")
    for k, (a, b) in enumerate(zip(have, want)):
        if a == b:
            continue
        top2 = torch.topk(out.scores[k][0].double(), 2).values
        if float(top2[0] - top2[1]) > 1e-4:
            fail(f"{name}: greedy token {k}: attnlab {a}, transformers {b} (margin {float(top2[0] - top2[1]):.2e})")
        break
    # sampled: the warped distributions
    from transformers.generation import logits_process as lp
    settings = [(0.7, 40, 0.9, None), (1.0, 8, 1.0, None)]
    if hasattr(lp, "MinPLogitsWarper"):  # since 4.41: the 5.x run checks min-p
        settings.append((1.3, 0, 0.95, 0.05))
    for temp, k, p, mp in settings:
        flags = ["--temperature", str(temp), "--top-k", str(k), "--top-p", str(p), "--seed", "5"]
        if mp is not None:
            flags += ["--min-p", str(mp)]
        args = ["generate", "--model", folder, "--ids", ",".join(map(str, ids)), "--max-new", "4", "--ignore-eos",
                "--json", "--json-top", "0"] + flags
        j = json.loads(run(args).stdout)
        if json.loads(run(args).stdout)["ids"] != j["ids"]:
            fail(f"{name}: generate {' '.join(flags)}: two runs with one seed differ")
        warpers = lp.LogitsProcessorList()
        if temp != 1.0:
            warpers.append(lp.TemperatureLogitsWarper(temp))
        if k:
            warpers.append(lp.TopKLogitsWarper(k))
        if p < 1.0:
            warpers.append(lp.TopPLogitsWarper(p))
        if mp is not None:
            warpers.append(lp.MinPLogitsWarper(mp))
        m64 = copy.deepcopy(model).double()
        for step, st in enumerate(j["steps"]):
            prefix = j["ids"][:T + step]
            with torch.no_grad():
                try:
                    logits = m64(torch.tensor([prefix])).logits[:, -1, :].float()
                except RuntimeError:  # 4.40's sliding-window mask cannot be float64: the float32 model
                    logits = model(torch.tensor([prefix])).logits[:, -1, :]
                probs = torch.softmax(warpers(torch.tensor([prefix]), logits), dim=-1)[0]
            kept = {int(i): float(probs[i]) for i in torch.nonzero(probs > 0).flatten()}
            ours = {int(i): float(q) for i, q in st["top"]}
            if set(kept) != set(ours) or max(abs(kept[i] - ours[i]) for i in kept) > 1e-4:
                fail(f"{name}: {' '.join(flags)} step {step}: kept {sorted(ours)[:12]}... of {len(ours)}, "
                     f"transformers {sorted(kept)[:12]}... of {len(kept)}")
                break
            if st["id"] not in ours or abs(st["prob"] - ours[st["id"]]) > 1e-7:
                fail(f"{name}: {' '.join(flags)} step {step}: the chosen token {st['id']} is not one it kept")
    print(f"{name}: generate: greedy {have == want and 'equal to' or 'parts from'} transformers' generate over {new} "
          f"tokens; sampled steps' distributions equal its warpers'")


def main():
    root = tempfile.mkdtemp(prefix="attnlab-decoders-")
    try:
        strings = hard_strings()
        toks = {k: train_byte_level(k) for k in ("gpt2", "llama3", "qwen2")}
        sp = train_sentencepiece_bpe()
        V = {k: t.get_vocab_size() for k, t in toks.items()}

        # ---- models (random weights, real names and shapes)
        g = os.path.join(root, "gpt2")
        cfg = dict(vocab_size=V["gpt2"], n_embd=32, n_layer=2, n_head=4, n_positions=128, attn_implementation="eager")
        m = randomize(GPT2LMHeadModel(GPT2Config(**cfg)))
        save(m, g, toks["gpt2"])
        compare_decoder("GPT2LMHeadModel (tied)", g, m, [1, 7, 100], V["gpt2"])
        check_grad_attention("GPT2LMHeadModel (tied)", g, m, 12, V["gpt2"])
        check_lm_loss("GPT2LMHeadModel (tied)", g, m, 11, V["gpt2"])
        check_fine_tune("GPT2LMHeadModel (tied)", g, m, GPT2LMHeadModel, root, V["gpt2"])
        check_hooks("GPT2LMHeadModel (tied)", g, m, 9, V["gpt2"])
        check_patching("GPT2LMHeadModel (tied)", g, m, 6, V["gpt2"])
        check_attribution("GPT2LMHeadModel (tied)", g, m, 7, V["gpt2"])
        check_sae("GPT2LMHeadModel (tied)", g, m, 8, V["gpt2"], root)
        check_detectors("GPT2LMHeadModel (tied)", g, m, 20)
        check_dla("GPT2LMHeadModel (tied)", g, m, 8, V["gpt2"])
        check_generate("GPT2LMHeadModel (tied)", g, m, 7, V["gpt2"], new=24)
        g2 = os.path.join(root, "gpt2-untied")
        m = randomize(GPT2LMHeadModel(GPT2Config(tie_word_embeddings=False, **cfg)))
        save(m, g2, toks["gpt2"])
        compare_decoder("GPT2LMHeadModel (untied)", g2, m, [5, 64], V["gpt2"])
        check_lm_loss("GPT2LMHeadModel (untied)", g2, m, 8, V["gpt2"])
        g3 = os.path.join(root, "gpt2-base")
        m = randomize(GPT2Model(GPT2Config(**cfg)))
        save(m, g3, toks["gpt2"])
        compare_decoder("GPT2Model", g3, m, [9], V["gpt2"])

        lcfg = dict(vocab_size=V["llama3"], hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0,
                    attn_implementation="eager")
        ll = os.path.join(root, "llama")
        m = randomize(LlamaForCausalLM(LlamaConfig(**lcfg)))
        save(m, ll, toks["llama3"])
        compare_decoder("LlamaForCausalLM (GQA 8/2)", ll, m, [1, 13, 200], V["llama3"])
        check_grad_attention("LlamaForCausalLM (GQA 8/2)", ll, m, 15, V["llama3"])
        check_lm_loss("LlamaForCausalLM (GQA 8/2)", ll, m, 14, V["llama3"])
        check_fine_tune("LlamaForCausalLM (GQA 8/2)", ll, m, LlamaForCausalLM, root, V["llama3"])
        check_hooks("LlamaForCausalLM (GQA 8/2)", ll, m, 13, V["llama3"])
        check_patching("LlamaForCausalLM (GQA 8/2)", ll, m, 5, V["llama3"])
        check_attribution("LlamaForCausalLM (GQA 8/2)", ll, m, 6, V["llama3"])
        check_sae("LlamaForCausalLM (GQA 8/2)", ll, m, 9, V["llama3"], root)
        check_detectors("LlamaForCausalLM (GQA 8/2)", ll, m, 30)
        check_dla("LlamaForCausalLM (GQA 8/2)", ll, m, 7, V["llama3"])
        check_generate("LlamaForCausalLM (GQA 8/2)", ll, m, 9, V["llama3"], new=24)
        ll_bf16 = os.path.join(root, "llama-bf16")
        m.to(torch.bfloat16).save_pretrained(ll_bf16, safe_serialization=True)
        toks["llama3"].save(os.path.join(ll_bf16, "tokenizer.json"))
        m16 = LlamaForCausalLM.from_pretrained(ll_bf16, torch_dtype=torch.float32, attn_implementation="eager")
        compare_decoder("LlamaForCausalLM (bf16 file)", ll_bf16, m16, [20], V["llama3"])
        lb = os.path.join(root, "llama-base")
        m = randomize(LlamaModel(LlamaConfig(**dict(lcfg, rope_theta=500000.0))))
        save(m, lb, toks["llama3"])
        compare_decoder("LlamaModel (rope_theta 5e5)", lb, m, [17], V["llama3"])

        # Rotary scaling (rope_type), computed as transformers' ROPE_INIT_FUNCTIONS: linear and
        # dynamic exist in 4.40 (rope_scaling {"type", "factor"}); llama3, yarn and longrope since
        # 4.43, written by 5.x as rope_parameters. Longrope at T <= and > its original length (the
        # short and the long factors); dynamic only rescales past max_position_embeddings, which
        # attnlab never runs past, so there it equals default (checked as such).
        five = tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (5, 0)
        half = lcfg["hidden_size"] // lcfg["num_attention_heads"] // 2
        ropes = [("linear", {"factor": 4.0}, [19]), ("dynamic", {"factor": 2.0}, [23])]
        if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 43):
            ropes += [
                ("llama3", {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 32}, [21]),
                ("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}, [18]),
                ("yarn", {"factor": 8.0, "original_max_position_embeddings": 64, "beta_fast": 16.0, "beta_slow": 2.0,
                          "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": False}, [12]),
                ("longrope", {"short_factor": [1.0 + 0.1 * k for k in range(half)],
                              "long_factor": [1.0 + 0.9 * k for k in range(half)],
                              "original_max_position_embeddings": 16}, [9, 40]),
            ]
        for kind, params, lengths in ropes:
            extra = dict(params)
            if five:
                rope = dict(extra, rope_type=kind, rope_theta=lcfg["rope_theta"])
                cfg_kw = dict(lcfg, rope_parameters=rope)
            elif tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 43):
                cfg_kw = dict(lcfg, rope_scaling=dict(extra, rope_type=kind))
            else:  # 4.40 takes exactly {type, factor}
                cfg_kw = dict(lcfg, rope_scaling=dict(extra, type=kind))
            rf = os.path.join(root, f"llama-rope-{kind}-{len(os.listdir(root))}")
            m = randomize(LlamaForCausalLM(LlamaConfig(**cfg_kw)))
            save(m, rf, toks["llama3"])
            compare_decoder(f"LlamaForCausalLM (rope_type {kind} {sorted(params)})", rf, m, lengths, V["llama3"])

        # A head_dim set apart from hidden / heads (transformers 5.x reads it for Llama, Mistral, Qwen2
        # and Phi-3; 4.40 ignores it): narrower heads than the split here (8 heads of 4 over 64)
        if five:
            lhd = os.path.join(root, "llama-head-dim")
            m = randomize(LlamaForCausalLM(LlamaConfig(**dict(lcfg, head_dim=4))))
            save(m, lhd, toks["llama3"])
            compare_decoder("LlamaForCausalLM (head_dim 4 over hidden 64 / 8 heads)", lhd, m, [1, 21], V["llama3"])
            check_grad_attention("LlamaForCausalLM (head_dim 4 over hidden 64 / 8 heads)", lhd, m, 9, V["llama3"])

        # Phi-3: q, k, v fused as qkv_proj and gate / up as gate_up_proj (grouped-query here, so the
        # slices have two sizes), no biases; with longrope (Phi-3's 128k configs) past its original
        # length. transformers has Phi-3 since 4.41: this part runs under the 5.x venv (hf_decoders_5x).
        if hasattr(transformers, "Phi3ForCausalLM"):
            from transformers import Phi3Config, Phi3ForCausalLM
            pcfg = dict(lcfg, pad_token_id=0, bos_token_id=1, eos_token_id=2)
            ph = os.path.join(root, "phi3")
            m = randomize(Phi3ForCausalLM(Phi3Config(**pcfg)))
            save(m, ph, toks["llama3"])
            compare_decoder("Phi3ForCausalLM (GQA 8/2, fused qkv / gate_up)", ph, m, [1, 14, 90], V["llama3"])
            check_grad_attention("Phi3ForCausalLM (GQA 8/2, fused qkv / gate_up)", ph, m, 10, V["llama3"])
            check_lm_loss("Phi3ForCausalLM (GQA 8/2, fused qkv / gate_up)", ph, m, 9, V["llama3"])
            rope = {"rope_type": "longrope", "rope_theta": 10000.0,
                    "short_factor": [1.0 + 0.05 * k for k in range(half)],
                    "long_factor": [1.0 + 1.5 * k for k in range(half)], "original_max_position_embeddings": 24}
            phl = os.path.join(root, "phi3-longrope")
            m = randomize(Phi3ForCausalLM(Phi3Config(**dict(pcfg, rope_parameters=rope,
                                                              original_max_position_embeddings=24))))
            save(m, phl, toks["llama3"])
            compare_decoder("Phi3ForCausalLM (longrope)", phl, m, [20, 60], V["llama3"])
            phw = os.path.join(root, "phi3-window")
            m = randomize(Phi3ForCausalLM(Phi3Config(**dict(pcfg, sliding_window=7))))
            save(m, phw, toks["llama3"])
            compare_decoder("Phi3ForCausalLM (window 7)", phw, m, [30], V["llama3"])
        else:
            print(f"Phi3ForCausalLM: not in transformers {transformers.__version__}; checked under 5.x (hf_decoders_5x)")

        # Qwen3: RMSNorm over each head's query and key (q_norm, k_norm) before the rotation, no
        # q/k/v biases unless attention_bias; head_dim as the hidden size splits (Qwen3-1.7B, 8B,
        # 14B; 0.6B's decoupled head_dim is refused, below). Since transformers 4.51: 5.x only.
        if hasattr(transformers, "Qwen3ForCausalLM"):
            from transformers import Qwen3Config, Qwen3ForCausalLM
            q3cfg = dict(lcfg, vocab_size=V["qwen2"], head_dim=lcfg["hidden_size"] // lcfg["num_attention_heads"])
            q3 = os.path.join(root, "qwen3")
            m = randomize(Qwen3ForCausalLM(Qwen3Config(**q3cfg)))
            save(m, q3, toks["qwen2"])
            compare_decoder("Qwen3ForCausalLM (q/k norm, GQA 8/2)", q3, m, [1, 16, 70], V["qwen2"])
            check_grad_attention("Qwen3ForCausalLM (q/k norm, GQA 8/2)", q3, m, 12, V["qwen2"])
            check_lm_loss("Qwen3ForCausalLM (q/k norm, GQA 8/2)", q3, m, 10, V["qwen2"])
            q3b = os.path.join(root, "qwen3-bias-tied")
            m = randomize(Qwen3ForCausalLM(Qwen3Config(**dict(q3cfg, attention_bias=True, tie_word_embeddings=True))))
            save(m, q3b, toks["qwen2"])
            compare_decoder("Qwen3ForCausalLM (attention_bias, tied)", q3b, m, [25], V["qwen2"])
            # Qwen3-0.6B's shape: heads wider than the hidden size splits (8 heads of 16 over 64:
            # q_proj 64 -> 128, o_proj 128 -> 64), and Qwen3Config's own default of 128
            q3d = os.path.join(root, "qwen3-head-dim")
            m = randomize(Qwen3ForCausalLM(Qwen3Config(**dict(q3cfg, head_dim=16))))
            save(m, q3d, toks["qwen2"])
            compare_decoder("Qwen3ForCausalLM (head_dim 16 over hidden 64 / 8 heads)", q3d, m, [1, 15, 60], V["qwen2"])
            check_grad_attention("Qwen3ForCausalLM (head_dim 16 over hidden 64 / 8 heads)", q3d, m, 11, V["qwen2"])
            q3n = os.path.join(root, "qwen3-head-dim-default")
            cfg = dict(q3cfg)
            del cfg["head_dim"]
            m = randomize(Qwen3ForCausalLM(Qwen3Config(**dict(cfg, num_attention_heads=2, num_key_value_heads=1))))
            save(m, q3n, toks["qwen2"])
            with open(os.path.join(q3n, "config.json")) as f:
                saved = json.load(f)
            saved.pop("head_dim", None)  # the class default (128) applies when the key is absent
            with open(os.path.join(q3n, "config.json"), "w") as f:
                json.dump(saved, f)
            compare_decoder("Qwen3ForCausalLM (head_dim absent: Qwen3Config's 128)", q3n, m, [9], V["qwen2"])
        else:
            print(f"Qwen3ForCausalLM: not in transformers {transformers.__version__}; checked under 5.x (hf_decoders_5x)")

        # Gemma 2 (since transformers 4.42: 5.x only): the embedding times sqrt(hidden), RMSNorm by
        # 1 + w, a norm on each sub-layer's output too, GeGLU, scores scaled by
        # query_pre_attn_scalar^-1/2 and soft-capped, soft-capped logits, windowed layers between
        # full ones (layer_types), heads wider than the hidden size splits (4 x 16 over 48). The caps
        # are small so that they bite on these random weights (checked: without them transformers'
        # probabilities move by far more than the bound), the window short of the lengths run.
        if hasattr(transformers, "Gemma2ForCausalLM"):
            from transformers import Gemma2Config, Gemma2ForCausalLM
            gcfg = dict(vocab_size=V["llama3"], hidden_size=48, intermediate_size=80, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                        query_pre_attn_scalar=6, sliding_window=6, attn_logit_softcapping=1.5,
                        final_logit_softcapping=2.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        attn_implementation="eager")
            gm = os.path.join(root, "gemma2")
            m = randomize(Gemma2ForCausalLM(Gemma2Config(**gcfg)))
            save(m, gm, toks["llama3"])
            gname = "Gemma2ForCausalLM (GQA 4/2, head_dim 16 over 48, caps 1.5 / 2, window 6 on layers 0, 2)"
            uncapped = copy.deepcopy(m).eval()
            uncapped.config.attn_logit_softcapping = None
            uncapped.config.final_logit_softcapping = None
            for layer in uncapped.model.layers:
                layer.self_attn.attn_logit_softcapping = None
            ids = [int(x) for x in np.random.default_rng(3).integers(0, V["llama3"], 20)]
            with torch.no_grad():
                a = m(input_ids=torch.tensor([ids]), output_attentions=True)
                b = uncapped(input_ids=torch.tensor([ids]), output_attentions=True)
            moved = max(float((x - y).abs().max()) for x, y in zip(a.attentions, b.attentions))
            moved_logits = float((a.logits - b.logits).abs().max())
            print(f"{gname}: the caps move transformers' probabilities by {moved:.2e}, its logits by {moved_logits:.2e}")
            if moved < 1e-3 or moved_logits < 1e-2:
                fail(f"{gname}: the soft caps barely change this model; the check would not see them")
            compare_decoder(gname, gm, m, [1, 16, 40], V["llama3"])
            check_grad_attention(gname, gm, m, 13, V["llama3"])
            check_lm_loss(gname, gm, m, 12, V["llama3"])
            check_hooks(gname, gm, m, 11, V["llama3"])
            check_dla(gname, gm, m, 9, V["llama3"])
            check_generate(gname, gm, m, 8, V["llama3"], new=12)
            check_fine_tune(gname, gm, m, Gemma2ForCausalLM, root, V["llama3"])
            # layer_types written out (5.x) with full attention first, and no caps (null)
            gm2 = os.path.join(root, "gemma2-types")
            m = randomize(Gemma2ForCausalLM(Gemma2Config(**dict(
                gcfg, layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                attn_logit_softcapping=None, final_logit_softcapping=None, head_dim=12))))
            save(m, gm2, toks["llama3"])
            compare_decoder("Gemma2ForCausalLM (layer_types full, sliding, sliding, full; no caps)", gm2, m, [30],
                            V["llama3"])
        else:
            print(f"Gemma2ForCausalLM: not in transformers {transformers.__version__}; checked under 5.x")

        # Gemma 3's text model (since transformers 4.50: 5.x only): Gemma 2's steps with q/k norms
        # (1 + w), no score cap, a rotary base per layer kind (the full layers' scaled linearly here,
        # as Gemma 3 4B's), two sliding layers to each full one (sliding_window_pattern 3)
        if hasattr(transformers, "Gemma3ForCausalLM"):
            from transformers import Gemma3ForCausalLM, Gemma3TextConfig
            g3cfg = dict(gcfg, num_hidden_layers=6, sliding_window=5, sliding_window_pattern=3,
                         attn_logit_softcapping=None, final_logit_softcapping=None,
                         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                          "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                             "rope_theta": 1000000.0}})
            g3 = os.path.join(root, "gemma3")
            m = randomize(Gemma3ForCausalLM(Gemma3TextConfig(**g3cfg)))
            save(m, g3, toks["llama3"])
            g3name = "Gemma3ForCausalLM (q/k norm, rope 1e4 local / 1e6 linear x4 full, window 5 on 4 of 6 layers)"
            compare_decoder(g3name, g3, m, [1, 12, 45], V["llama3"])
            check_grad_attention(g3name, g3, m, 14, V["llama3"])
            check_lm_loss(g3name, g3, m, 13, V["llama3"])
            check_dla(g3name, g3, m, 10, V["llama3"])
            check_generate(g3name, g3, m, 7, V["llama3"], new=10)
        else:
            print(f"Gemma3ForCausalLM: not in transformers {transformers.__version__}; checked under 5.x")

        mi = os.path.join(root, "mistral")
        m = randomize(MistralForCausalLM(MistralConfig(**dict(lcfg, sliding_window=6))))
        save(m, mi, toks["llama3"])
        # A window of W shows a query the W keys i - W + 1 .. i since transformers 4.53
        # (masking_utils); 4.40's eager mask shows W + 1, so there the reference runs with W - 1
        # to mask what current transformers (and attnlab) mask for the saved folder's W.
        if tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (4, 53):
            m.config.sliding_window = 5
        compare_decoder("MistralForCausalLM (window 6)", mi, m, [4, 30], V["llama3"])
        check_grad_attention("MistralForCausalLM (window 6)", mi, m, 20, V["llama3"])
        check_generate("MistralForCausalLM (window 6)", mi, m, 5, V["llama3"])

        qw = os.path.join(root, "qwen2")
        m = randomize(Qwen2ForCausalLM(Qwen2Config(**dict(lcfg, vocab_size=V["qwen2"], num_key_value_heads=4,
                                                           tie_word_embeddings=True))))
        save(m, qw, toks["qwen2"])
        compare_decoder("Qwen2ForCausalLM (biases, tied)", qw, m, [3, 40], V["qwen2"])
        check_grad_attention("Qwen2ForCausalLM (biases, tied)", qw, m, 11, V["qwen2"])
        check_generate("Qwen2ForCausalLM (biases, tied)", qw, m, 8, V["qwen2"], new=24)

        # ---- tokenizers: tokenizer.json (the model folders above) and the slow files
        for kind, folder in (("gpt2", g), ("llama3", ll), ("qwen2", qw)):
            t = toks[kind]
            check_tokenizer(f"byte-level BPE ({kind}) tokenizer.json", folder, lambda s, t=t: t.encode(s).ids, strings,
                            lambda ids, t=t: t.decode(ids, skip_special_tokens=False))
            check_labels(kind, folder)
        for kind in ("gpt2", "llama3"):
            folder = os.path.join(root, f"{kind}-slow")
            shutil.copytree(g, folder, ignore=shutil.ignore_patterns("tokenizer.json"))
            toks[kind].model.save(folder)  # vocab.json + merges.txt
            fast = GPT2TokenizerFast.from_pretrained(folder)  # as a user opens the folder (4.40 and 5.x)
            check_tokenizer(f"byte-level BPE ({kind}) vocab.json + merges.txt", folder,
                            lambda s, f=fast: f(s)["input_ids"], strings,
                            lambda ids, f=fast: f.decode(ids, skip_special_tokens=False,
                                                         clean_up_tokenization_spaces=False))
        spf = os.path.join(root, "sp-bpe")
        m = randomize(LlamaForCausalLM(LlamaConfig(**dict(lcfg, vocab_size=sp.get_vocab_size()))))
        save(m, spf, sp)
        check_tokenizer("SentencePiece-style BPE (byte fallback)", spf, lambda s: sp.encode(s).ids, strings,
                        lambda ids: sp.decode(ids, skip_special_tokens=False))

        check_trained_export(root)

        # ---- bad folders
        def variant(name, edit, drop=()):
            folder = os.path.join(root, "bad-" + name)
            shutil.copytree(ll, folder)
            with open(os.path.join(folder, "config.json")) as f:
                c = json.load(f)
            edit(c)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(c, f)
            for d in drop:
                os.remove(os.path.join(folder, d))
            return folder

        expect_error("unknown model_type", variant("type", lambda c: c.update(model_type="gpt_neox")),
                     'model_type "gpt_neox" is not supported')
        expect_error("GQA heads", variant("gqa", lambda c: c.update(num_key_value_heads=3)),
                     "num_key_value_heads (3) does not divide num_attention_heads (8)")
        expect_error("rope_scaling", variant("rope", lambda c: c.update(rope_scaling={"type": "su", "factor": 2.0})),
                     'rope_type "su" is not supported')
        expect_error("rope_scaling without factor", variant("rope2", lambda c: c.update(rope_scaling={"type": "linear"})),
                     "rope_type linear needs a positive factor")
        expect_error("partial rotary", variant("rope3", lambda c: c.update(partial_rotary_factor=0.5)),
                     "partial_rotary_factor other than 1 is not supported")
        slow = os.path.join(root, "bad-merges")
        shutil.copytree(os.path.join(root, "gpt2-slow"), slow)
        os.remove(os.path.join(slow, "merges.txt"))
        expect_error("no merges.txt", slow, "vocab.json without merges.txt")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    main()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all decoder cross-checks passed")
