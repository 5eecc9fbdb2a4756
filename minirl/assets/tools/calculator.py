"""The tool of Chapter 13's task, written as a reader writes one: a plain file that only imports `function_tool`.

Load it with `actor_rollout_ref.rollout.multi_turn.function_tool_path=<this file>` (the tool task's warm start
does); the schema the model is given is inferred from the signature and the docstring.
"""

from minirl.tools import function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Add two whole numbers exactly.

    Args:
        a: the first number.
        b: the second number.
    """
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int) or not isinstance(b, int):
        raise TypeError(f"add takes two whole numbers, got {a!r} and {b!r}")
    return str(a + b)
