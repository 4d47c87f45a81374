"""Recipes with real backends: the offline LM (a tiny local one) and the OpenAI-compatible
client over real HTTP to the loopback server, whose captured prompts are searched for every
private record."""

import pytest

pytest.importorskip("torch")

from dpsynth.backends.config import OpenAIChatConfig
from dpsynth.backends.factory import build_generator
from dpsynth.backends.http.loopback import LoopbackServer
from dpsynth.backends.offline.generator import OfflineGenerator
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder
from tests.methods.test_recipes import PARAMS, make_config


def test_dpga_loop_with_a_real_local_generator(tmp_path, tickets, tiny_lm):
    outputs = run(make_config(tmp_path, tickets, "dpga"), embedder=HashEmbedder(),
                  generator=OfflineGenerator(tiny_lm, seed=0))
    assert len(outputs.result.texts) == PARAMS["dpga"]["n_output"]
    assert all(text.strip() for text in outputs.result.texts)
    assert outputs.ledger.spent() <= 2.0


@pytest.mark.parametrize("recipe", ["dpga", "pe", "kd_tutor"])
def test_no_private_text_in_any_prompt_sent(tmp_path, tickets, recipe):
    with LoopbackServer() as server:
        generator = build_generator(OpenAIChatConfig(base_url=server.url, model="loopback",
                                                     concurrency=4))
        run(make_config(tmp_path, tickets, recipe), embedder=HashEmbedder(),
            generator=generator)
        prompts = "\n".join(server.user_prompts())
    assert server.records
    for text in tickets[0]:
        assert text not in prompts
