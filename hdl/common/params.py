"""Constructor-argument validation of every component (amaranth-soc style messages).

The rule of the project: a wrong *kind* of argument is a :class:`TypeError` ("must be an
integer, not 'x'"), a wrong *value* of the right kind a :class:`ValueError` ("must be at least
1, not 0").  Every message names the argument and the rule.  Decorate a component's
``__init__`` with :func:`validated_init` so that a refused construction leaves no Amaranth
"never elaborated" warning behind.
"""

import functools

from amaranth.hdl import Elaboratable

from ncrtl.model.fp.formats import Format, get_format

__all__ = ["check_int", "check_bool", "check_formats", "format_names", "validated_init"]


def check_int(value, what, *, minimum=None, maximum=None):
    """``value`` if it is an integer (not a bool) within ``[minimum, maximum]``.

    Raises
    ------
    TypeError
        Not an integer.
    ValueError
        Out of range.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be at most {maximum}, not {value}")
    return value


def check_bool(value, what):
    """``value`` if it is a bool; :class:`TypeError` otherwise."""
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, not {value!r}")
    return value


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


def format_names(formats):
    return "[" + ", ".join(f.name for f in formats) + "]"


def validated_init(init):
    """Decorate a component's ``__init__``: a refused construction is silenced.

    Amaranth warns about every elaboratable that is created but never elaborated, including
    one whose constructor raised (the object exists from ``__new__`` on), and the
    subcomponents it had already built: mark those as deliberately unused so that a caught
    ``TypeError`` / ``ValueError`` leaves no warning.
    """

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except Exception:
            self._MustUse__silence = True
            for value in vars(self).values():
                for item in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(item, Elaboratable):
                        item._MustUse__silence = True
            raise

    return wrapper
