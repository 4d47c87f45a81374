"""Hostile records for the messy-record harness: each is one record a user's file may hold,
which a later step (a tokenizer, the keyed hash, an embedder, a CSV writer) may not take.

`HOSTILE` is the fixed corpus; `hostile_records` generates more of the same kinds."""

from __future__ import annotations

from hypothesis import strategies as st

LONG_WORDS = " ".join(f"w{i}" for i in range(100_000))  # 100k tokens for any tokenizer

HOSTILE: dict[str, dict[str, object]] = {
    "lone_surrogate": {"text": "refund \ud800 card", "label": "billing"},
    "low_surrogate_end": {"text": "parcel late \udfff", "label": "shipping"},
    "surrogate_label": {"text": "refund card", "label": "billing\ud83d"},
    "surrogate_user": {"text": "refund card", "label": "billing", "user": "u\udc00"},
    "nul": {"text": "refund\x00card\x00", "label": "billing"},
    "controls": {"text": "\x00\x07\x1b[31mred\x1b[0m \x0c\x0b card \x7f", "label": "billing"},
    "zero_width_only": {"text": "\u200b\u200c\u200d\u2060", "label": "technical"},
    "bidi": {"text": "\u202eerror \u2066wifi\u2069 crash\u202c", "label": "technical"},
    "bom": {"text": "\ufeffpassword reset", "label": "account"},
    "whitespace_only": {"text": "\u00a0\u2003\t\u3000", "label": "account"},
    "punctuation_only": {"text": "?!...,,;; --- ***", "label": "account"},
    "one_megabyte": {"text": "invoice " * 131_072, "label": "billing"},
    "hundred_k_tokens": {"text": LONG_WORDS, "label": "billing"},
    "one_long_word": {"text": "x" * 20_000, "label": "billing"},
    "emoji_mixed_scripts": {"text": "💳 返金 возврат استرداد कार्ड 🚚 👩‍👩‍👧", "label": "billing"},
    "label_stray_spaces": {"text": "refund my card", "label": "  billing \t"},
    "label_other_case": {"text": "refund my card", "label": "Billing"},
    "user_id_number": {"text": "refund my card", "label": "billing", "user": 17},
    "text_number": {"text": 12345, "label": "billing"},
    "label_number": {"text": "refund my card", "label": 3},
    "formula": {"text": "=cmd|' /C calc'!A0", "label": "technical"},
    "crlf_in_field": {"text": "line one\r\nline two, \"quoted\"\r\n", "label": "shipping"},
    "tabs_and_newlines": {"text": "a\tb\nc\rd", "label": "shipping"},
}
"""name -> record (text, label, optional user). A record without a user gets a fresh one."""

WITH_USER = {name for name, record in HOSTILE.items() if "user" in record}


def hostile_records(labels: list[str]) -> st.SearchStrategy[dict[str, object]]:
    """Records of the same kinds as `HOSTILE`: any code point (surrogates and controls
    included), numbers where text belongs, labels near the declared ones."""
    anything = st.text(st.characters(codec=None, categories=None), max_size=40)
    text = st.one_of(anything, st.integers(), st.floats(allow_nan=True),
                     anything.map(lambda t: t * 50))
    label = st.one_of(st.sampled_from(labels),
                      st.sampled_from(labels).map(lambda y: f" {y.upper()} "), anything,
                      st.integers(0, 5))
    return st.fixed_dictionaries({"text": text, "label": label})
