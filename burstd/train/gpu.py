"""GPU utilisation of this job's GPUs, from NVML (the driver's ``libnvidia-ml.so.1``), or None without one.

    gpu_utilization()  # [87.0, 91.0]: percent busy over the driver's last sample period, one per GPU

NVML comes with the NVIDIA driver wherever a GPU is, so this calls it through ctypes (four functions) rather than
asking every node for the ``nvidia-ml-py`` package. Which GPUs: Slurm's ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS``
(the node's indices, as NVML numbers them), else ``CUDA_VISIBLE_DEVICES`` when it holds indices, else all.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def _indices(env: Mapping[str, str], count: int) -> list[int]:
    for key in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(key, "").strip()
        if value:
            parts = [p.strip() for p in value.split(",")]
            if all(p.isdigit() for p in parts):
                return [i for i in (int(p) for p in parts) if i < count]
    return list(range(count))


def gpu_utilization(env: Mapping[str, str] | None = None, library: str = "libnvidia-ml.so.1") -> list[float] | None:
    """Percent busy of each of the job's GPUs, or None where NVML is missing or fails (never raises)."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        out = []
        for i in _indices(os.environ if env is None else env, count.value):
            handle = ctypes.c_void_p()
            rates = _Utilization()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) != 0):
                return None
            out.append(float(min(rates.gpu, 100)))
        return out or None
    except AttributeError:  # a library without these symbols
        return None
    finally:
        shutdown = getattr(nvml, "nvmlShutdown", None)
        if shutdown is not None:
            shutdown()
