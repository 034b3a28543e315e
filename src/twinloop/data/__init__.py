"""Episodes and datasets: Parquet files with LeRobot-compatible columns, import and export."""

from twinloop.data.episodes import (
    LEROBOT_COLUMNS,
    Dataset,
    Episode,
    EpisodeRecorder,
    atomic_write,
    load_lerobot,
)

__all__ = ["LEROBOT_COLUMNS", "Dataset", "Episode", "EpisodeRecorder", "atomic_write", "load_lerobot"]
