"""What a run sees of its GPUs (imported by the daemons of ``bench/gpu_check.py``).

The device count and UUIDs come from CUDA itself, not from the environment Lakeshore set:
``torch.cuda`` where torch is installed, else the driver API (``libcuda.so.1``) through
ctypes, so the check needs nothing beyond the NVIDIA driver.
"""

from __future__ import annotations

import ctypes
import os
import time
import uuid

_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE: what cuInit says when no device is visible


def _driver_uuids() -> list[str]:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    if rc == _NO_DEVICE:
        return []
    if rc != 0:
        raise RuntimeError(f"cuInit failed with CUDA error {rc}")
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        raise RuntimeError("cuDeviceGetCount failed")
    uuids = []
    for ordinal in range(count.value):
        device = ctypes.c_int()
        raw = (ctypes.c_ubyte * 16)()
        cuda.cuDeviceGet(ctypes.byref(device), ordinal)
        cuda.cuDeviceGetUuid(raw, device)
        uuids.append(f"GPU-{uuid.UUID(bytes=bytes(raw))}")
    return uuids


def _torch_uuids() -> list[str] | None:
    try:
        import torch  # noqa: PLC0415 (optional: the driver API is the fallback)
    except ImportError:
        return None
    return [
        f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(torch.cuda.device_count())
    ]


def seen(hold_s: float = 0.0) -> dict[str, object]:
    """The run's GPU environment and the devices CUDA shows it, held for ``hold_s``."""
    start = time.time()
    torch_uuids = _torch_uuids()
    uuids = torch_uuids if torch_uuids is not None else _driver_uuids()
    time.sleep(hold_s)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "order": os.environ.get("CUDA_DEVICE_ORDER"),
        "lakeshore_gpus": os.environ.get("LAKESHORE_GPUS"),
        "uuids": uuids,
        "via": "torch" if torch_uuids is not None else "libcuda",
        "start": start,
        "end": time.time(),
    }
