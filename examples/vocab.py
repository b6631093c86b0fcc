"""A deterministic wordpiece vocabulary for the example tokenizer (no downloads)."""

from __future__ import annotations

import string

__all__ = ["SPECIAL_TOKENS", "build_vocab"]

# Ids 0..4, in BERT's conventional order: [PAD] must be 0 so that padding is all zeros.
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# A word list reads best as text: split once at import.
_WORDS = """
the of and to in is it that for was on are as with be at by this have from or one had not but
what all were when we there can an your which their said if do will each about how up out them
then she many some so these would other into has more her two like him see time could no make
than first been its who now people my made over did down only way find use may water long little
very after words called just where most know get through back much go good new write our me man
too any day same right look think also around another came come work three word must because
does part even place well such here take why things help put years different away again off went
old number great tell men say small every found still between name should home big give air line
set own under read last never us left end along while might next sound below saw something
thought both few those always looked show large often together asked house world going want
school important until form food keep children feet land side without boy once animals life
enough took sometimes four head above kind began almost live page got earth need far hand high
year mother light parts country father let night following picture being study second eyes soon
times story boys since white days paper hard near sentence better best across during today
others however sure means knew try told young miles sun ways thing whole hear example heard
several change answer room sea against top turned learn point city play toward five using
himself usually model models server serving inference request requests latency throughput batch
batches tensor tensors snapshot cold start warm scale zero replica replicas gpu cpu memory
weights graph token tokens text input output hello world thaw frozen
""".split()  # noqa: SIM905

_SUFFIXES = (
    "s",
    "es",
    "ed",
    "ing",
    "er",
    "ers",
    "est",
    "ly",
    "tion",
    "tions",
    "ment",
    "ness",
    "able",
    "al",
    "ity",
    "ive",
    "ize",
    "ized",
    "less",
    "ful",
    "ous",
    "ence",
    "ance",
    "y",
    "en",
    "ic",
)
_PREFIXES = ("un", "re", "in", "dis", "pre", "non", "over", "sub", "inter", "trans")


def build_vocab() -> list[str]:
    """The vocabulary, one token per id: specials, characters, '##' pieces, then words.

    Every lowercase letter, digit and ASCII punctuation mark is present both as a word start and
    as a '##' continuation, so any ASCII word tokenizes without [UNK].
    """
    chars = string.ascii_lowercase + string.digits + string.punctuation
    tokens: list[str] = [*SPECIAL_TOKENS]
    tokens += list(chars)
    tokens += [f"##{c}" for c in string.ascii_lowercase + string.digits]
    tokens += list(_PREFIXES)
    tokens += [f"##{s}" for s in _SUFFIXES]
    tokens += _WORDS
    seen: set[str] = set()
    unique: list[str] = []
    for token in tokens:
        if token not in seen:
            seen.add(token)
            unique.append(token)
    return unique
