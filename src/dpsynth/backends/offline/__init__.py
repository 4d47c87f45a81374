"""The offline generator: a small conditional LM trained on public text, shipped with dpsynth."""
