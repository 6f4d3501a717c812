"""What every listing command of the kubectl plugin prints, from one function: the objects as
JSON/YAML, one sentence when there are none, or a table with NAMESPACE first across all
namespaces and the extra columns with -o wide."""

from __future__ import annotations

import json

from leasecron.cli._kubectl import render_listing

OBJECTS = [{"metadata": {"name": "a", "namespace": "ns"}}]


def listing(objects: list[dict[str, object]], *, output: str, namespace: str | None) -> str:
    def rows(with_namespace: bool, wide: bool) -> list[list[str]]:
        row = ["a", "1", *(["extra"] if wide else [])]
        return [["ns", *row] if with_namespace else row]

    return render_listing(
        objects,
        output=output,
        namespace=namespace,
        kind="Things",
        headers=("NAME", "COUNT"),
        wide=("MORE",),
        rows=rows,
    )


def test_no_objects_is_one_sentence_naming_the_kind_and_where() -> None:
    assert listing([], output="table", namespace="ns") == "No Things in namespace ns."
    assert listing([], output="wide", namespace=None) == "No Things in any namespace."


def test_a_table_has_namespace_first_only_across_all_namespaces() -> None:
    assert listing(OBJECTS, output="table", namespace="ns").splitlines() == [
        "NAME   COUNT",
        "a      1",
    ]
    assert listing(OBJECTS, output="table", namespace=None).splitlines()[0].split() == [
        "NAMESPACE",
        "NAME",
        "COUNT",
    ]


def test_wide_adds_the_extra_columns() -> None:
    lines = listing(OBJECTS, output="wide", namespace="ns").splitlines()
    assert lines[0].split() == ["NAME", "COUNT", "MORE"]
    assert lines[1].split() == ["a", "1", "extra"]


def test_json_is_the_objects_as_a_list_even_when_empty() -> None:
    assert json.loads(listing(OBJECTS, output="json", namespace="ns"))["items"] == OBJECTS
    assert json.loads(listing([], output="json", namespace="ns"))["items"] == []
