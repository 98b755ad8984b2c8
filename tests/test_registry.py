"""Engine discovery through real entry points, and every way loading a plugin can fail.

A tiny plugin distribution is built on disk (a ``*.dist-info`` folder with
METADATA and entry_points.txt next to its modules) and read through
``importlib.metadata``, exactly as an installed third-party engine would be.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextengine.engine import ContextEngine
from contextengine.errors import EngineLoadError, EngineNotFoundError
from contextengine.events import Event, HostEvent
from contextengine.registry import Registry, default_registry

PLUGIN_MODULE = '''
from contextengine.engine import ContextEngine


class DemoEngine(ContextEngine):
    """A demo engine from a third-party plugin."""

    def __init__(self, *, threshold_percent=0.75, label="demo"):
        self.threshold_percent = threshold_percent
        self.label = label

    @property
    def name(self):
        return "demo"

    def update_from_response(self, usage):
        pass

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False,
                 memory_context=""):
        return messages


class StandIn(DemoEngine):
    """Stands in for the compressor, so fallbacks are observable."""

    @property
    def name(self):
        return "compressor"


class Crashing(DemoEngine):
    """Raises while constructing."""

    def __init__(self):
        raise RuntimeError("needs a database")


class NotAnEngine:
    """Looks like an engine, but is not a ContextEngine."""


def make_engine(label="from-factory"):
    """An engine built by a factory."""
    return DemoEngine(label=label)


def make_nothing():
    """A factory returning the wrong thing."""
    return object()


INSTANCE = DemoEngine()
'''

ENTRY_POINTS = """
[contextengine.engines]
demo = ce_demo_plugin:DemoEngine
factory = ce_demo_plugin:make_engine
compressor = ce_demo_plugin:StandIn
broken = ce_demo_broken:Engine
crashing = ce_demo_plugin:Crashing
notengine = ce_demo_plugin:NotAnEngine
badfactory = ce_demo_plugin:make_nothing
instance = ce_demo_plugin:INSTANCE

[console_scripts]
unrelated = ce_demo_plugin:make_engine
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory holding an 'installed' plugin distribution, importable while the tests run."""
    root = tmp_path_factory.mktemp("plugins")
    (root / "ce_demo_plugin.py").write_text(PLUGIN_MODULE)
    (root / "ce_demo_broken.py").write_text("import ce_module_that_does_not_exist\n")
    info = root / "ce_demo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ce-demo-plugin\nVersion: 1.0\nSummary: demo engines\n"
    )
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in ("ce_demo_plugin", "ce_demo_broken"):
        sys.modules.pop(name, None)


@pytest.fixture
def registry(plugin_path: Path) -> Registry:
    return Registry.from_paths([str(plugin_path)])


def test_available_lists_plugin_engines_with_description_and_origin(registry: Registry) -> None:
    rows = {row.name: row for row in registry.available()}
    assert set(rows) == {
        "badfactory",
        "broken",
        "compressor",
        "crashing",
        "demo",
        "factory",
        "instance",
        "notengine",
    }
    assert rows["demo"].description == "A demo engine from a third-party plugin."
    assert rows["demo"].origin == "ce-demo-plugin"
    assert rows["broken"].description.startswith("(failed to load: ModuleNotFoundError")


def test_load_builds_a_class_with_its_options(registry: Registry) -> None:
    engine = registry.load("demo", threshold_percent=0.5, label="x")
    assert isinstance(engine, ContextEngine)
    assert (engine.name, engine.threshold_percent, engine.label) == ("demo", 0.5, "x")  # type: ignore[attr-defined]


def test_load_calls_a_factory(registry: Registry) -> None:
    engine = registry.load("factory")
    assert engine.label == "from-factory"  # type: ignore[attr-defined]


def test_unknown_name_lists_the_available_names(registry: Registry) -> None:
    with pytest.raises(EngineNotFoundError) as caught:
        registry.load("nope")
    assert "demo" in str(caught.value) and "factory" in str(caught.value)
    assert "demo" in caught.value.available


def test_unknown_option_is_an_error_naming_it_even_when_not_strict(registry: Registry) -> None:
    with pytest.raises(EngineLoadError) as caught:
        registry.load("demo", treshold_percent=0.5)
    assert "treshold_percent" in str(caught.value)
    assert "threshold_percent" in str(caught.value)  # the accepted names help fix the typo


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        pytest.param("broken", "ModuleNotFoundError", id="import-error"),
        pytest.param("crashing", "needs a database", id="constructor-raises"),
        pytest.param("notengine", "is not a ContextEngine", id="not-an-engine-class"),
        pytest.param("badfactory", "factory returned object", id="factory-returns-other"),
        pytest.param("instance", "not a ContextEngine subclass or a factory", id="an-instance"),
    ],
)
def test_strict_loading_raises_with_the_cause(registry: Registry, name: str, cause: str) -> None:
    with pytest.raises(EngineLoadError) as caught:
        registry.load(name, strict=True)
    assert cause in str(caught.value)
    assert caught.value.plugin.startswith(name)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("broken", id="import-error"),
        pytest.param("crashing", id="constructor-raises"),
        pytest.param("notengine", id="not-an-engine"),
    ],
)
def test_default_loading_falls_back_to_the_compressor_with_a_warning(
    registry: Registry, name: str
) -> None:
    events: list[Event] = []
    engine = registry.load(name, observers=[events.append])
    assert engine.name == "compressor"
    (event,) = events
    assert isinstance(event, HostEvent)
    assert (event.kind, event.level) == ("engine_fallback", "warning")
    assert name in (event.message or "") and event.error


def test_a_direct_module_reference_loads_an_unregistered_engine(registry: Registry) -> None:
    assert registry.load("ce_demo_plugin:DemoEngine").name == "demo"


def test_none_loads_the_configured_engine_with_its_options(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "contextengine.toml").write_text('engine = "demo"\n[options]\nlabel = "conf"\n')
    monkeypatch.chdir(tmp_path)
    engine = registry.load()
    assert (engine.name, engine.label) == ("demo", "conf")  # type: ignore[attr-defined]
    monkeypatch.setenv("CONTEXTENGINE_ENGINE", "factory")
    assert registry.load().label == "conf"  # type: ignore[attr-defined]


def test_the_default_registry_knows_the_built_in_engines() -> None:
    assert {"compressor", "lcm"} <= set(default_registry.names())


def test_entry_points_of_other_groups_are_ignored(registry: Registry) -> None:
    assert "unrelated" not in registry.names()
