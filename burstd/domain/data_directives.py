"""The parser of a batch script's data declarations (outside input: strict, fuzzed in tests/adversarial).

    needs = parse_data_directives(script_text, source="job 1234")   # -> DataNeeds, or DataDirectiveError

Directives live where ``#SBATCH`` lines do: in the comment block at the top of the script, before the first
command (sbatch stops reading there, and so does this). Three forms (docs/researchers.md):

* burstd's own: ``#BURSTD stage-in PATH [size=180GB] [sha256=HEX]``, ``#BURSTD stage-out PATH [size=...]``,
  ``#BURSTD data-never-leaves``;
* Slurm's burst-buffer staging lines, as the DataWarp form writes them and the burst_buffer/lua plugin's
  default directive passes them on: ``#DW stage_in source=PATH destination=PATH type=file|directory``,
  ``#DW stage_out ...``, the same after ``#BB`` or ``#BB_LUA``. The on-prem side is ``source`` for stage_in
  and ``destination`` for stage_out. Other burst-buffer directives (``jobdw``, ``persistentdw``...) are
  not about where data lives and are left to Slurm.

Any other ``#BURSTD`` word, a relative path, a ``..`` component, a control character, a bad size or digest is an
error naming the line: a declaration that is silently dropped would burst a job without its data.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from burstd.domain.data import DataItem, DataNeeds

MAX_DIRECTIVES = 256
MAX_PATH = 4096
MAX_BYTES = 10**18  # an exabyte: any larger size is a typo
_SCAN_LINES = 10_000  # a header longer than this is not a job script's
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9,
          "T": 10**12, "TB": 10**12, "P": 10**15, "PB": 10**15, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
          "TiB": 2**40, "PiB": 2**50}
_SIZE = re.compile(r"([0-9]{1,19})(?:\.([0-9]{1,9}))?([A-Za-z]{0,3})")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BB_PREFIXES = ("#DW", "#BB", "#BB_LUA")


class DataDirectiveError(ValueError):
    """A data directive that cannot be honoured; the message names the source and the line."""


def parse_size(text: str) -> int:
    """``180GB`` / ``1.5TiB`` / ``4096`` -> bytes (decimal units are powers of 10, ``KiB``... powers of 2)."""
    m = _SIZE.fullmatch(text)
    if not m or m.group(3) not in _UNITS:
        raise ValueError(f"size {text!r} is not a number with a unit (B, KB, MB, GB, TB, PB, KiB... PiB)")
    whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
    scale = _UNITS[unit]
    value = int(whole) * scale + (int(frac) * scale) // (10 ** len(frac)) if frac else int(whole) * scale
    if value > MAX_BYTES:
        raise ValueError(f"size {text!r} is over an exabyte")
    return value


def check_path(path: str) -> str:
    """An absolute, normalised on-prem path with no control characters and no ``..`` component."""
    if not path.startswith("/"):
        raise ValueError(f"path {path!r} is not absolute")
    if len(path) > MAX_PATH:
        raise ValueError(f"path is longer than {MAX_PATH} characters")
    if _CONTROL.search(path):
        raise ValueError(f"path {path!r} holds a control character")
    if ".." in path.split("/"):
        raise ValueError(f"path {path!r} has a '..' component")
    return posixpath.normpath(path) if path != "//" else "/"


def _item(path: str, options: list[str], allowed: tuple[str, ...]) -> DataItem:
    size: int | None = None
    digest: str | None = None
    seen: set[str] = set()
    for opt in options:
        key, eq, value = opt.partition("=")
        if not eq or key not in allowed:
            raise ValueError(f"unknown option {opt!r} (expected {', '.join(k + '=' for k in allowed)})")
        if key in seen:
            raise ValueError(f"option {key}= given twice")
        seen.add(key)
        if key == "size":
            size = parse_size(value)
        else:
            if not _SHA256.fullmatch(value):
                raise ValueError(f"sha256={value!r} is not 64 lower-case hex digits")
            digest = "sha256:" + value
    return DataItem(check_path(path), size, digest)


def _burstd_line(words: list[str], inputs: list[DataItem], outputs: list[DataItem]) -> bool:
    """One ``#BURSTD`` directive; returns True for data-never-leaves."""
    if not words:
        raise ValueError("#BURSTD without a directive (stage-in, stage-out or data-never-leaves)")
    word, rest = words[0], words[1:]
    if word == "data-never-leaves":
        if rest:
            raise ValueError("data-never-leaves takes no arguments")
        return True
    if word not in ("stage-in", "stage-out"):
        raise ValueError(f"unknown #BURSTD directive {word!r} (stage-in, stage-out or data-never-leaves)")
    if not rest:
        raise ValueError(f"{word} needs a path")
    allowed = ("size", "sha256") if word == "stage-in" else ("size",)
    (inputs if word == "stage-in" else outputs).append(_item(rest[0], rest[1:], allowed))
    return False


def _bb_line(words: list[str], inputs: list[DataItem], outputs: list[DataItem]) -> None:
    """A burst-buffer ``stage_in`` / ``stage_out`` line (others are Slurm's business)."""
    if not words or words[0] not in ("stage_in", "stage_out"):
        return
    opts: dict[str, str] = {}
    for opt in words[1:]:
        key, eq, value = opt.partition("=")
        if not eq or key not in ("source", "destination", "type"):
            raise ValueError(f"unknown {words[0]} option {opt!r} (source=, destination=, type=)")
        if key in opts:
            raise ValueError(f"option {key}= given twice")
        opts[key] = value
    if opts.get("type", "file") not in ("file", "directory"):
        raise ValueError(f"type={opts['type']!r} is not file or directory")
    side = "source" if words[0] == "stage_in" else "destination"
    if side not in opts:
        raise ValueError(f"{words[0]} needs {side}= (the on-prem path)")
    (inputs if words[0] == "stage_in" else outputs).append(DataItem(check_path(opts[side])))


def parse_data_directives(script: str, source: str = "the batch script") -> DataNeeds:
    """The data declared in a batch script's header; raises ``DataDirectiveError`` naming ``source`` and line."""
    inputs: list[DataItem] = []
    outputs: list[DataItem] = []
    never = False
    count = 0
    # lines end at '\n' only, as for sbatch (str.splitlines would also split at U+0085 inside a path)
    for lineno, raw in enumerate(script.split("\n")[:_SCAN_LINES], start=1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break  # the first command ends the header, as for #SBATCH
        head = line.split(maxsplit=1)[0]
        if head != "#BURSTD" and head not in _BB_PREFIXES:
            continue
        count += 1
        try:
            if count > MAX_DIRECTIVES:
                raise ValueError(f"more than {MAX_DIRECTIVES} data directives")
            words = shlex.split(line[len(head):], comments=False, posix=True)
            if head == "#BURSTD":
                never = _burstd_line(words, inputs, outputs) or never
            else:
                _bb_line(words, inputs, outputs)
        except ValueError as exc:  # shlex's unbalanced quotes too
            raise DataDirectiveError(f"{source}, line {lineno}: {exc}") from None
    for kind, items in (("stage-in", inputs), ("stage-out", outputs)):
        paths = [i.path for i in items]
        dup = next((p for p in paths if paths.count(p) > 1), None)
        if dup is not None:
            raise DataDirectiveError(f"{source}: {kind} {dup} is declared twice")
    return DataNeeds(tuple(inputs), tuple(outputs), never)
