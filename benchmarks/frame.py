"""corvid.frame against pandas and polars (a placeholder until the section lands)."""


def measure(quick: bool):
    return None


def report(result, out) -> None:
    print("frame: not measured yet", file=out)
