// A byte-level BPE tokenizer learned from a text, as Hugging Face's tokenizers learns one
// (BpeTrainer in models/bpe/trainer.rs, behind ByteLevelBPETokenizer.train and transformers'
// train_new_from_iterator): GPT-2's pre-tokenizer splits the text into words, the 256 byte
// characters are the alphabet, and the most frequent adjacent pair is merged until the
// vocabulary is full or no pair is seen min_frequency times (ties: the pair of smaller ids).
// The result is a tokenizer.json with GPT-2's pipeline that tokenizers and attnlab's
// HfTokenizer both read; hf_decoders compares its vocabulary and merges with tokenizers' own.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

struct BpeTrainOptions {
  int vocab_size = 1024;  // special tokens + 256 bytes + merges, at most
  int min_frequency = 2;  // a pair seen fewer times is not merged (ByteLevelBPETokenizer's default)
  std::vector<std::string> special_tokens{"<|endoftext|>"};  // ids 0, 1, ... (GPT-2's end of text)
};

struct BpeVocabulary {
  std::vector<std::string> tokens;                          // by id: special tokens, bytes, merges
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  int specials = 0;
};

// The text as one sequence (tokenizers' train_from_iterator([text])). Error when vocab_size
// cannot hold the special tokens and the 256 bytes, or the text is not UTF-8.
BpeVocabulary train_byte_level_bpe(const std::string& text, const BpeTrainOptions& options);

// GPT-2's tokenizer.json around a vocabulary: ByteLevel pre-tokenizer (no prefix space), BPE,
// ByteLevel post-processor and decoder; the special tokens as added tokens.
std::string byte_level_bpe_json(const BpeVocabulary& vocabulary);

}  // namespace attnlab
