"""Cross-check attnlab's encoder-decoders against Hugging Face's own code (transformers 4.40.2 in the
venv scripts/attnlab.sh makes; 5.x in the hf5 venv), as hf_decoders.py does for decoders.

1. BART's tokenizer: a byte-level BPE trained here with BART's RobertaProcessing template
   (<s> A </s>, <s> A </s></s> B </s>): ids equal to tokenizers' on the suite's hard strings, and
   forward --text/--target's source and target ids equal to what transformers' tokenizer gives
   (text_target for the labels).
2. Random BART folders saved by save_pretrained: BartForConditionalGeneration (scale_embedding,
   final_logits_bias, tied head; and one untied with its own lm_head.weight) and a BartModel without
   a head, encoder and decoder of different depths and head counts. forward --ids SOURCE
   --target-ids LABELS: the decoder input equals transformers' shift_tokens_right(labels, pad,
   decoder_start_token_id); every encoder, decoder and cross-attention probability, the decoder's
   last hidden state and the next-token probabilities against transformers' eager forward in
   float64, within pyutil.oracle_bound, at 1 to 200 tokens on each side, and with a padded source
   (--mask padding; transformers' attention_mask). A BF16 folder gives what its float32 copy does.
3. What does not apply yet is a clear error with exit code 2: no --target, --target on a one-sequence
   model, --attn-out .npy, named activations, generate.
Usage: hf_seq2seq.py PATH/TO/attnlab-cli REPO_ROOT
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

import hf_decoders as hd  # the tokenizer corpus, hard strings, float64 oracles and CLI checks
import transformers
from pyutil import WorstShare, stack_floor
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import BartConfig, BartForConditionalGeneration, BartModel, PreTrainedTokenizerFast
from transformers.models.bart.modeling_bart import shift_tokens_right

torch.set_num_threads(2)
torch.manual_seed(0)
fail, run, failures = hd.fail, hd.run, hd.failures
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # BART's ids 0-4


def train_bart_tokenizer():
    """A byte-level BPE as BART's tokenizer.json holds it: ByteLevel pre-tokenizer and decoder,
    RobertaProcessing (<s>=0, </s>=2)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(hd.corpus(), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    return tok


def save(model, folder, tok):
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:  # what PreTrainedTokenizerFast reads
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}, f)


def forward_cli(folder, source, labels, padding=False, align=None):
    """align: (layers, heads) for --align-layers / --align-heads; the alignment is then returned too."""
    with tempfile.TemporaryDirectory() as d:
        a, h, al = os.path.join(d, "a.npz"), os.path.join(d, "h.npy"), os.path.join(d, "al.npy")
        args = ["forward", "--model", folder, "--ids", ",".join(map(str, source)), "--target-ids",
                ",".join(map(str, labels)), "--attn-out", a, "--out", h, "--json"]
        if align:
            args += ["--align-out", al, "--align-layers", ",".join(map(str, align[0])), "--align-heads",
                     ",".join(map(str, align[1]))]
        j = json.loads(run(args + (["--mask", "padding"] if padding else [])).stdout)
        with np.load(a) as z:
            attn = {k: z[k] for k in ("encoder", "decoder", "cross")}
        if align:
            return j, attn, np.load(h), np.load(al)
        return j, attn, np.load(h)


def compare_bart(name, folder, model, pairs, vocab, pad_source=0):
    """pairs: (source length, target length). pad_source: that many <pad> ids end each source, masked."""
    model.eval()
    worst = WorstShare("e", "d", "x", "h", "n", "a")
    names = {"e": "encoder probabilities", "d": "decoder probabilities", "x": "cross probabilities",
             "h": "decoder hidden states", "n": "next-token probabilities",
             "a": "alignment (mean cross-attention of the first and last layers' heads 0 and 1)"}
    c = model.config
    rng = np.random.default_rng(3)
    has_head = hasattr(model, "lm_head")
    for S, T in pairs:
        source = [int(x) for x in rng.integers(5, vocab, S)] + [c.pad_token_id] * pad_source
        labels = [int(x) for x in rng.integers(5, vocab, T)]
        if pad_source and T >= 3:  # a <pad> among the decoder's inputs: the source's padding mask is not the decoder's
            labels[1] = c.pad_token_id
        align = ([0, c.decoder_layers - 1], [0, 1])
        j, attn, hidden, alignment = forward_cli(folder, source, labels, padding=pad_source > 0, align=align)
        dec_in = shift_tokens_right(torch.tensor([labels]), c.pad_token_id, c.decoder_start_token_id)
        if j["ids"] != dec_in[0].tolist() or j["target_ids"] != labels or j["source_ids"] != source:
            fail(f"{name}: decoder input {j['ids']} vs shift_tokens_right {dec_in[0].tolist()}")
            continue
        mask = torch.tensor([[1] * S + [0] * pad_source])

        def call(m):
            out = m(input_ids=torch.tensor([source]), attention_mask=mask, decoder_input_ids=dec_in,
                    output_attentions=True, output_hidden_states=True)
            r = {"e": torch.stack([a[0] for a in out.encoder_attentions]).double().numpy(),
                 "d": torch.stack([a[0] for a in out.decoder_attentions]).double().numpy(),
                 "x": torch.stack([a[0] for a in out.cross_attentions]).double().numpy(),
                 "h": out.decoder_hidden_states[-1][0].double().numpy()}
            if has_head:
                r["n"] = torch.softmax(out.logits[0, -1].double(), -1).numpy()
            return r

        r32, r = hd.reference_pair(model, call)
        shapes = {k: attn[{"e": "encoder", "d": "decoder", "x": "cross"}[k]].shape for k in "edx"}
        if any(shapes[k] != r[k].shape for k in "edx"):
            fail(f"{name}: attention shapes {shapes} vs {[r[k].shape for k in 'edx']}")
            continue
        layers = c.encoder_layers + c.decoder_layers
        K = max(c.encoder_ffn_dim, c.decoder_ffn_dim, c.d_model, S + pad_source, T)
        p_floor, h_floor = stack_floor(layers, K), stack_floor(layers, K, float(np.abs(r["h"]).max()))
        keep = slice(0, S)  # padded source positions' own rows are not compared (transformers masks only keys)
        worst.note("e", attn["encoder"][:, :, keep], r["e"][:, :, keep], r32["e"][:, :, keep], p_floor)
        worst.note("d", attn["decoder"], r["d"], r32["d"], p_floor)
        worst.note("x", attn["cross"], r["x"], r32["x"], p_floor)
        worst.note("h", hidden, r["h"], r32["h"], h_floor)
        # the alignment: the mean of the chosen heads' cross-attention (a mean of values within
        # p_floor each is within it), and --json's argmax per target token where the reference's
        # best is ahead of its second by more than twice that
        sub = np.ix_(align[0], align[1])
        want = r["x"][sub].mean(axis=(0, 1))
        worst.note("a", alignment, want, r32["x"][sub].mean(axis=(0, 1)), p_floor)
        for i, row in enumerate(want):
            two = np.sort(row)[-2:] if len(row) > 1 else np.array([0.0, 1.0])  # one source token: its own
            if two[1] - two[0] > 2 * p_floor and j["alignment"][i]["source"] != int(np.argmax(row)):
                fail(f"{name}: target token {i} aligned to source {j['alignment'][i]['source']}, "
                     f"transformers' mean {int(np.argmax(row))}")
        if not has_head:
            if "next_tokens" in j:
                fail(f"{name}: a model without an LM head gave next_tokens")
            continue
        probs = r["n"]
        top = [t["id"] for t in j["next_tokens"]]
        want_top = [int(i) for i in np.argsort(-probs, kind="stable")[:10]]
        if top[:3] != want_top[:3]:
            fail(f"{name}: next tokens {top} vs transformers {want_top}")
        worst.note("n", [t["probability"] for t in j["next_tokens"]], probs[top], r32["n"][top],
                   stack_floor(layers + 1, K))
    print(f"{name}: max |diff| from float64 transformers (share of the bound): {worst.summary(names)}")
    for msg in worst.failed(names):
        fail(f"{name}: {msg}")


def check_generate(name, folder, vocab, rules, new=14):
    """generate --greedy --text SOURCE against transformers' generate(do_sample=False, num_beams=1)
    from the saved folder, whose generation_config.json gets `rules` (forced BOS / EOS,
    no_repeat_ngram_size, min_length): the same target ids, except where transformers' two likeliest
    (processed) scores were closer than two float32 passes could tell apart (then the rest is not
    compared)."""
    # in both files, as folders saved by transformers hold them (4.40 rebuilds a generation config
    # marked _from_model_config from config.json's fields)
    for file in ("config.json", "generation_config.json"):
        path = os.path.join(folder, file)
        with open(path) as f:
            cfg = json.load(f)
        cfg.update(rules)
        cfg.pop("_from_model_config", None)
        with open(path, "w") as f:
            json.dump(cfg, f)
    model = BartForConditionalGeneration.from_pretrained(folder, attn_implementation="eager")
    g = torch.Generator().manual_seed(new)
    source = [0] + torch.randint(5, vocab, (11,), generator=g).tolist() + [2]
    with torch.no_grad():
        out = model.generate(torch.tensor([source]), max_new_tokens=new, do_sample=False, num_beams=1,
                             output_scores=True, return_dict_in_generate=True)
    want = out.sequences[0, 1:].tolist()  # after decoder_start_token_id
    j = json.loads(run(["generate", "--model", folder, "--ids", ",".join(map(str, source)), "--max-new", str(new),
                        "--greedy", "--json", "--json-top", "2"]).stdout)
    have = j["generated_ids"]
    if j.get("source_ids") != source or j["prompt_ids"] != [model.config.decoder_start_token_id]:
        fail(f"{name}: generate --json gives source {j.get('source_ids')} and prompt {j['prompt_ids']}")
    compared = 0
    for k, (a, b) in enumerate(zip(have, want)):
        if a != b:
            top2 = torch.topk(out.scores[k][0].double(), 2).values
            if float(top2[0] - top2[1]) > 1e-4:
                fail(f"{name}: greedy token {k}: attnlab {a}, transformers {b} "
                     f"(margin {float(top2[0] - top2[1]):.2e}; attnlab {have}, transformers {want})")
            break
        compared += 1
    else:
        if len(have) != len(want):
            fail(f"{name}: attnlab generated {len(have)} tokens ({have}), transformers {len(want)} ({want})")
    print(f"{name}: greedy generate, {compared} of {len(want)} target tokens as transformers' ({rules})")
    return have


def check_text_inputs(folder):
    """forward --text SOURCE --target TEXT tokenizes as transformers' tokenizer: the source with its
    template, the labels as text_target gives them."""
    tk = PreTrainedTokenizerFast.from_pretrained(folder)
    for src, tgt in [("The cat sat on the mat.", "Le chat est assis."), ("x", "y"),
                     ("東京は日本の首都です。 😀", "two  spaces\tand a tab")]:
        j = json.loads(run(["forward", "--model", folder, "--text", src, "--target", tgt, "--json"]).stdout)
        want_src = tk(src)["input_ids"]
        want_tgt = tk(text_target=tgt)["input_ids"]
        if j["source_ids"] != want_src or j["target_ids"] != want_tgt:
            fail(f"--text {src!r} --target {tgt!r}: attnlab {j['source_ids']} / {j['target_ids']}, "
                 f"transformers {want_src} / {want_tgt}")
        if j["tokens"][0] != "</s>" or j["tokens"][1:] != tk.convert_ids_to_tokens(want_tgt)[:-1]:
            fail(f"--target {tgt!r}: decoder tokens {j['tokens']}")
    print("forward --text/--target: source and target ids as transformers' tokenizer gives them")


def expect_error(name, args, needle):
    p = run(args, check=False)
    if p.returncode != 2 or needle not in p.stderr:
        fail(f"{name}: exit {p.returncode}, stderr {p.stderr.strip()!r} (want {needle!r})")
    else:
        print(f"{name}: {p.stderr.strip()}")


def main():
    root = tempfile.mkdtemp(prefix="attnlab-seq2seq-")
    try:
        tok = train_bart_tokenizer()
        vocab = tok.get_vocab_size()
        strings = hd.hard_strings()
        tfolder = os.path.join(root, "tok")
        os.makedirs(tfolder)
        tok.save(os.path.join(tfolder, "tokenizer.json"))
        # tokenize opens a model folder: a one-layer GPT-2 of this vocabulary carries the tokenizer
        transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=vocab, n_embd=8, n_layer=1, n_head=2,
                                                             n_positions=64)).save_pretrained(tfolder)
        # an empty text is no input in attnlab (not "<s> </s>"), as for every template
        hd.check_tokenizer("BART's byte-level BPE (RobertaProcessing)", tfolder,
                           lambda s: tok.encode(s).ids if s else [], strings)

        common = dict(vocab_size=vocab, d_model=64, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                      decoder_attention_heads=8, encoder_ffn_dim=96, decoder_ffn_dim=128, max_position_embeddings=256,
                      attn_implementation="eager")
        pairs = [(1, 1), (7, 5), (33, 60), (200, 130)]
        bart = hd.randomize(BartForConditionalGeneration(BartConfig(scale_embedding=True, **common)))
        with torch.no_grad():
            bart.final_logits_bias.normal_()
        folder = os.path.join(root, "bart")
        save(bart, folder, tok)
        compare_bart("BartForConditionalGeneration (scaled embedding, final_logits_bias, tied)", folder, bart, pairs,
                     vocab)
        compare_bart("BartForConditionalGeneration, a padded source", folder, bart, [(9, 6), (40, 3)], vocab,
                     pad_source=4)
        check_text_inputs(folder)
        pairs_ok = 0
        for a, b in [("hello", "world"), ("The cat.", "東京 😀"), ("x", "  y ")]:
            want = tok.encode(a, b).ids
            got = json.loads(run(["tokenize", "--model", folder, "--text", a, "--pair", b, "--json"]).stdout)["ids"]
            if got != want:
                fail(f"RobertaProcessing pair {a!r} {b!r}: attnlab {got}, tokenizers {want}")
            else:
                pairs_ok += 1
        print(f"RobertaProcessing pairs (a source of two sentences): {pairs_ok} of 3 as tokenizers")

        untied = hd.randomize(BartForConditionalGeneration(BartConfig(tie_word_embeddings=False, **common)))
        ufolder = os.path.join(root, "bart-untied")
        save(untied, ufolder, tok)
        compare_bart("BartForConditionalGeneration (untied lm_head)", ufolder, untied, [(12, 9)], vocab)

        base = hd.randomize(BartModel(BartConfig(**common)))
        bfolder = os.path.join(root, "bart-base")
        save(base, bfolder, tok)
        compare_bart("BartModel (no head)", bfolder, base, [(15, 11)], vocab)

        # BF16 weights kept in 16 bits: the same numbers as the float32 folder of the rounded weights
        half = os.path.join(root, "bart-bf16")
        rounded = os.path.join(root, "bart-rounded")
        save(bart.to(torch.bfloat16), half, tok)
        save(bart.float(), rounded, tok)
        src, lab = list(range(5, 30)), list(range(40, 52))
        _, a16, h16 = forward_cli(half, src, lab)
        _, a32, h32 = forward_cli(rounded, src, lab)
        err = max(float(np.abs(a16[k] - a32[k]).max()) for k in a16)
        # the same products of the same (exactly widened) values; only the summation blocking may differ
        bound = stack_floor(5, 256)
        if err > bound or float(np.abs(h16 - h32).max()) > stack_floor(5, 256, float(np.abs(h32).max())):
            fail(f"BF16 BART differs from its float32 copy by {err:.3e} (bound {bound:.1e})")
        else:
            print(f"BF16 BART: {err:.1e} from its float32 copy (bound {bound:.1e})")

        expect_error("no --target", ["forward", "--model", folder, "--text", "hello"], "is an encoder-decoder")
        expect_error("--target on a decoder", ["forward", "--model", tfolder, "--text", "a", "--target", "b"],
                     "--target is for encoder-decoder models")
        expect_error("--attn-out .npy", ["forward", "--model", folder, "--text", "a", "--target", "b", "--attn-out",
                                         os.path.join(root, "a.npy")], "name an .npz")
        expect_error("named activations", ["forward", "--model", folder, "--text", "a", "--target", "b", "--cache",
                                           "blocks.0.hook_resid_pre", "--cache-out", os.path.join(root, "c.npz")],
                     "takes no cross mode, KV cache, resumed start or named activations yet")
        # --pad-to pads the source with the config's pad_token_id (<pad>, 1), which --mask padding blocks
        j = json.loads(run(["forward", "--model", folder, "--text", "hello", "--pad-to", "8", "--mask", "padding",
                            "--target", "x", "--json"]).stdout)
        want = tok.encode("hello").ids
        if j["source_ids"] != want + [1] * (8 - len(want)) or j["source_tokens"][-1] != "<pad>":
            fail(f"--pad-to 8 on a BART source: {j['source_ids']} {j['source_tokens']}")
        else:
            print(f"--pad-to 8 on a BART source: {j['source_ids']}")
        # greedy generation: plain, then with the processors a BART folder's generation_config turns on
        check_generate("BART generate", folder, vocab, {})
        have = check_generate("BART generate (forced BOS / EOS, no 2-gram twice, min_length 6)", folder, vocab,
                              {"forced_bos_token_id": 0, "forced_eos_token_id": 2, "no_repeat_ngram_size": 2,
                               "min_length": 6})
        body = have[:-1]  # (a forced EOS may repeat a pair)
        if have and (have[0] != 0 or len(set(zip(body, body[1:]))) != max(len(body) - 1, 0)):
            fail(f"BART generate: the processors did not hold on attnlab's own ids {have}")
        expect_error("--align-layers past the decoder", ["forward", "--model", folder, "--text", "a", "--target", "b",
                                                          "--align-layers", "3"], "no layer 3 (the decoder has 3)")
        expect_error("--align-out on a decoder", ["forward", "--model", tfolder, "--text", "a", "--align-out",
                                                  os.path.join(root, "al.npy")], "this model has none")
        expect_error("generate --attn-out", ["generate", "--model", folder, "--text", "a", "--max-new", "2",
                                             "--attn-out", os.path.join(root, "g.npy")], "three arrays")

    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    main()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all encoder-decoder cross-checks passed")
