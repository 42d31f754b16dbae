"""The per-user cache of variants compiled at run time (docs/kernels.md, "Variants compiled when needed").

``<root>/<key>/<variant>.so`` is a variant library, ``<variant>.json`` beside it its manifest (the library's
sha256, written after the library), ``<variant>.cu`` the source it was compiled from and ``<variant>.lock``
the lock its compile holds. The root is ``$WAVETUNE_CACHE_DIR``, else ``$XDG_CACHE_HOME/wavetune``, else
``~/.cache/wavetune``; the key names everything a compiled object depends on (``CacheKey``).

NOTES: loading a shared object runs its code, so the cache must be the user's own: its directories are
created 0700, a directory of another user or one that group or others can write is refused, and an entry
is loaded only while its bytes match the manifest's sha256 (a truncated or corrupt entry is compiled again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from filelock import FileLock, Timeout

CACHE_ENV = "WAVETUNE_CACHE_DIR"

Loaded = TypeVar("Loaded")


class CacheError(RuntimeError):
    """A cache directory wavetune cannot use or must not load code from; the message names it and the fix."""


CACHE_FIX = f"set {CACHE_ENV} to a directory of your own"


def cache_root() -> Path:
    """``$WAVETUNE_CACHE_DIR``, else ``$XDG_CACHE_HOME/wavetune``, else ``~/.cache/wavetune``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wavetune"
    except RuntimeError as exc:  # no home directory
        raise CacheError(f"wavetune's kernel cache has no directory ({exc}): {CACHE_FIX}") from exc


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """What a compiled variant library depends on besides its variant: one cache directory per value."""

    family: str
    config_space_hash: str  # of the family's config space (variant ids and names)
    arch: str  # "sm_90a"
    cuda_version: str  # nvcc's release, "13.0"
    cutlass_version: str  # "4.2.0"
    abi_version: int  # WAVETUNE_ABI_VERSION of the kernel library
    sources_digest: str  # of the templates and headers the variants are compiled from

    @property
    def dirname(self) -> str:
        return (f"{self.family}-{self.config_space_hash}-{self.arch}-cuda{self.cuda_version}-"
                f"cutlass{self.cutlass_version}-abi{self.abi_version}-{self.sources_digest}")


def private_dir(path: Path) -> Path:
    """``path``, created for this user only (0700) where missing; an existing one must be this user's and
    not writable by group or others."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:  # a file in the way, a read-only file system, no permission
        raise unusable(path, exc) from exc
    if info.st_uid != os.geteuid():
        raise CacheError(f"wavetune's kernel cache {path} belongs to user id {info.st_uid}, not to this user "
                         f"({os.geteuid()}); wavetune loads compiled code from it, so it must be yours: {CACHE_FIX}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"wavetune's kernel cache {path} is writable by group or others (mode "
                         f"{stat.S_IMODE(info.st_mode):o}); wavetune loads compiled code from it: run chmod go-w "
                         f"{path}, or {CACHE_FIX}")
    return path


def unusable(path: Path, exc: OSError) -> CacheError:
    """The error for a cache directory that cannot be made or written, with what the system said."""
    return CacheError(f"wavetune's kernel cache {path} cannot be used ({exc.strerror or exc}: "
                      f"{exc.filename or path}): {CACHE_FIX}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class KernelCache:
    """One key's directory of the cache: compiled entries by variant name, each compiled once under a lock."""

    def __init__(self, key: CacheKey, root: Path | None = None):
        self.key = key
        root = private_dir(root or cache_root())
        self.dir = private_dir(root / key.dirname)

    def library(self, name: str) -> Path:
        return self.dir / f"{name}.so"

    def manifest(self, name: str) -> Path:
        return self.dir / f"{name}.json"

    def verified(self, name: str) -> Path | None:
        """The entry's library if its manifest records exactly its bytes, else None."""
        try:
            recorded = json.loads(self.manifest(name).read_text())
            return self.library(name) if recorded["sha256"] == file_sha256(self.library(name)) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def load_cached(self, name: str, load: Callable[[Path], Loaded]) -> Loaded | None:
        """``load(library)`` of the entry if the cache holds it verified and it loads, else None; nothing is
        compiled, and an entry being compiled now (its lock is held) is not waited for. ``load`` raises
        ValueError for a library that does not load."""
        try:
            with self._lock(name, timeout=0):
                return self._load_verified(name, load)
        except Timeout:
            return None

    def load(self, name: str, compile: Callable[[Path], dict], load: Callable[[Path], Loaded]) -> tuple[Loaded, bool]:
        """``load(library)`` of the entry, compiled first by ``compile(output)`` unless the cache holds it verified
        and it loads; returns what ``load`` returned and whether it was compiled. ``compile`` writes the library
        to ``output`` and returns what the manifest should record of how."""
        with self._lock(name):
            if (loaded := self._load_verified(name, load)) is not None:
                return loaded, False
            return load(self._compile(name, compile)), True

    @contextlib.contextmanager
    def _lock(self, name: str, timeout: float = -1):
        # NOTES: one lock file per entry, so different variants compile in parallel. A new FileLock each time
        # takes the lock through a file descriptor of its own, which also excludes other threads of this process.
        lock = FileLock(str(self.dir / f"{name}.lock"), timeout=timeout)
        try:
            lock.acquire()
        except Timeout:
            raise
        except OSError as exc:  # the lock file cannot be made: a read-only cache
            raise unusable(self.dir, exc) from exc
        try:
            yield
        finally:
            lock.release()

    def _load_verified(self, name: str, load: Callable[[Path], Loaded]) -> Loaded | None:
        if (library := self.verified(name)) is None:
            return None
        try:
            return load(library)
        except ValueError:
            return None  # an entry that does not load is compiled again

    def _compile(self, name: str, compile: Callable[[Path], dict]) -> Path:
        """Compile into a temporary file of the same directory, then rename it into place (a reader never sees
        a partial library) and record its sha256 in the manifest, written last."""
        self.manifest(name).unlink(missing_ok=True)
        for stale in self.dir.glob(f".{name}.*.tmp"):  # left by a process that ended mid-compile
            stale.unlink(missing_ok=True)
        fd, temp = tempfile.mkstemp(dir=self.dir, prefix=f".{name}.", suffix=".so.tmp")
        os.close(fd)
        try:
            how = compile(Path(temp))
            record = {"variant": name, "sha256": file_sha256(Path(temp)), "key": dataclasses.asdict(self.key), **how}
            os.replace(temp, self.library(name))
        finally:
            Path(temp).unlink(missing_ok=True)
        self._write_atomically(self.manifest(name), json.dumps(record, indent=1) + "\n")
        return self.library(name)

    def _write_atomically(self, path: Path, text: str) -> None:
        fd, temp = tempfile.mkstemp(dir=self.dir, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, path)
