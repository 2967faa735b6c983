"""Language-model decode and prefill against transformers (a placeholder until the section lands)."""


def measure(quick: bool):
    return None


def report(result, out) -> None:
    print("llm_decode: not measured yet", file=out)
