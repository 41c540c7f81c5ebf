"""Reading ``torch.save`` files without running code from them: slime's rollout dumps (docs/ingest.md, "slime
rollout dumps").

:func:`load` has two readers:

* **torch**, when it is importable (the ``slime`` extra): ``torch.load(path, weights_only=True,
  map_location="cpu")``, torch's own allow-listed unpickler; tensors in the result become Python lists.
* **built-in**, without torch: the zip format (one ``<archive>/data.pkl`` pickle beside ``byteorder``, ``version``,
  ``.data/serialization_id`` and one ``<archive>/data/<key>`` per tensor storage) or the legacy format (pickles of
  the magic number, protocol version 1001, the system info, the object and the storage keys, one after another).
  The pickle is read by :class:`_PlainUnpickler`, which resolves **no** global and **no** persistent id, so only
  dicts, lists, tuples, strings, numbers, booleans and None can come out of it and no callable can ever be
  reached. A tensor (a storage persistent id, a ``torch`` global) or any other class is refused with
  :class:`DumpRefused`, whose message names the extra that reads it.

``$SHOPSIM_WH_SLIME_READER`` = ``builtin`` forces the built-in reader (``torch`` requires torch; default ``auto``).
Both are bounded: a file larger than :func:`max_dump_bytes` (1 GiB, ``$SHOPSIM_WH_MAX_DUMP_BYTES``) is refused
before it is opened, the pickle member is read at most that far, and the loaded object is walked with a node budget
and a depth limit (a pickle can reference one list many times; anything that renders it whole, such as JSON, would
grow exponentially) while tensors are turned into lists and sets, bytes and the like are refused.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from ..core.errors import IngestError
from ._io import parse_size

DEFAULT_MAX_DUMP_BYTES = 1024 ** 3
MAX_DUMP_ENV = "SHOPSIM_WH_MAX_DUMP_BYTES"
READER_ENV = "SHOPSIM_WH_SLIME_READER"
EXTRA_HINT = "pip install 'shopsim-wh[slime]' (torch) to read it"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
LEGACY_HEAD = b"\x80\x02\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little")
ZIP_HEAD = b"PK\x03\x04"
MAX_DEPTH = 64


class DumpRefused(IngestError):
    """A dump that is not read: too large, not a ``torch.save`` file, or holding what a plain-data reader must not
    build (the message says what to do)."""


def max_dump_bytes(value: str | int | None = None) -> int:
    """The largest dump read: ``value``, else ``$SHOPSIM_WH_MAX_DUMP_BYTES``, else 1 GiB (a dump is unpickled whole:
    its Python objects take several times its size in memory)."""
    if value is not None:
        return parse_size(value, "the maximum dump size")
    if env := os.environ.get(MAX_DUMP_ENV, "").strip():
        return parse_size(env, f"${MAX_DUMP_ENV}")
    return DEFAULT_MAX_DUMP_BYTES


def is_torch_save(head: bytes) -> bool:
    """Whether the first bytes are those of a ``torch.save`` file (a zip archive, or the legacy magic number)."""
    return head.startswith(ZIP_HEAD) or head.startswith(LEGACY_HEAD)


def looks_like_dump(path: str | os.PathLike) -> bool:
    """A ``torch.save`` file whose pickle starts as slime's dump does (``dict(rollout_id=..., samples=...)``), not
    a model checkpoint: the zip's ``data.pkl`` (or the legacy format's first KiB) names ``rollout_id`` early."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
        if head.startswith(LEGACY_HEAD):
            return b"rollout_id" in head
        if not head.startswith(ZIP_HEAD):
            return False
        with zipfile.ZipFile(path) as z:
            pkl = [i for i in z.infolist() if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
            if len(pkl) != 1:
                return False
            with z.open(pkl[0]) as f:
                return b"rollout_id" in f.read(64)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return False


def check_size(path: str | os.PathLike, limit: int) -> int:
    """The file's size; :class:`DumpRefused` when it is over ``limit`` (checked before the file is read)."""
    p = Path(path)
    size = p.stat().st_size
    if size > limit:
        raise DumpRefused(f"{p.name} is {size} bytes, more than the {limit}-byte limit for a slime dump (it is "
                          f"unpickled whole, into several times its size in memory); raise ${MAX_DUMP_ENV} if it "
                          "is a real dump")
    return size


def load(path: str | os.PathLike, limit: int | None = None) -> tuple[object, str]:
    """``(object, reader)``: the dump's object as plain Python data and the reader used (``torch`` or
    ``builtin``); :class:`DumpRefused` when it cannot be read safely."""
    p = Path(path)
    limit = max_dump_bytes() if limit is None else limit
    size = check_size(p, limit)
    choice = os.environ.get(READER_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "builtin", "torch"):
        raise DumpRefused(f"${READER_ENV} must be auto, builtin or torch, not {choice!r}")
    torch = _torch() if choice != "builtin" else None
    if choice == "torch" and torch is None:
        raise DumpRefused(f"${READER_ENV}=torch but torch is not installed: {EXTRA_HINT}")
    if torch is not None:
        obj, reader = _torch_load(torch, p), "torch"
    else:
        obj, reader = _builtin_load(p, limit), "builtin"
    walk = _Walk(budget=4 * size + 100_000, tensor=getattr(torch, "Tensor", None), name=p.name)
    return walk.plain(obj, 0, "dump"), reader


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_load(torch, p: Path):
    try:
        return torch.load(p, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DumpRefused(f"{p.name}: torch.load(weights_only=True) does not read it: {first[:300]}") from None


# ---- the built-in reader ------------------------------------------------------------------------------------------


class _Tensor(Exception):
    pass


class _Global(Exception):
    def __init__(self, module: str, name: str):
        super().__init__(f"{module}.{name}")
        self.module, self.name = module, name


class _PlainUnpickler(pickle.Unpickler):
    """Resolves nothing: every global (GLOBAL, STACK_GLOBAL, EXT*) and every persistent id raises, so REDUCE,
    BUILD, NEWOBJ and INST never get a callable or a class."""

    def find_class(self, module, name):
        raise _Global(str(module), str(name))

    def persistent_load(self, pid):
        raise _Tensor()


def _builtin_load(p: Path, limit: int):
    with open(p, "rb") as f:
        head = f.read(len(LEGACY_HEAD))
    try:
        if head.startswith(ZIP_HEAD):
            return _zip_load(p, limit)
        if head.startswith(LEGACY_HEAD):
            return _legacy_load(p)
    except _Tensor:
        raise DumpRefused(f"{p.name} holds tensors (a tensor storage); the built-in reader reads plain lists, dicts, "
                          f"numbers and strings only: {EXTRA_HINT}") from None
    except _Global as g:
        what = "tensors" if g.module.split(".")[0] == "torch" else f"Python objects of class {g}"
        raise DumpRefused(f"{p.name} holds {what} ({g}); the built-in reader builds plain lists, dicts, numbers and "
                          f"strings only, never a class: {EXTRA_HINT}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, MemoryError,
            zipfile.BadZipFile, RecursionError) as e:
        raise DumpRefused(f"{p.name} is not a readable torch.save file: {type(e).__name__}: {str(e)[:200]}") from None
    raise DumpRefused(f"{p.name} is not a torch.save file (neither a zip archive nor the legacy format); a slime dump "
                      "is what --save-debug-rollout-data writes")


def _zip_load(p: Path, limit: int):
    with zipfile.ZipFile(p) as z:
        infos = z.infolist()
        pkl = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
        if len(pkl) != 1:
            raise DumpRefused(f"{p.name} is a zip archive but not a torch.save file (it must hold exactly one "
                              f"<archive>/data.pkl, it holds {len(pkl)})")
        prefix = pkl[0].filename[: -len("data.pkl")]
        storages = [i for i in infos if i.filename.startswith(prefix + "data/")]
        if storages:
            raise _Tensor()
        if pkl[0].file_size > limit:
            raise DumpRefused(f"{p.name}: its pickle is {pkl[0].file_size} bytes, more than the {limit}-byte limit; "
                              f"raise ${MAX_DUMP_ENV} if it is a real dump")
        with z.open(pkl[0]) as f:
            data = f.read(limit + 1)
    if len(data) > limit:
        raise DumpRefused(f"{p.name}: its pickle unpacks past the {limit}-byte limit")
    import io

    return _PlainUnpickler(io.BytesIO(data)).load()


def _legacy_load(p: Path):
    with open(p, "rb") as f:
        if _PlainUnpickler(f).load() != LEGACY_MAGIC:
            raise pickle.UnpicklingError("bad magic number")
        if (proto := _PlainUnpickler(f).load()) != LEGACY_PROTOCOL:
            raise pickle.UnpicklingError(f"legacy protocol version {proto!r}, expected {LEGACY_PROTOCOL}")
        _PlainUnpickler(f).load()  # sys_info
        obj = _PlainUnpickler(f).load()
        keys = _PlainUnpickler(f).load()
    if keys:
        raise _Tensor()
    return obj


# ---- the bounded walk ---------------------------------------------------------------------------------------------


class _Walk:
    """Copies the loaded object into plain data (tensors -> lists, tuples -> lists), refusing other types, counting
    every node it visits (shared references count each time) against ``budget``."""

    def __init__(self, budget: int, tensor, name: str):
        self.budget, self.tensor, self.name = budget, tensor, name

    def _spend(self, n: int, where: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise DumpRefused(f"{self.name}: its object graph is far larger than the file (shared references, at "
                              f"{where}); refused rather than expanded")

    def plain(self, obj, depth: int, where: str):
        if depth > MAX_DEPTH:
            raise DumpRefused(f"{self.name}: nesting deeper than {MAX_DEPTH} levels at {where}")
        t = type(obj)
        if obj is None or t in (str, int, float, bool):
            self._spend(1, where)
            return obj
        if t in (list, tuple):
            self._spend(len(obj) + 1, where)
            if all(type(x) in (int, float) for x in obj):
                return list(obj)
            return [self.plain(x, depth + 1, f"{where}[{i}]") for i, x in enumerate(obj)]
        if isinstance(obj, dict):
            self._spend(len(obj) + 1, where)
            out = {}
            for k, v in obj.items():
                if type(k) not in (str, int):
                    raise DumpRefused(f"{self.name}: a key of type {type(k).__name__} at {where}; a slime dump's "
                                      "keys are strings")
                out[k] = self.plain(v, depth + 1, f"{where}.{k}")
            return out
        if self.tensor is not None and isinstance(obj, self.tensor):
            self._spend(obj.numel() + 1, where)
            return obj.tolist()
        raise DumpRefused(f"{self.name}: a {t.__name__} value at {where}; a slime dump holds lists, dicts, numbers "
                          "and strings")
