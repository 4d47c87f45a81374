"""Data layer: reading, validation, contribution bounding and the private dataset type."""

from dpsynth.data.config import DataConfig
from dpsynth.data.io import read_table, write_table
from dpsynth.data.load import load_private
from dpsynth.data.private import Access, PrivateDataset

__all__ = ["Access", "DataConfig", "PrivateDataset", "load_private",
           "read_table", "write_table"]
