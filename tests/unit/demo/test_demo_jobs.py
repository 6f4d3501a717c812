"""The demo's ScheduledJobs, built in code, are the ones shipped in examples/jobs/."""

from __future__ import annotations

from pathlib import Path

import yaml

from leasecron.demo._jobs import scheduled_jobs, tick_interval
from leasecron.models.specs import validate_resource

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "jobs"


def test_the_built_jobs_equal_the_example_manifests() -> None:
    shipped = {
        doc["metadata"]["name"]: doc
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    built = {doc["metadata"]["name"]: doc for doc in scheduled_jobs()}
    assert built == shipped


def test_the_built_jobs_are_valid_and_take_the_namespace_and_group_given() -> None:
    jobs = scheduled_jobs(namespace="demo", group="other")
    for job in jobs:
        validate_resource(job)
    assert {(j["metadata"]["namespace"], j["spec"]["group"]) for j in jobs} == {("demo", "other")}


def test_the_invoice_job_ticks_every_two_seconds() -> None:
    assert tick_interval("send-invoices") == 2.0
