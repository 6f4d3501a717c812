"""Handler registration: names, duplicates, sync or async, listeners."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from leasecron.runtime._registry import HandlerRegistry, is_async_handler


def sync_handler(ctx: Any) -> None:
    del ctx


async def async_handler(ctx: Any) -> None:
    del ctx


class AsyncCallable:
    async def __call__(self, ctx: Any) -> None:
        del ctx


def test_a_coroutine_function_is_run_as_a_task_and_a_plain_function_in_a_thread() -> None:
    registry = HandlerRegistry()
    assert registry.register("a", async_handler).is_async
    assert not registry.register("b", sync_handler).is_async


def test_partials_and_async_callable_objects_are_recognised_as_async() -> None:
    assert is_async_handler(functools.partial(async_handler))
    assert is_async_handler(AsyncCallable())
    assert not is_async_handler(functools.partial(sync_handler))


def test_a_name_can_be_registered_only_once() -> None:
    registry = HandlerRegistry()
    registry.register("nightly_report", sync_handler)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("nightly_report", async_handler)


@pytest.mark.parametrize("name", ["", " x", "-x", "a b", "x" * 254])
def test_a_bad_name_is_refused_with_the_name_in_the_message(name: str) -> None:
    with pytest.raises(ValueError, match="handler name"):
        HandlerRegistry().register(name, sync_handler)


def test_a_handler_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        HandlerRegistry().register("x", 42)  # type: ignore[arg-type]


def test_names_are_sorted_and_listeners_hear_of_each_registration() -> None:
    registry = HandlerRegistry()
    heard: list[tuple[str, ...]] = []
    remove = registry.on_change(lambda: heard.append(registry.names()))
    registry.register("b", sync_handler)
    registry.register("a", sync_handler)
    remove()
    registry.register("c", sync_handler)
    assert heard == [("b",), ("a", "b")]
    assert registry.names() == ("a", "b", "c")
    assert "a" in registry and "z" not in registry and len(registry) == 3


def test_the_name_set_is_kept_between_registrations_and_made_again_after_one() -> None:
    registry = HandlerRegistry()
    registry.register("a", sync_handler)
    kept = registry.name_set()
    assert kept == {"a"} and registry.name_set() is kept  # not built per call
    registry.register("b", sync_handler)
    assert registry.name_set() == {"a", "b"} and registry.names() == ("a", "b")
