"""Privacy core: mechanisms, calibration and the ledger. No text knowledge here."""

from dpsynth.privacy.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    calibrate,
    epsilon_of,
)
from dpsynth.privacy.ledger import Charge, PrivacyLedger
from dpsynth.privacy.mechanisms import (
    AboveThreshold,
    Disjoint,
    ExponentialTopK,
    Gaussian,
    Laplace,
    LimitedDomainTopK,
    Mechanism,
    NoisyMean,
    SubsampledGaussianHistogram,
    Votes,
    report_noisy_max,
)
from dpsynth.privacy.noise import NoiseSource, make_rng
from dpsynth.privacy.planning import (
    BudgetPlan,
    StagePlan,
    StageSpec,
    apply_split,
    plan_budget,
    plan_table,
)

__all__ = [
    "AboveThreshold",
    "BudgetPlan",
    "Charge",
    "Disjoint",
    "ExponentialTopK",
    "Gaussian",
    "Laplace",
    "LimitedDomainTopK",
    "Mechanism",
    "NoiseSource",
    "NoisyMean",
    "PrivacyLedger",
    "StagePlan",
    "StageSpec",
    "SubsampledGaussianHistogram",
    "Votes",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "apply_split",
    "calibrate",
    "epsilon_of",
    "make_rng",
    "plan_budget",
    "plan_table",
    "report_noisy_max",
]
