"""What the CRDs promise users and the API server: names, printer columns, subresources, a
structural schema, and CEL rules that stay within the API server's cost limits."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from leasecron.operator.crds import all_crds, jobrun_crd, main, scheduledjob_crd


def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return cast(dict[str, Any], only)


def root(crd: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], version(crd)["schema"]["openAPIV3Schema"])


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


def resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in re.sub(r"\[\?\(.*?\)\]", "[]", json_path).strip(".").split("."):
        name = part.removesuffix("[]")
        if node is None or name not in node.get("properties", {}):
            return None
        node = node["properties"][name]
        if part.endswith("[]"):
            node = node.get("items")
    return node


def test_names_short_names_and_category_follow_the_design() -> None:
    sj, jr = scheduledjob_crd(), jobrun_crd()
    assert sj["metadata"]["name"] == "scheduledjobs.leasecron.dev"
    assert jr["metadata"]["name"] == "jobruns.leasecron.dev"
    assert (sj["spec"]["names"]["kind"], sj["spec"]["names"]["shortNames"]) == (
        "ScheduledJob",
        ["sj"],
    )
    assert (jr["spec"]["names"]["kind"], jr["spec"]["names"]["shortNames"]) == ("JobRun", ["jr"])
    for crd in (sj, jr):
        assert crd["spec"]["group"] == "leasecron.dev"
        assert crd["spec"]["scope"] == "Namespaced"
        assert crd["spec"]["names"]["categories"] == ["leasecron"]
        assert version(crd)["name"] == "v1alpha1"
        assert version(crd)["served"] and version(crd)["storage"]


def test_scheduledjob_has_a_status_subresource_and_jobrun_writes_status_on_create() -> None:
    assert version(scheduledjob_crd())["subresources"] == {"status": {}}
    assert "subresources" not in version(jobrun_crd())


@pytest.mark.parametrize(
    ("crd", "columns"),
    [
        (
            scheduledjob_crd(),
            ["BUCKET", "SCHEDULE", "HOLDER", "LAST RUN", "OUTCOME", "NEXT", "READY", "AGE"],
        ),
        (jobrun_crd(), ["JOB", "TICK", "HOLDER", "TOKEN", "OUTCOME", "DURATION", "AGE"]),
    ],
    ids=["scheduledjob", "jobrun"],
)
def test_printer_columns_are_the_designed_ones_and_point_at_real_fields(
    crd: dict[str, Any], columns: list[str]
) -> None:
    printed = version(crd)["additionalPrinterColumns"]
    default = [column for column in printed if not column.get("priority")]
    assert [column["name"].upper() for column in default] == columns
    for column in printed:
        if column["jsonPath"].startswith(".metadata."):
            continue
        target = resolve(root(crd), column["jsonPath"])
        assert target is not None, column
        assert column["type"] in (target["type"], "date" if "format" in target else "-")


def test_jobruns_show_who_asked_for_a_requested_run_with_o_wide() -> None:
    printed = version(jobrun_crd())["additionalPrinterColumns"]
    wide = [(c["name"], c["jsonPath"]) for c in printed if c.get("priority") == 1]
    assert wide == [("Trigger", ".spec.trigger"), ("Requested By", ".spec.requestedBy")]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["spec"]["names"]["kind"])
def test_the_schema_is_structural(crd: dict[str, Any]) -> None:
    for path, node in nodes(root(crd)):
        assert "type" in node, path
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node["type"] == "object" and path not in (".metadata",):
            assert node.get("properties"), path
        if node["type"] == "array":
            assert "items" in node, path


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["spec"]["names"]["kind"])
def test_strings_read_by_cel_rules_have_a_max_length(crd: dict[str, Any]) -> None:
    for path, node in nodes(root(crd)):
        for rule in node.get("x-kubernetes-validations", []):
            for name in set(re.findall(r"self\.(\w+)", rule["rule"])):
                child = node["properties"][name]
                if child["type"] == "string":
                    assert "maxLength" in child, f"{path}.{name} in {rule['rule']}"
            if "fieldPath" in rule:
                assert rule["fieldPath"].removeprefix(".") in node["properties"], rule


def test_the_design_rules_are_cel_rules_on_the_right_objects() -> None:
    spec = root(scheduledjob_crd())["properties"]["spec"]
    rules = {
        "spec": [r["rule"] for r in spec["x-kubernetes-validations"]],
        "lock": [r["rule"] for r in spec["properties"]["lock"]["x-kubernetes-validations"]],
        "election": [r["rule"] for r in spec["properties"]["election"]["x-kubernetes-validations"]],
    }
    assert any("has(self.schedule)" in r and "single-owner" in r for r in rules["spec"])
    assert any("duration(self.atLeastFor) <= duration(self.atMostFor)" in r for r in rules["lock"])
    assert any(
        "duration(self.leaseDuration) >= duration(self.renewDeadline) + duration('1s')" in r
        for r in rules["election"]
    )
    assert any("* 5 >" in r and "* 6" in r for r in rules["election"])


def test_nested_objects_default_to_empty_so_their_field_defaults_apply() -> None:
    spec = root(scheduledjob_crd())["properties"]["spec"]["properties"]
    for name in ("lock", "election", "catchUp", "history"):
        assert spec[name]["default"] == {}, name


def test_conditions_are_a_typed_list_keyed_by_type() -> None:
    status = root(scheduledjob_crd())["properties"]["status"]["properties"]
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


def test_the_module_writes_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--write", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "jobruns.leasecron.dev.yaml",
        "scheduledjobs.leasecron.dev.yaml",
    ]
    assert "wrote" in capsys.readouterr().out


def test_the_module_imports_without_kopf() -> None:
    """`leasecron demo` and `leasecron cluster --crds` build the CRDs with the testing extra
    only: importing the module must not import the operator's kopf wiring."""
    code = "import sys, leasecron.operator.crds; print('kopf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
