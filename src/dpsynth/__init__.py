"""dpsynth: differentially private synthetic text with exact privacy accounting."""

__version__ = "0.1.0"
