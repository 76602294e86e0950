"""Tuning: search spaces, on-device timing, and the persistent performance database."""
from .perfdb import PerfDB, default_path
from .tuner import MODES, choose, search, time_launch, tuning_mode

__all__ = ["PerfDB", "default_path", "MODES", "choose", "search", "time_launch", "tuning_mode"]
