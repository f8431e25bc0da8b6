"""User-facing errors: one line that says what was wrong and what to do."""


class SeedRLError(Exception):
    """An error caused by user input or the environment, shown to the user as one line."""


def unknown_name(kind: str, name: str, valid: list[str] | tuple[str, ...]) -> SeedRLError:
    return SeedRLError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")
