"""No import circle in the tree, tests included, by module or by package
(rigdev/imports.py; docs/design.md#where-things-live)."""

from __future__ import annotations

from pathlib import Path

from rigdev.imports import (
    circles,
    closure,
    floor_graph,
    floors_out_of_place,
    module_graph,
    modules,
    package_graph,
)


def test_the_module_graph_has_no_circle() -> None:
    assert circles(module_graph(modules())) == []


def test_the_package_graph_has_no_circle() -> None:
    found = modules()
    assert circles(package_graph(module_graph(found), found)) == []


def test_each_program_stands_only_on_the_floors_below_it() -> None:
    """The daemon stands on the spine alone, the simulator on the daemon, rigctl on
    both: none of the three imports a program above it (docs/design.md)."""
    graph = module_graph(modules())
    assert floors_out_of_place(graph) == []
    assert floor_graph(graph)["daemon"] == {"spine"}
    assert floor_graph(graph)["spine"] == set()


def test_a_floor_out_of_place_is_found(tmp_path: Path) -> None:
    for package in ("exporter", "exporter/daemon", "exporter/rigctl"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "exporter" / "daemon" / "serve.py").write_text(
        "from exporter.rigctl import main\n")
    (tmp_path / "exporter" / "config.py").write_text("import exporter.daemon.serve\n")
    graph = module_graph(modules(tmp_path))
    assert floors_out_of_place(graph) == [
        "exporter.config -> exporter.daemon.serve", "exporter.daemon.serve -> exporter.rigctl"]


def test_a_circle_is_found(tmp_path: Path) -> None:
    """The walk sees a type-only circle and a package circle through a relative import."""
    (tmp_path / "exporter" / "a").mkdir(parents=True)
    (tmp_path / "exporter" / "b").mkdir()
    for package in ("exporter", "exporter/a", "exporter/b"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "exporter" / "a" / "one.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from exporter.b.two import X\n")
    (tmp_path / "exporter" / "b" / "two.py").write_text("from ..a import one\n")
    found = modules(tmp_path)
    graph = module_graph(found)
    assert graph["exporter.a.one"] == {"exporter.b.two"}
    assert graph["exporter.b.two"] == {"exporter.a.one"}
    assert circles(graph) == [["exporter.a.one", "exporter.b.two"]]
    assert circles(package_graph(graph, found)) == [["exporter.a", "exporter.b"]]


def test_a_room_may_use_the_spine_it_stands_in(tmp_path: Path) -> None:
    (tmp_path / "exporter" / "room").mkdir(parents=True)
    (tmp_path / "exporter" / "__init__.py").write_text("")
    (tmp_path / "exporter" / "room" / "__init__.py").write_text("")
    (tmp_path / "exporter" / "spine.py").write_text("from exporter.room import part\n")
    (tmp_path / "exporter" / "room" / "part.py").write_text("import exporter.spine\n")
    found = modules(tmp_path)
    assert circles(package_graph(module_graph(found), found)) == []
    assert circles(module_graph(found)) == [["exporter.room.part", "exporter.spine"]]


def test_the_map_names_every_module() -> None:
    """docs/design.md's "Where things live" names every module of the installed
    packages and of rigdev/, by its file name or its name in backticks (the
    dashboards by their `<name>.dashboard.py` row)."""
    design = (Path(__file__).parents[1] / "docs" / "design.md").read_text()
    section = design.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    missing = [
        name for name, path in modules().items()
        if name.split(".")[0] not in ("tests", "bench") and path.name != "__init__.py"
        and not path.name.endswith(".dashboard.py")
        and f"`{path.stem}`" not in section and path.name not in section]
    assert missing == []


def test_the_closure_runs_what_an_import_runs() -> None:
    graph = {"a": set(), "a.b": {"c"}, "a.b.d": set(), "c": set(), "e": set()}
    assert closure(["a.b"], graph) == {"a", "a.b", "c"}
    assert closure(["a.b.d"], graph) == {"a", "a.b", "a.b.d", "c"}
