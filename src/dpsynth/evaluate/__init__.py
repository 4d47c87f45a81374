"""Utility, fidelity and privacy metrics for synthetic datasets.

`evaluate(synthetic, real_test, real_train=None)` computes them all and returns an
`EvalResult`; the metric functions are importable one by one from the submodules.
"""

from dpsynth.evaluate.canaries import (
    Canaries,
    canary_exposure,
    make_canaries,
    plant_canaries,
    plant_canaries_in_file,
    read_canaries,
)
from dpsynth.evaluate.privacy import PRIVATE_NOTICE
from dpsynth.evaluate.result import EvalResult
from dpsynth.evaluate.suite import EvalConfig, evaluate, evaluate_embedded
from dpsynth.evaluate.tables import TextTable, read_text_table

__all__ = ["PRIVATE_NOTICE", "Canaries", "EvalConfig", "EvalResult", "TextTable",
           "canary_exposure", "evaluate", "evaluate_embedded", "make_canaries",
           "plant_canaries", "plant_canaries_in_file", "read_canaries", "read_text_table"]
