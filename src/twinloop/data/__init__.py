"""Episodes and datasets: Parquet files with LeRobot-compatible columns, import and export."""

from twinloop.data.dataset import Dataset, DatasetCheck, check
from twinloop.data.episodes import Episode, EpisodeRecorder, check_recorded_on, recorded_on
from twinloop.data.lerobot import LEROBOT_COLUMNS, export_lerobot, load_lerobot

__all__ = ["LEROBOT_COLUMNS", "Dataset", "DatasetCheck", "Episode", "EpisodeRecorder", "check", "check_recorded_on",
           "export_lerobot", "load_lerobot", "recorded_on"]
