"""A replay buffer's one-step transitions kept again on an accelerator (``buffer.on_device``).

Each slot's observation, action, reward, termination and next observation (the next one
stored whole; on the host it is the successor's row or an aside), and the fields the algorithm
declared beside them. The buffer writes each block here as it stores it, in one copy per
field; a batch is then gathered on the device after one copy of its indices, rather than
gathered from the host arrays and copied up field by field at every gradient step. The host
arrays stay what checkpoints, n-step windows and rollouts read; a restored state is copied
over whole.

:class:`DeviceMirror` holds named fields of any shape and dtype; the storage
(:meth:`rltrain.data.storage.ReplayBuffer.mirror_on`) says which. Imports numpy and torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

#: a mirrored field: its shape per slot and its dtype
Layout = Mapping[str, tuple[tuple[int, ...], np.dtype]]


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def _numpy_dtype(tensor: torch.Tensor) -> np.dtype:
    return torch.zeros(0, dtype=tensor.dtype).numpy().dtype


class DeviceMirror:
    """Fields of ``slots`` slots on ``device``, named and laid out by ``layout`` (in the
    order :meth:`write` takes and :meth:`gather` gives them)."""

    def __init__(self, device: torch.device, slots: int, layout: Layout) -> None:
        self.device = device
        self.tensors = {name: torch.zeros((slots, *shape), dtype=_torch_dtype(dtype),
                                          device=device)
                        for name, (shape, dtype) in layout.items()}

    @staticmethod
    def bytes_per_slot(layout: Layout) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                   for shape, dtype in layout.values())

    def _up(self, array: np.ndarray, dtype: np.dtype) -> torch.Tensor:
        """A host array on the device. To CUDA through page-locked memory, in a copy the host
        does not wait for (a copy from pageable memory waits for the device's queue: a sync
        at every write and every batch); the caching host allocator keeps the staging block
        until the copy is done."""
        host = torch.from_numpy(np.ascontiguousarray(array, dtype=dtype))
        if self.device.type != "cuda":
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def write(self, flat: np.ndarray, *rows: np.ndarray) -> None:
        """Rows of each field, in the layout's order, into flat slots ``flat``."""
        if len(flat) == 0:
            return
        index = self._up(flat, np.dtype(np.int64))
        for tensor, value in zip(self.tensors.values(), rows, strict=True):
            rows_up = self._up(value, _numpy_dtype(tensor))
            tensor.index_copy_(0, index, rows_up.reshape(len(flat), *tensor.shape[1:]))

    def gather(self, flat: np.ndarray, names: tuple[str, ...] | None = None
               ) -> tuple[torch.Tensor, ...]:
        """The fields ``names`` (default: all, in the layout's order) at flat slots
        ``flat``."""
        index = self._up(flat, np.dtype(np.int64))
        tensors = self.tensors.values() if names is None else (self.tensors[n] for n in names)
        return tuple(tensor.index_select(0, index) for tensor in tensors)
