"""Params of Unique and TfIdfVectorizer (field names and defaults as in the ONNX schema)."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UniqueParam:
    axis: int | None = None  # None: the flattened input
    sorted: int = 1


@dataclass(frozen=True, slots=True)
class TfIdfVectorizerParam:
    # Required by the schema: no defaults.
    max_gram_length: int
    max_skip_count: int
    min_gram_length: int
    mode: str  # "TF", "IDF" or "TFIDF"
    ngram_counts: tuple
    ngram_indexes: tuple
    pool_int64s: tuple | None = None
    pool_strings: tuple | None = None
    weights: tuple | None = None
