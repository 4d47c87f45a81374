"""Turn a small chat model's reply into the text it was asked for, or `FAILED`.

A 135M instruction model often wraps the text ("Here's a news article:", quotes, "I hope
this helps!"), leaks chat-template tokens, or answers the instruction instead of doing it
("I'm ready to assist you", "Sure! What topic?"). `clean_reply` strips the wrapping and marks
the rest failed, so callers count and redo it like any other failed output (base.FAILED).
Only public text passes through here: replies to prompts built from public conditions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dpsynth.backends.base import BLANK, FAILED

_CHAT_JUNK = re.compile(r"<\|im_(?:start|end)\|>|<\|endoftext\|>")
_ROLE_LINE = re.compile(r"\n\s*(?:user|assistant|system)\s*:?\s*$", re.IGNORECASE)
_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|certainly|of course|okay|ok|absolutely|great)[!,.]*\s+)?"
    r"(?:(?:here(?:'s| is| are)|below is|this is)\b[^\n:]{0,80}:|"
    r"(?:title|text|output|answer|new text|rewritten text|completed text|rewrite|"
    r"rewrite the text|rewritten version|new version)\s*:|"
    r"here(?:'s| is) (?:a|an|the|my|one) [^.\n:]{0,60}\b(?:text|sample|example|version|"
    r"review|article|story)\b[^.\n:]{0,60}[.:])\s*",
    re.IGNORECASE)
_HEADING = re.compile(r"^\s*(?:#+ [^\n]*|\*\*[^\n*]{1,80}\*\*)\s*\n+")
_SIGN_OFF = re.compile(
    r"\n+\s*(?:i hope (?:this|you)|let me know|feel free|please note|note:|this (?:text|"
    r"rewrite|version|article|review) (?:is|has|keeps|captures|maintains)|i (?:have|'ve) "
    r"(?:rewritten|written|filled|changed|kept))[^\n]*(?:\n[^\n]*)*$", re.IGNORECASE)
_TASK = (r"(?:text|topic|article|story|review|genre|style|tone|prompt|write|writing|rewrite|"
         r"details|more information|context|instructions|like me to|want me to|"
         r"would you like|do you want|you have in mind)")
"""Words of a reply about the task: a question back, or a request, is off task only with one
in its sentence. Documents ask questions and make requests too ("What is the capital of
France?", "Can you tell me why I was charged twice?", "Hi, my order is late")."""
_ASSIST = (r"(?:help(?! but)|assist|support you|write|create|generate|rewrite|fulfil|fulfill|"
           r"provide|comply|complete|do that)\b")
"""What an assistant says it can or cannot do ("I can't help with that"), as against a
review's "I can't believe" or "I'm happy to say"."""
_OFF_TASK = re.compile(
    r"^\s*(?:(?:hello|hi|hey)(?: there)?[!,.]*\s+)?"
    r"(?:i'?m sorry,? (?:but )?(?:i|as an)\b|i am sorry,? (?:but )?i\b|sorry, (?:but )?i\b|"
    rf"(?:i can(?:no|')t|i cannot|i'?m unable to|i am unable to) {_ASSIST}|as an ai|"
    r"i'?m (?:ready|here) to|"
    rf"(?:i'?m (?:happy|glad) to|i'?d (?:be happy|love) to|i would be happy to) {_ASSIST}|"
    r"how (?:can|may) i (?:help|assist)|i'?m sorry for the confusion|"
    r"i'?m (?:glad|happy) to (?:hear|see) (?:that )?you|"
    rf"(?:what|which) [^?\n]{{0,80}}\b{_TASK}\b|"
    r"(?:could|can) you (?:please )?(?:provide|give|tell|share|specify)[^.?!\n]{0,80}\b"
    rf"{_TASK}\b|please (?:provide|give|share|specify)[^.?!\n]{{0,80}}\b{_TASK}\b|"
    r"thank you for (?:the|your) (?:text|prompt|request|task|instructions)|"
    r"you'?ve (?:done|provided|given|asked|shared|written|requested)\b|"
    r"your (?:text|description|review|prompt) (?:is|was|has|sounds|looks)\b|"
    r"i'?m going to (?:give|write|rewrite)|"
    r"(?:the |this )?(?:original |given |above )?text (?:was|is|has|had)\b)", re.IGNORECASE)
_INNER_PREAMBLE = re.compile(r"^[^\n:]{0,120}\b(?:here(?:'s| is| are)|below is)\b[^\n:]{0,80}:\s*",
                             re.IGNORECASE)
_ECHO = re.compile(r"reply with (?:the|only)|output only|the above (?:is|are) |"
                   r"\b(?:can(?:no|')t|cannot|not sure i can) help you with\b|"
                   r"\bhow (?:can|may) i (?:help|assist) you\b|"
                   r"\bdo you have a specific (?:text|topic|question|request)\b|"
                   r"without (?:any other|a title)|rewritten version|original text|"
                   r"\bi (?:added|changed|kept|rewrote|replaced) (?:a few|some|the|a) "
                   r"(?:words?|sentences?|phrases?|text|details?)\b", re.IGNORECASE)
_QUOTES = (('"', '"'), ("“", "”"), ("'", "'"), ("«", "»"))
MIN_WORDS = 3
SHORTEST = 0.4
"""A reply under this share of its target length is a summary, not the text asked for."""
VERSION = 6
"""Part of the generator's identity (so of cache keys): bump it when a change to these rules
changes what some reply becomes."""


def clean_reply(reply: str, target_words: int | None = None,
                keeps: Sequence[str] = ()) -> str:
    """The text inside `reply`, cut to about 1.5x `target_words` at a sentence end, or
    `FAILED` when the reply is a refusal, a question back, talk about the task, a loop, a
    fill that left blanks or lost more than half of the words it was to `keep`, or under
    0.4x `target_words` (or 3 words)."""
    text = _CHAT_JUNK.split(reply, maxsplit=1)[0]
    text = _ROLE_LINE.sub("", text).strip()
    if _OFF_TASK.match(text):
        return FAILED
    for _ in range(2):  # "Sure! Here's the text:\n\n**Title**\n..." has two layers
        text = _HEADING.sub("", _PREAMBLE.sub("", text, count=1), count=1).strip()
    text = _INNER_PREAMBLE.sub("", text, count=1)  # "Aw, sorry. Here is a new version: ..."
    text = _SIGN_OFF.sub("", text).strip()
    text = _unquote(text)
    text = _trim(text, round(1.5 * target_words) + 5) if target_words else \
        _whole_sentences(text)
    words = text.split()
    if (len(words) < max(MIN_WORDS, SHORTEST * (target_words or 0)) or _ECHO.search(text)
            or BLANK in words or _OFF_TASK.match(text) or not _keeps(words, keeps)
            or _loops(words)):
        return FAILED
    return text


def _loops(words: list[str]) -> bool:
    """A reply stuck repeating itself ("Happy, happy, happy, ..."): one word is a third of
    a text of ten words or more."""
    if len(words) < 10:
        return False
    counts: dict[str, int] = {}
    for word in words:
        counts[_bare(word)] = counts.get(_bare(word), 0) + 1
    return max(counts.values()) > len(words) / 3


def _keeps(words: list[str], keeps: Sequence[str]) -> bool:
    """At least half of `keeps` (compared as lowercase words, punctuation ignored)."""
    if not keeps:
        return True
    have = {_bare(w) for w in words}
    return sum(_bare(w) in have for w in keeps) >= 0.5 * len(keeps)


def _bare(word: str) -> str:
    return word.strip(".,;:!?\"'()“”‘’").lower()


def _unquote(text: str) -> str:
    for left, right in _QUOTES:
        if len(text) > 2 and text.startswith(left) and text.endswith(right) \
                and left not in text[1:-1]:
            return text[1:-1].strip()
    return text


def _trim(text: str, max_words: int) -> str:
    """At most `max_words` words, ending at the last sentence end within them if any (a
    reply cut by the token cap would otherwise end mid-sentence)."""
    words = text.split()
    if len(words) <= max_words:
        return _whole_sentences(text)
    cut = " ".join(words[:max_words])
    return _whole_sentences(cut)


def _whole_sentences(text: str) -> str:
    """`text` up to its last sentence end, when that keeps most of it."""
    if text[-1:] in ".!?\"'”)":
        return text
    end = max(text.rfind(mark) for mark in (". ", "! ", "? ", ".\n"))
    return text[:end + 1] if end >= len(text) // 2 else text
