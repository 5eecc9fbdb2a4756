"""The package's imports run one way: no module of minirl/ imports, directly or through others, a module that
imports it back (deferred imports inside functions included). The allowed circles are the registries': the
estimator modules import `register_adv_est` from minirl/advantage.py, which imports them to fill its registry (and
the policy-loss modules likewise with minirl/policy_loss.py)."""

import ast
import subprocess
import sys
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "minirl"
REGISTRIES = {"advantage": "register_adv_est", "policy_loss": "register_policy_loss"}


def registry_edges() -> set[tuple[str, str]]:
    """(registry, module) for every module that imports the registry's decorator: the registry imports it back."""
    edges = set()
    for path in LIBRARY.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in {f"minirl.{r}" for r in REGISTRIES}:
                registry = node.module.split(".")[1]
                if REGISTRIES[registry] in {alias.name for alias in node.names}:
                    edges.add((registry, path.stem))
    return edges


def import_graph() -> dict[str, set[str]]:
    """module -> the minirl modules it imports anywhere in its body; modules by dotted name inside minirl/
    ("trainer", "v1.trainer"; a package by its __init__, "v1")."""
    modules = {}
    for path in LIBRARY.rglob("*.py"):
        parts = path.relative_to(LIBRARY).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minirl"):
                package = node.module.removeprefix("minirl").removeprefix(".")
                for alias in node.names:  # `from minirl.v1 import trainer` imports a module; `import train`, a name
                    child = f"{package}.{alias.name}" if package else alias.name
                    imported.add(child if child in modules else package)
            elif isinstance(node, ast.Import):
                imported |= {alias.name.removeprefix("minirl.") for alias in node.names
                             if alias.name.startswith("minirl.")}
        graph[name] = (imported & modules.keys()) - {name}
    return graph


# The one circle that is not a registry's: `train()` picks the v1 trainer, a subclass of the legacy one, with a
# deferred import (verl's main_ppo.py likewise picks TaskRunnerV1 by trainer.use_v1).
ENTRY_POINT_EDGES = {("trainer", "v1.trainer")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search)."""
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return path[path.index(child):] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_imports_run_one_way():
    graph = import_graph()
    for registry, registered in registry_edges():
        assert registered in graph[registry], (f"minirl/{registered}.py registers into minirl/{registry}.py, which "
                                               f"does not import it: its names would be missing from the registry")
        graph[registry] = graph[registry] - {registered}
    for importer, imported in ENTRY_POINT_EDGES:
        assert imported in graph[importer], f"{importer} no longer imports {imported}: drop the allowance"
        graph[importer] = graph[importer] - {imported}
    cycle = find_cycle(graph)
    assert cycle is None, (f"import circle {' -> '.join(cycle)}: pass the object in (as evaluate takes a reward "
                           "scorer) or move the shared piece to the module both need")


def test_the_check_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_registered_module_imports_first():
    """A registry circle must not break when the reader's first import is one of its members (`from minirl.grpo
    import ...` in a notebook): import each on its own, with no minirl module loaded before it."""
    modules = sorted({name for _registry, name in registry_edges()} | set(REGISTRIES))
    script = ("import importlib, sys\nfailed = []\nfor name in sys.argv[1:]:\n"
              "    for loaded in [m for m in sys.modules if m == 'minirl' or m.startswith('minirl.')]:\n"
              "        del sys.modules[loaded]\n"
              "    try:\n        importlib.import_module('minirl.' + name)\n"
              "    except ImportError as error:\n        failed.append(f'{name}: {error}')\n"
              "print('\\n'.join(failed))\nsys.exit(1 if failed else 0)\n")
    proc = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"these modules fail as a first import (an import circle):\n{proc.stdout}{proc.stderr}"
