"""Constructor-argument validation shared by the FP units (amaranth-soc style messages)."""

import functools

from ncrtl.model.fp.formats import Format, get_format

__all__ = ["check_formats", "check_positive_int", "format_names", "validated_init"]


def check_formats(formats, what, *, allow_scale=False):
    """Validate a non-empty list of format names / :class:`Format` objects; return Formats.

    Raises
    ------
    TypeError
        If ``formats`` is a string or not iterable.
    ValueError
        If it is empty, names an unknown format, repeats a format, or lists the E8M0 scale
        format where an operand is expected.
    """
    if isinstance(formats, (str, Format)):
        raise TypeError(f"{what} must be a list of format names, not {formats!r}")
    try:
        items = list(formats)
    except TypeError:
        raise TypeError(f"{what} must be a list of format names, not {formats!r}") from None
    if not items:
        raise ValueError(f"{what} must list at least one format")
    out = []
    for item in items:
        try:
            fmt = get_format(item)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if fmt in out:
            raise ValueError(f"{what} lists format {fmt.name!r} more than once")
        if fmt.special == "e8m0" and not allow_scale:
            raise ValueError(f"{what}: e8m0 is a scale format, not a multiplier operand")
        out.append(fmt)
    return out


def check_positive_int(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TypeError(f"{what} must be a positive integer, not {value!r}")
    return value


def format_names(formats):
    return "[" + ", ".join(f.name for f in formats) + "]"


def validated_init(init):
    """Decorate a component's ``__init__``: a refused construction is silenced.

    Amaranth warns about every elaboratable that is created but never elaborated, including
    one whose constructor raised (the object exists from ``__new__`` on): mark those as
    deliberately unused so that a caught ``TypeError`` / ``ValueError`` leaves no warning.
    """
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except Exception:
            self._MustUse__silence = True
            raise
    return wrapper
