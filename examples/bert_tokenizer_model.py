"""Triton Python-backend model: a BERT-style wordpiece tokenizer, TEXT -> input_ids/attention_mask.

The generator copies this file to `bert_tokenizer/<version>/model.py`; it is written to Triton's
python_backend API and uses only the standard library, numpy and `triton_python_backend_utils`,
so the same file runs in Triton and in `thaw serve`. The vocabulary is `vocab.txt` beside it.
"""

import json
import os
import unicodedata

import numpy as np
import triton_python_backend_utils as pb_utils

# Longest word (in characters) that wordpiece will try to split; longer ones become [UNK].
MAX_WORD_CHARS = 100


class TritonPythonModel:
    """Lowercase, split on whitespace and punctuation, greedy longest-match wordpiece."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        vocab_path = os.path.join(args["model_repository"], args["model_version"], "vocab.txt")
        with open(vocab_path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        self.vocab = {token: index for index, token in enumerate(tokens)}
        self.pad_id = self.vocab["[PAD]"]
        self.unk_id = self.vocab["[UNK]"]
        self.cls_id = self.vocab["[CLS]"]
        self.sep_id = self.vocab["[SEP]"]
        params = config.get("parameters", {})
        self.max_length = int(params.get("max_sequence_length", {}).get("string_value", "128"))
        ids_config = pb_utils.get_output_config_by_name(config, "input_ids")
        mask_config = pb_utils.get_output_config_by_name(config, "attention_mask")
        self.ids_dtype = pb_utils.triton_string_to_numpy(ids_config["data_type"])
        self.mask_dtype = pb_utils.triton_string_to_numpy(mask_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            if text is None:
                error = pb_utils.TritonError("input 'TEXT' is required")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            ids, mask = self._encode_batch(text.as_numpy().reshape(-1))
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("input_ids", ids.astype(self.ids_dtype)),
                        pb_utils.Tensor("attention_mask", mask.astype(self.mask_dtype)),
                    ]
                )
            )
        return responses

    def finalize(self):
        self.vocab = {}

    def _encode_batch(self, texts):
        """Token ids for each text, padded with [PAD] to the longest one, and the 0/1 mask."""
        rows = [self._encode(item) for item in texts]
        width = max((len(row) for row in rows), default=2)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
            mask[index, : len(row)] = 1
        return ids, mask

    def _encode(self, item):
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        text = raw.decode("utf-8", errors="replace")
        ids = [self.cls_id]
        for word in self._words(text):
            ids.extend(self._wordpiece(word))
            if len(ids) >= self.max_length - 1:
                break
        return [*ids[: self.max_length - 1], self.sep_id]

    def _words(self, text):
        """Lowercased, accent-stripped words; every punctuation mark is a word of its own."""
        text = unicodedata.normalize("NFD", text.lower())
        word = []
        for char in text:
            if unicodedata.category(char) == "Mn":
                continue
            if char.isspace() or _is_punctuation(char):
                if word:
                    yield "".join(word)
                    word = []
                if not char.isspace():
                    yield char
            else:
                word.append(char)
        if word:
            yield "".join(word)

    def _wordpiece(self, word):
        if len(word) > MAX_WORD_CHARS:
            return [self.unk_id]
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.unk_id]
            start = end
        return pieces


def _is_punctuation(char):
    return unicodedata.category(char).startswith("P") or (
        char.isascii() and not char.isalnum() and not char.isspace()
    )
