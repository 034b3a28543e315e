"""Episodes and datasets: Parquet files with LeRobot-compatible columns, import and export."""

from twinloop.data.dataset import Dataset, DatasetCheck, check
from twinloop.data.episodes import LEROBOT_COLUMNS, Episode, EpisodeRecorder, load_lerobot

__all__ = ["LEROBOT_COLUMNS", "Dataset", "DatasetCheck", "Episode", "EpisodeRecorder", "check", "load_lerobot"]
