"""Calibration data: presets by name, local files, deterministic token windows."""
from .presets import CALIBRATION_PRESETS, EVAL_PRESETS, Preset
from .sampling import CalibrationSet, build_calibration_set, calibration_documents, load_documents
from .sources import Documents, data_dir, read_local_file, resolve_preset

__all__ = [
    "CALIBRATION_PRESETS",
    "EVAL_PRESETS",
    "Preset",
    "CalibrationSet",
    "build_calibration_set",
    "calibration_documents",
    "load_documents",
    "Documents",
    "data_dir",
    "read_local_file",
    "resolve_preset",
]
