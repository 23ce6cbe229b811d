"""Where a test kernel's line is: the ``file:line`` an error message names."""


def kernel_line(path, tag):
    """``path:N`` of the line of kernel file ``path`` marked ``# LINE tag``."""
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if f"# LINE {tag}" in line:
                return f"{path}:{i}"
    raise AssertionError(f"{path} has no line marked # LINE {tag}")
