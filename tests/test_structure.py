"""The package's imports run one way: no module of minirl/ imports, directly or through others, a module that
imports it back (deferred imports inside functions included). The one allowed circle is a registry's: the
estimator modules import `register_adv_est` from minirl/advantage.py, which imports them to fill its registry."""

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "minirl"
REGISTRY_EDGES = {("advantage", name) for name in ("gae", "grpo", "rloo", "remax", "reinforce_pp")}


def import_graph() -> dict[str, set[str]]:
    """module -> the minirl modules it imports anywhere in its body (minirl/*.py, by stem)."""
    modules = {path.stem: path for path in LIBRARY.glob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "minirl":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minirl."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("minirl.")}
        graph[name] = (imported & modules.keys()) - {name}
    return graph


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
    for importer, registered in REGISTRY_EDGES:
        assert registered in graph[importer], f"minirl/{importer}.py no longer imports {registered}: update the test"
        graph[importer] = graph[importer] - {registered}
    cycle = find_cycle(graph)
    assert cycle is None, (f"import circle {' -> '.join(cycle)}: pass the object in (as evaluate takes a reward "
                           "scorer) or move the shared piece to the module both need")


def test_the_check_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
