"""The private side: the only package that holds private records or spends budget.

`train_classifier` is the classifier PATE's teachers are; a student learning from their DP
labels (public) is `train_on_shares`, the same classifier on soft labels."""

from dpsynth.private.boundary import Private
from dpsynth.private.engine.teachers import train_classifier, train_on_shares
from dpsynth.private.releases.decoding import DecodingSetup, TextRequest
from dpsynth.private.training.conditioning import Conditioning

__all__ = ["Conditioning", "DecodingSetup", "Private", "TextRequest",
           "train_classifier", "train_on_shares"]
