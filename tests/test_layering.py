"""The package's shape: only embodied_ws/ros imports ROS, imports only go down the layers, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

from ros_helpers import ROOT, run_with_ros_blocked

#: sub-packages from the bottom layer up: a module may import the layers below its own, never its own layer's
#: other packages and never a layer above (a new sub-package goes into the layer it belongs to; the test fails
#: until it is listed)
LAYERS: list[set[str]] = [
    {"core"},  # errors, paths, atomic writes, YAML with line numbers, the memory arithmetic
    {"randomization"},  # DR specs, samplers, plant files (read with core.yamlfile)
    {"config"},  # the run config; it names a DR preset (config.loader -> randomization.spec)
    {"sim"},
    {"policy"},  # the policy protocol, the exported MLP, the one rollout: below every domain that runs a policy
    {"deploy", "data"},
    {"sysid", "rl", "vla", "assistant"},
    {"tui", "ros"},  # front ends
    {"cli"},
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
#: the domain folders: an arrow between two of them is either part of the design or on the list to remove
DOMAINS = {"deploy", "data", "sysid", "rl", "vla", "assistant"}
DOMAIN_ARROWS: dict[tuple[str, str], str] = {
    ("sysid", "data"): "sysid fit/replay and the gap report read recorded bags (data.bag, data.rosbag_io)",
    ("vla", "data"): "VLA fine-tune/eval read LeRobot datasets (data.dataset) and demo instructions (data.record)",
}
#: module arrows that remain only until the policy/ package owns what they reach for; each one is listed so the
#: test fails on any new one, and fails when one is gone (then delete its line)
TO_REMOVE: dict[str, str] = {}
#: sim modules that construct envs: deploy must not reach them except through :data:`TO_REMOVE`
ENV_CONSTRUCTION = {"embodied_ws.sim.core", "embodied_ws.sim.env", "embodied_ws.sim.vec_env"}

IMPORT_ALL = """
import importlib, pathlib
root = pathlib.Path(sys.argv[2])
for f in sorted((root / "embodied_ws").rglob("*.py")):
    mod = ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    if sys.argv[3:] and mod not in sys.argv[3:]:
        continue  # only the modules named
    if mod.endswith("__main__") or (mod.startswith("embodied_ws.ros") and not sys.argv[3:]):
        continue  # __main__ modules run the program when imported
    importlib.import_module(mod)
    print("ok", mod)
"""


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (packages by their own name)."""
    out = {}
    for f in sorted((ROOT / "embodied_ws").rglob("*.py")):
        out[".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = f
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """``module -> package modules it imports`` (any import statement, lazy ones in functions included)."""
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # ``from pkg import sub`` imports the module pkg.sub when there is one
                found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                             for a in node.names)  # fmt: skip
        graph[mod] = {m for m in found if m in modules and m != mod}
    return graph


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (imports for type checkers only never run)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_outside_ros_imports_without_rclpy() -> None:
    proc = run_with_ros_blocked(IMPORT_ALL, str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ok ")}
    expected = {m for m in _modules() if not m.startswith("embodied_ws.ros") and not m.endswith("__main__")}
    assert imported == expected, expected ^ imported
    assert {"embodied_ws.cli", "embodied_ws.rl.train", "embodied_ws.rl.backends", "embodied_ws.tui.app"} <= imported


def test_ros_launch_plan_is_importable_without_rclpy_too() -> None:
    proc = run_with_ros_blocked(IMPORT_ALL, str(ROOT), "embodied_ws.ros.launch_plan")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "embodied_ws.ros.launch_plan"]


def test_every_subpackage_has_a_layer_and_imports_only_downwards() -> None:
    modules = _modules()
    packages = {_package(m) for m in modules if m.count(".") >= 1 and (ROOT / "embodied_ws" / _package(m)).is_dir()}
    assert packages <= set(LEVEL), f"add {sorted(packages - set(LEVEL))} to LAYERS"
    graph = _imports(modules)
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if _package(a) in LEVEL and _package(b) in LEVEL and LEVEL[_package(b)] > LEVEL[_package(a)]
    ]
    assert not upward, "imports going up the layers:\n" + "\n".join(sorted(upward))
    sideways = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if _package(a) != _package(b) and LEVEL.get(_package(a), -1) == LEVEL.get(_package(b), -2)
    ]
    assert not sideways, "imports between packages of one layer (give one its own layer):\n" + "\n".join(sideways)


def test_arrows_between_domains_are_the_designed_ones() -> None:
    """deploy, data, sysid, rl, vla and assistant import each other only along :data:`DOMAIN_ARROWS`, plus the
    module arrows of :data:`TO_REMOVE`; deploy reaches env construction in sim/ only through :data:`TO_REMOVE`;
    every listed arrow still exists (a removed one is deleted from the list)."""
    graph = _imports(_modules())
    arrows = {f"{a} -> {b}" for a, targets in graph.items() for b in targets}

    def checked(a: str, b: str) -> bool:
        pa, pb = _package(a), _package(b)
        between_domains = pa in DOMAINS and pb in DOMAINS and pa != pb and (pa, pb) not in DOMAIN_ARROWS
        return between_domains or (pa == "deploy" and b in ENV_CONSTRUCTION)

    new = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if checked(a, b))
    new = [arrow for arrow in new if arrow not in TO_REMOVE]
    assert not new, "new arrows between domains (or deploy -> env construction):\n" + "\n".join(new)
    gone = sorted(set(TO_REMOVE) - arrows)
    assert not gone, f"arrows removed: delete them from TO_REMOVE: {gone}"
    used = {(_package(a), _package(b)) for arrow in arrows for a, b in [arrow.split(" -> ")]}
    assert set(DOMAIN_ARROWS) <= used, f"designed arrows no longer used: {sorted(set(DOMAIN_ARROWS) - used)}"


def test_no_import_cycles() -> None:
    """No module reaches itself through imports (Tarjan's strongly connected components over the import graph)."""
    graph = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the graph really was read
