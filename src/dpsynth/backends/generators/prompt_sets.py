"""Prompt sets: YAML files that turn a generator operation and its condition into chat messages.

A prompt set is data, not code, so a user adapts dpsynth to a new kind of text by copying
`prompts/generic.yaml` and editing sentences. Templates are checked when the file is loaded:
an unknown placeholder or a missing operation is an error that names the file and the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dpsynth.backends.base import BLANK, Condition
from dpsynth.errors import ConfigError

OPERATIONS = ("generate", "rewrite", "fill", "crossover")
CONDITION_FIELDS = ("label", "keywords", "instructions", "length")
PLACEHOLDERS = frozenset(
    {"condition", *CONDITION_FIELDS, "document", "sample", "samples", "strength", "blank"}
)
UNDESCRIBED = "text"
"""What `{document}` reads when the condition names no kind of document (`data.document`)."""


def builtin_prompt_sets() -> list[str]:
    """Names of the prompt sets shipped in `dpsynth/backends/generators/prompts/`."""
    folder = resources.files("dpsynth.backends.generators") / "prompts"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


@dataclass(frozen=True)
class ChatPrompt:
    """One request to a chat model, plus the target length used for token estimates and
    the words a faithful reply keeps (fill: the text around the blanks)."""

    user: str
    system: str | None = None
    length: int | None = None
    keeps: tuple[str, ...] = ()

    def messages(self) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class PromptSet:
    """The templates of one YAML prompt file, validated."""

    name: str
    operations: dict[str, dict[str, str]]
    condition: dict[str, str]
    rewrite_strength: tuple[str, ...]
    condition_separator: str = " "

    @property
    def digest(self) -> str:
        """A short hash of the templates: part of every cache key, so edits invalidate."""
        blob = json.dumps([self.operations, self.condition, self.rewrite_strength,
                           self.condition_separator], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def generate(self, condition: Condition) -> ChatPrompt:
        return self._render("generate", condition, condition.length)

    def rewrite(self, text: str, condition: Condition, strength: float) -> ChatPrompt:
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength={strength}: must lie in [0, 1]")
        levels = self.rewrite_strength
        line = levels[min(int(strength * len(levels)), len(levels) - 1)]
        return self._render("rewrite", condition, condition.length or _words(text),
                            sample=text, strength=line)

    def fill(self, masked_text: str, condition: Condition) -> ChatPrompt:
        prompt = self._render("fill", condition, condition.length or _words(masked_text),
                              sample=masked_text)
        return dataclasses.replace(prompt, keeps=tuple(w for w in masked_text.split()
                                                       if w != BLANK))

    def crossover(self, parents: list[str], condition: Condition) -> ChatPrompt:
        if len(parents) < 2:
            raise ValueError(f"crossover needs two or more parents, got {len(parents)}")
        mean = math.ceil(sum(_words(p) for p in parents) / len(parents))
        return self._render("crossover", condition, condition.length or mean,
                            samples="\n\n".join(parents))

    def _render(self, op: str, condition: Condition, length: int | None,
                **extra: str) -> ChatPrompt:
        fields = {
            "label": condition.label or "",
            "keywords": ", ".join(condition.keywords),
            "instructions": condition.text or "",
            "length": str(length) if length else "",
        }
        phrased = [self.condition[key].format(**fields) for key in CONDITION_FIELDS
                   if key in self.condition and fields[key]]
        values = {**fields, "condition": self.condition_separator.join(phrased),
                  "document": condition.text or UNDESCRIBED,
                  "blank": BLANK, "sample": "", "samples": "", "strength": "", **extra}
        template = self.operations[op]
        system = template.get("system")
        return ChatPrompt(user=template["user"].format(**values).strip(),
                          system=system.format(**values).strip() if system else None,
                          length=length)


def load_prompt_set(spec: str | Path) -> PromptSet:
    """A built-in set by name (see `builtin_prompt_sets`) or a YAML file by path."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"backends.generator.prompts: {path}: prompt file not found")
        text, source = path.read_text(encoding="utf-8"), str(path)
    else:
        if str(spec) not in builtin_prompt_sets():
            raise ConfigError(f"backends.generator.prompts: '{spec}' is neither a file nor a "
                              f"built-in set ({', '.join(builtin_prompt_sets())})")
        res = resources.files("dpsynth.backends.generators") / "prompts" / f"{spec}.yaml"
        text, source = res.read_text(encoding="utf-8"), f"built-in prompt set '{spec}'"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({exc})") from None
    return _parse(raw, source)


def _parse(raw: Any, source: str) -> PromptSet:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a prompt file is a mapping with an 'operations' key")
    ops = raw.get("operations")
    if not isinstance(ops, dict):
        raise ConfigError(f"{source}: operations: missing or not a mapping")
    missing = [op for op in OPERATIONS if op not in ops]
    if missing:
        raise ConfigError(f"{source}: operations: missing {', '.join(missing)}")
    operations: dict[str, dict[str, str]] = {}
    for op in OPERATIONS:
        entry = ops[op]
        if not isinstance(entry, dict) or not isinstance(entry.get("user"), str):
            raise ConfigError(f"{source}: operations.{op}.user: a template string is required")
        unknown_keys = set(entry) - {"system", "user"}
        if unknown_keys:
            raise ConfigError(f"{source}: operations.{op}: unknown key(s) "
                              f"{', '.join(sorted(unknown_keys))}")
        for key, template in entry.items():
            _check_template(template, PLACEHOLDERS, f"{source}: operations.{op}.{key}")
        operations[op] = dict(entry)
    condition = raw.get("condition") or {}
    if not isinstance(condition, dict) or set(condition) - set(CONDITION_FIELDS):
        raise ConfigError(f"{source}: condition: a mapping with keys among "
                          f"{', '.join(CONDITION_FIELDS)}")
    for key, template in condition.items():
        _check_template(template, {key}, f"{source}: condition.{key}")
    strength = raw.get("rewrite_strength")
    if (not isinstance(strength, list) or not strength
            or not all(isinstance(s, str) for s in strength)):
        raise ConfigError(f"{source}: rewrite_strength: a non-empty list of sentences, "
                          "mildest first")
    return PromptSet(name=str(raw.get("name", source)), operations=operations,
                     condition=dict(condition), rewrite_strength=tuple(strength),
                     condition_separator=str(raw.get("condition_separator", " ")))


def _check_template(template: Any, allowed: set[str] | frozenset[str], where: str) -> None:
    if not isinstance(template, str):
        raise ConfigError(f"{where}: must be a string")
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ConfigError(f"{where}: bad template ({exc}); write literal braces as {{{{ }}}}")\
            from None
    unknown = names - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown placeholder(s) {', '.join(sorted(unknown))}; "
                          f"allowed: {', '.join(sorted(allowed))}")


def _words(text: str) -> int:
    return len(text.split())
