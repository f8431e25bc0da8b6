"""What a pickle would import, read without unpickling it.

torch's weights-only loader refuses a pickle that imports anything beyond tensors and plain data; for a raw
pickle (``pickle.dump``, not torch's zip format) its error names an opcode ("Unsupported operand 149"), not
what the file wanted to import. :func:`first_pickle_global` reads that from the pickle's opcodes
(``pickletools.genops``: nothing is imported or run), so a refusal can name it in one line.
"""

from __future__ import annotations

from pathlib import Path


def first_pickle_global(path: Path) -> str | None:
    """The first ``module.name`` a pickle (a raw one, or the ``data.pkl`` of torch's zip format) would
    import that torch's weights-only loader does not allow (else its first import), read from its opcodes
    without running any of them; None when it imports nothing or cannot be read."""
    import io
    import pickletools
    import zipfile

    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        allowed = set(_get_allowed_globals())
    except (ImportError, AttributeError):  # a private helper: without it, the first import is named
        allowed = set()
    found: list[str] = []
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                member = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
                data = z.read(member) if member else b""
        else:
            data = Path(path).read_bytes()
        strings: list[str] = []
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name in ("GLOBAL", "INST"):  # arg: "module name"
                found.append(".".join(str(arg).split(" ", 1)))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:  # module and name pushed just before
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str) and ("UNICODE" in op.name or "STRING" in op.name):
                strings.append(arg)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        pass  # a cut pickle: what was read so far
    return next((g for g in found if g not in allowed), found[0] if found else None)
