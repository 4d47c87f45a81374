import pytest

from dpsynth.backends.base import BLANK, Condition
from dpsynth.backends.generators.prompt_sets import builtin_prompt_sets, load_prompt_set
from dpsynth.errors import ConfigError


def test_every_builtin_set_renders_every_operation():
    assert {"generic", "openreview", "pubmed", "mtsamples"} <= set(builtin_prompt_sets())
    cond = Condition(label="Optimization", keywords=("Adam", "SGD"), length=40,
                     text="Recommendation: 6")
    for name in builtin_prompt_sets():
        prompts = load_prompt_set(name)
        rendered = [prompts.generate(cond), prompts.rewrite("old text here", cond, 0.5),
                    prompts.fill(f"old {BLANK} here", cond),
                    prompts.crossover(["one two", "three four five six"], cond)]
        for prompt in rendered:
            assert prompt.user and "{" not in prompt.user, (name, prompt.user)
            assert prompt.messages()[-1] == {"role": "user", "content": prompt.user}


def test_condition_fields_and_lengths_reach_the_prompt():
    prompts = load_prompt_set("generic")
    first = prompts.generate(Condition(label="billing", keywords=("refund", "invoice"),
                                       length=30, text="Written by an angry customer."))
    assert "billing" in first.user and "refund, invoice" in first.user
    assert "30 words" in first.user and "angry customer" in first.user
    assert "Category" not in prompts.generate(Condition()).user  # absent fields vanish
    # rewrite/fill default to the sample's length, crossover to the parents' mean
    assert "3 words" in prompts.rewrite("a b c", Condition(), 0.2).user
    assert prompts.crossover(["a b", "a b c d"], Condition()).length == 3
    fill = prompts.fill(f"the {BLANK} arrived", Condition())
    assert f"the {BLANK} arrived" in fill.user


def test_rewrite_strength_picks_a_line():
    prompts = load_prompt_set("generic")
    mild, strong = prompts.rewrite("x", Condition(), 0.0), prompts.rewrite("x", Condition(), 1.0)
    assert prompts.rewrite_strength[0] in mild.user
    assert prompts.rewrite_strength[-1] in strong.user
    with pytest.raises(ValueError, match="strength"):
        prompts.rewrite("x", Condition(), 1.5)


def test_seed_prompts_follow_the_paper():
    review = load_prompt_set("openreview").fill(f"good paper {BLANK}", Condition(length=7))
    assert review.system == "You are a helpful assistant for text filling."
    assert 'guess the content of the blank "_"' in review.user
    assert "must have 7 words" in review.user


def test_user_prompt_file(tmp_path):
    path = tmp_path / "mine.yaml"
    text = load_prompt_set_text()
    path.write_text(text.replace("Write one new text.", "Write a haiku."), encoding="utf-8")
    assert load_prompt_set(path).generate(Condition()).user.startswith("Write a haiku.")
    assert load_prompt_set(path).digest != load_prompt_set("generic").digest


def test_bad_prompt_files_are_located(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(load_prompt_set_text().replace("text. {condition}", "text. {colour}"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.yaml: operations.generate.user: unknown "
                                          r"placeholder\(s\) colour"):
        load_prompt_set(path)
    path.write_text("operations: {generate: {user: hi}}", encoding="utf-8")
    with pytest.raises(ConfigError, match="missing rewrite, fill, crossover"):
        load_prompt_set(path)
    with pytest.raises(ConfigError, match="neither a file nor a built-in"):
        load_prompt_set("nonexistent-set")


def load_prompt_set_text() -> str:
    from importlib import resources

    return (resources.files("dpsynth.backends.generators") / "prompts" / "generic.yaml").read_text()
