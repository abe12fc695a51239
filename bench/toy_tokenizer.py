"""The small byte-level BPE tokenizer the benchmark folders carry: the benchmarks feed random ids,
but attnlab's loader wants a tokenizer in a Hugging Face folder."""
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def save_toy_tokenizer(folder):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()  # as GPT-2's: generated text decodes back to bytes
    tok.train_from_iterator(["attention is all you need"] * 10,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    tok.save(os.path.join(folder, "tokenizer.json"))
