"""Every verl citation in the book names something that exists in verl 0.9.1.

The book, the library's docstrings, the exercises and the benchmarks cite verl code as
`verl/path.py`, `verl/path.py::name`, `verl/path.py::Class.method`, paths relative to the `verl/`
package (`trainer/ppo/ray_trainer.py`), bare file names (`core_algos.py::agg_loss`), dotted modules
(`verl.trainer.main_ppo`) and `Class.method` of verl classes (`RayPPOTrainer.fit`). They also cite
verl's example scripts and docs (`examples/...`, `docs/...`), which are not in the wheel.

This test extracts those citations with regular expressions and checks each one:
- a verl file exists in the installed package (found without importing verl's heavy __init__);
- a `::name` is a def, a class, a method of a class, or a module-level assignment in that file
  (read with `ast`);
- an `examples/` or `docs/` path is in verl_v0.9.0_tree.txt, the file list of verl's v0.9.0 tag.

An old name that verl 0.9 removed may still be cited, but only if it is in MOVED below and the
sentence that cites it says it moved and names its 0.9.1 home.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TREE = Path(__file__).with_name("verl_v0.9.0_tree.txt")

# Where the book cites verl (globs relative to the repository root).
SOURCES = ("chapters/*.ipynb", "chapters/*.md", "README.md", "minirl/README.md", "minirl/**/*.py",
           "exercises/*.py", "solutions/*.py", "tests/exercises/*.py", "bench/*.py")

# Old verl names the book may cite, each only in a sentence that says it moved (MOVED_WORDS) and
# names its verl 0.9.1 home (the value's file name). Keep this list short: cite the 0.9.1 name.
MOVED = {
    "verl/workers/actor/dp_actor.py::DataParallelPPOActor.update_policy":
        "verl/workers/engine_workers.py::TrainingWorker.train_mini_batch",
}
MOVED_WORDS = re.compile(r"\b(moved|renamed|removed|replaced|merged|formerly|no longer)\b"
                         r"|移到|移至|删除|改名|更名|合并|不再", re.IGNORECASE)  # the Chinese pages say it so

# Not citations: the contributors' guide shows the form a docstring citation takes.
PLACEHOLDERS = ("verl/path.py::function",)

# Where older verl names went (verl-0.9-facts.md, section 2), to say so in a failure message.
# The first four are also caught when cited without a path or `.py` (`dp_actor._forward_micro_batch`).
NEW_HOMES = {
    "dp_actor": "verl/workers/engine_workers.py::TrainingWorker.train_mini_batch, loss "
                "verl/workers/utils/losses.py::ppo_loss, forward pass "
                "verl/workers/engine/fsdp/transformer_impl.py::FSDPEngineWithLMHead",
    "dp_critic": "the same TrainingWorker for the critic, loss verl/workers/utils/losses.py::value_loss, "
                 "forward pass verl/workers/engine/fsdp/transformer_impl.py::FSDPEngineWithValueHead",
    "fsdp_workers": "verl/workers/engine_workers.py (TrainingWorker, ActorRolloutRefWorker)",
    "fsdp_sft_trainer": "verl/trainer/sft_trainer.py",
    "utils/tokenizer.py": "verl/utils/tokenizer/ (a package; hf_tokenizer is in tokenizer/tokenizer.py)",
    "run_qwen3-8b.sh": "examples/grpo_trainer/run_qwen3_8b_fsdp.sh",
    "run_deepseek7b_llm.sh": "examples/ppo_trainer/run_qwen3_8b_fsdp.sh",
}
REMOVED_MODULES = ("dp_actor", "dp_critic", "fsdp_workers", "fsdp_sft_trainer")

_EDGE = r"(?<![\w./-])"  # a citation starts a token: not inside a longer path, URL or name
_SYMBOL = r"(?:::(?P<symbol>[A-Za-z_*][\w.*]*))?"
PATH_RE = re.compile(_EDGE + r"(?P<path>(?:[\w*-]+/)+(?:[\w*-]+\.(?:py|sh|md|rst|yaml)\b|\*)?)" + _SYMBOL)
FILE_RE = re.compile(_EDGE + r"(?P<path>[\w-]+\.(?:py|sh))\b" + _SYMBOL)
MODULE_RE = re.compile(_EDGE + r"(?P<path>verl(?:\.[A-Za-z_]\w*)+)")
METHOD_RE = re.compile(_EDGE + r"(?P<cls>[A-Z]\w*)\.(?P<attr>[A-Za-z_]\w*)")
REMOVED_RE = re.compile(_EDGE + r"(?P<path>(?:" + "|".join(REMOVED_MODULES) + r"))\b")


# ------------------------------------------------------------------------------------------------
# verl 0.9.1, the v0.9.0 examples/docs tree, and this repository
# ------------------------------------------------------------------------------------------------


@functools.cache
def verl_root() -> Path:
    spec = importlib.util.find_spec("verl")  # finds the package without running its __init__
    if spec is None or spec.origin is None:
        pytest.fail("verl 0.9.1 is not importable here. The citation check runs in the parity environment: "
                    "`make parity` (or `make test`) builds .venv-verl.", pytrace=False)
    root = Path(spec.origin).parent
    version = (root / "version" / "version").read_text().strip()
    if version != "0.9.1":
        pytest.fail(f"citations are checked against verl 0.9.1, found {version} at {root}", pytrace=False)
    return root


@functools.cache
def verl_files() -> tuple[str, ...]:
    """Every file of the verl package, as 'verl/...' paths."""
    root = verl_root()
    return tuple(sorted("verl/" + p.relative_to(root).as_posix() for p in root.rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts))


@functools.cache
def verl_top_level() -> frozenset[str]:
    """The package's top-level folders (trainer, workers, utils, ...): a path starting with one is verl's."""
    return frozenset(p.name for p in verl_root().iterdir() if p.is_dir() and p.name != "__pycache__")


@functools.cache
def verl_folder_names() -> frozenset[str]:
    return frozenset(part for f in verl_files() for part in f.split("/")[1:-1])


@functools.cache
def tree() -> tuple[str, ...]:
    return tuple(line for line in TREE.read_text().splitlines() if line and not line.startswith("#"))


@functools.cache
def local_files() -> dict[str, tuple[Path, ...]]:
    """{file name: its paths} in this repository: a bare `name.py` may be the book's own file."""
    skip = {".git", "site", "build", "runs", "node_modules", "__pycache__"}
    found: dict[str, list[Path]] = {}
    for folder, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".venv")]
        for name in names:
            found.setdefault(name, []).append(Path(folder) / name)
    return {name: tuple(paths) for name, paths in found.items()}


@functools.cache
def defined_names(path: Path) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """(module-level names, {class: the names its body defines}) of a Python file."""
    tree_ = ast.parse(path.read_text(encoding="utf-8"))
    top, classes = set(), {}
    body = list(tree_.body)
    while body:  # module level, including the bodies of top-level if/try/with blocks
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            body += node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            body += [n for handler in getattr(node, "handlers", []) for n in handler.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.Assign):
            top.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):  # a re-export counts: `from .x import f`
            top.update((a.asname or a.name).split(".")[0] for a in node.names)
    registered: dict[str, set[str]] = {}  # DynamicEnum members: Dispatch.register("DP_COMPUTE_PROTO")
    for node in ast.walk(tree_):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                and isinstance(node.func.value, ast.Name) and node.args and isinstance(node.args[0], ast.Constant)):
            registered.setdefault(node.func.value.id, set()).add(str(node.args[0].value))
    for node in ast.walk(tree_):
        if isinstance(node, ast.ClassDef):
            body = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            body |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            body |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            body |= registered.get(node.name, set())
            classes[node.name] = frozenset(body) | classes.get(node.name, frozenset())
    return frozenset(top), classes


def symbol_problem(path: Path, symbol: str) -> str | None:
    """None if `symbol` (name, Class.method, or a glob such as compute_*) is defined in `path`."""
    top, classes = defined_names(path)
    methods = set().union(*classes.values()) if classes else set()
    head, _, rest = symbol.partition(".")
    if not rest:
        if any(fnmatch.fnmatchcase(name, head) for name in top | methods):
            return None
        return f"no def, class, method or assignment named {head!r} in it"
    if head not in classes:
        return f"no class {head!r} in it"
    if not any(fnmatch.fnmatchcase(name, rest) for name in classes[head]):
        return f"class {head} has no method {rest!r}"
    return None


@functools.cache
def verl_classes() -> dict[str, tuple[str, ...]]:
    """{class name: the verl files that define it}."""
    found: dict[str, list[str]] = {}
    for rel in verl_files():
        if rel.endswith(".py"):
            for name in defined_names(verl_root().parent / rel)[1]:
                found.setdefault(name, []).append(rel)
    return {name: tuple(files) for name, files in found.items()}


@functools.cache
def local_classes() -> frozenset[str]:
    names = set()
    for path in (REPO / "minirl").rglob("*.py"):
        names.update(defined_names(path)[1])
    return frozenset(names)


# ------------------------------------------------------------------------------------------------
# Extraction
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Citation:
    where: str      # file, with the notebook cell: chapters/01_ppo.ipynb[cell 12]
    line: int       # line within the file (or cell)
    text: str       # as written
    kind: str       # verl | tail | tree | bare | module | method | removed
    path: str       # the verl path or tree path it names
    symbol: str     # ::symbol, or ""
    sentence: str   # the sentence around it

    def __str__(self):
        return f"{self.where}:{self.line}: {self.text}"


def units() -> list[tuple[str, str]]:
    """(name, text) for every file of SOURCES; a notebook gives one unit per cell."""
    out = []
    for pattern in SOURCES:
        for path in sorted(REPO.glob(pattern)):
            rel = path.relative_to(REPO).as_posix()
            if path.suffix == ".ipynb":
                for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                    out.append((f"{rel}[cell {i}]", "".join(cell["source"])))
            else:
                out.append((rel, path.read_text(encoding="utf-8")))
    return out


SENTENCE_ENDS = (". ", ".\n", "\n\n", "|", '"""', "? ", "。", "？")  # English and Chinese


def sentence_at(text: str, start: int, end: int) -> str:
    """The sentence (or table cell) around text[start:end]."""
    left = max(text.rfind(sep, 0, start) for sep in SENTENCE_ENDS)
    right = [i for i in (text.find(sep, end) for sep in SENTENCE_ENDS) if i >= 0]
    return " ".join(text[left + 1 : min(right, default=len(text))].split())


def classify(match: re.Match, regex: re.Pattern) -> tuple[str, str, str] | None:
    """(kind, path, symbol) of a match, or None if it is not a verl citation."""
    groups = match.groupdict()
    symbol = (groups.get("symbol") or "").rstrip(".")  # a citation that ends a sentence
    if regex is PATH_RE:
        path = groups["path"]
        first = path.split("/", 1)[0]
        if first == "verl":
            return "verl", path, symbol
        if first in ("examples", "docs"):
            return "tree", path, symbol
        # `trainer/ppo/ray_trainer.py`: a path inside the verl package (two folders at least, or a file)
        if first in verl_top_level() and (path.count("/") >= 2 or not path.endswith("/")):
            return "verl", "verl/" + path, symbol
        # `reward_manager/dapo.py`, `v1/replay_buffer.py`: the tail of a path inside the package (unless it is
        # minirl's own file, as `v1/trainer.py` in minirl/README.md's table of minirl/)
        if (first in verl_folder_names() and path.endswith((".py", ".yaml")) and not (REPO / first).exists()
                and not (REPO / "minirl" / path).exists()):
            return "tail", path, symbol
        return None
    if regex is FILE_RE:
        return "bare", groups["path"], symbol
    if regex is MODULE_RE:
        return "module", groups["path"], ""
    if regex is METHOD_RE:
        if groups["cls"] in verl_classes() and groups["cls"] not in local_classes():
            return "method", groups["cls"], groups["attr"]
        return None
    return "removed", groups["path"], ""


@functools.cache
def citations() -> tuple[Citation, ...]:
    found = []
    for where, text in units():
        masked = text
        for regex in (PATH_RE, FILE_RE, MODULE_RE, METHOD_RE, REMOVED_RE):
            for match in regex.finditer(masked):
                kind = classify(match, regex)
                if kind is None or match.group(0) in PLACEHOLDERS:
                    continue
                start, end = match.span()
                line = text.count("\n", 0, start) + 1
                found.append(Citation(where, line, text[start:end], *kind, sentence_at(text, start, end)))
            # a span already read is not read again by the looser patterns that follow
            masked = regex.sub(lambda m: " " * len(m.group(0)), masked)
    return tuple(found)


# ------------------------------------------------------------------------------------------------
# Checking one citation
# ------------------------------------------------------------------------------------------------


def check_verl_path(path: str, symbol: str) -> str | None:
    files = verl_files()
    if "*" in path:
        return None if fnmatch.filter(files, path) else "no file in verl 0.9.1 matches it"
    if path.endswith("/"):
        return None if any(f.startswith(path) for f in files) else "no such folder in verl 0.9.1"
    if path not in files:
        return "no such file in verl 0.9.1"
    if symbol and path.endswith(".py"):
        return symbol_problem(verl_root().parent / path, symbol)
    return None


def check_tail(path: str, symbol: str) -> str | None:
    files = [f for f in verl_files() if f.endswith("/" + path)]
    if not files:
        return "no file in verl 0.9.1 ends with this path"
    problems = [check_verl_path(f, symbol) for f in files]
    return None if None in problems else f"{problems[0]} ({', '.join(files)})"


def check_tree_path(path: str) -> str | None:
    if "*" in path:
        return None if fnmatch.filter(tree(), path) else "no file of verl's v0.9.0 tag matches it"
    if path.endswith("/"):
        return None if any(f.startswith(path) for f in tree()) else "no such folder at verl's v0.9.0 tag"
    return None if path in tree() else "no such file at verl's v0.9.0 tag"


def check_bare(name: str, symbol: str) -> str | None:
    if name.endswith(".sh"):
        if any(f.rsplit("/", 1)[-1] == name for f in tree()):
            return None
        return "no script of that name at verl's v0.9.0 tag"
    candidates = [f for f in verl_files() if f.rsplit("/", 1)[-1] == name]
    local = local_files().get(name, ())
    if not candidates:
        return None if local else "no file of that name in verl 0.9.1 (nor in this repository)"
    if not symbol:
        return None
    problems = [symbol_problem(verl_root().parent / f, symbol) for f in candidates]
    if None in problems:
        return None
    if local:  # the same name in this repository (protocol.py, dapo.py, ...): the book's own file may be meant
        if any(symbol_problem(path, symbol) is None for path in local):
            return None
    return f"{problems[0]} ({', '.join(candidates)})"


def check_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    root = verl_root().parent
    for i in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file() or (base.is_dir() and i == len(parts)):
            rest = parts[i:]
            if not rest:
                return None
            return symbol_problem(module, ".".join(rest[:2])) if module.is_file() else "no such module in verl 0.9.1"
    return "no such module in verl 0.9.1"


def check_method(cls: str, attr: str) -> str | None:
    files = verl_classes()[cls]
    if any(attr in defined_names(verl_root().parent / f)[1].get(cls, ()) for f in files):
        return None
    return f"class {cls} ({', '.join(files)}) has no method {attr!r}"


def problem(c: Citation) -> str | None:
    if c.kind == "verl":
        error = check_verl_path(c.path, c.symbol)
    elif c.kind == "tail":
        error = check_tail(c.path, c.symbol)
    elif c.kind == "tree":
        error = check_tree_path(c.path)
    elif c.kind == "bare":
        error = check_bare(c.path, c.symbol)
    elif c.kind == "module":
        error = check_module(c.path)
    elif c.kind == "method":
        error = check_method(c.path, c.symbol)
    else:
        error = "verl 0.9 removed this module"
    if error is None:
        return None
    for old, new in MOVED.items():
        if c.kind != "removed" and (c.text == old or old.endswith("/" + c.text)):
            home = new.split("::")[0].rsplit("/", 1)[-1]
            if MOVED_WORDS.search(c.sentence) and home in c.sentence:
                return None
            return (f"{error}; an old name is allowed only in a sentence that says it moved and names its "
                    f"0.9.1 home ({new})")
    hints = [f"{old} -> {new}" for old, new in NEW_HOMES.items() if old in c.text]
    return error + (f" (verl 0.9.1: {hints[0]})" if hints else "")


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------


def test_the_extraction_finds_the_citations():
    """A broken regular expression must not make the check below pass on nothing."""
    found = citations()
    kinds = {c.kind for c in found}
    assert len(found) > 40, f"only {len(found)} verl citations found: has the extraction broken?"
    assert {"verl", "tree", "bare"} <= kinds, f"some kinds of citation were not found at all: {sorted(kinds)}"
    assert any(c.text == "verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage" for c in found)
    assert any(c.where.startswith("chapters/") and c.where.endswith("]") for c in found), "no notebook cell read"


def test_every_verl_citation_exists_in_verl_0_9_1():
    wrong = [f"  {c}\n      {message}" for c in citations() if (message := problem(c))]
    if wrong:
        pytest.fail(f"{len(wrong)} of {len(citations())} verl citations do not exist in verl 0.9.1 (or, for "
                    f"examples/ and docs/, at its v0.9.0 tag):\n" + "\n".join(wrong), pytrace=False)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_name_is_still_cited(old):
    """MOVED stays minimal: an entry no sentence needs any more is removed."""
    assert any(c.text == old or old.endswith("/" + c.text) for c in citations()), (
        f"MOVED lists {old!r}, but nothing in the book cites it any more: remove it from MOVED.")


def test_the_tree_manifest_is_sorted_and_plausible():
    files = tree()
    assert list(files) == sorted(files), f"{TREE.name} must be sorted (LC_ALL=C sort)"
    assert "examples/grpo_trainer/run_qwen3_8b_fsdp.sh" in files and "docs/algo/grpo.md" in files
