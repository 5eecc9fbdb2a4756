"""Small helpers the chapter notebooks share: show library source, read the fast-mode switch."""

from __future__ import annotations

import inspect
import os

FAST_ENV = "MINIRL_FAST"


def fast_mode() -> bool:
    """True when MINIRL_FAST=1: notebooks shrink their runs so the test suite can execute them."""
    return os.environ.get(FAST_ENV, "0") not in ("", "0", "false", "False")


def show_source(obj, collapsed: bool = False):
    """Display the source of a minirl function or class, read from the library (never copied).

    Returns an IPython Markdown object (a highlighted code block) when IPython is available,
    otherwise the source text. With collapsed=True it returns a closed `<details>` block (HTML,
    highlighted with pygments): chapters show the code that answers an exercise only that way, after
    the exercises, so a reader does not see the answer before trying.
    """
    source = inspect.getsource(obj)
    module = inspect.getmodule(obj).__name__.replace(".", "/") + ".py"
    try:
        from IPython.display import HTML, Markdown
    except ImportError:  # pragma: no cover - IPython ships with jupyter
        return source
    if not collapsed:
        return Markdown(f"`{module}`\n\n```python\n{source}```")
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    code = highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
    return HTML(f"<details><summary><code>{module}::{obj.__qualname__}</code> (open after the exercises)</summary>"
                f"{code}</details>")
