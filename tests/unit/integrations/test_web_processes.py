"""Which processes of a web application start its Scheduler: Django's management commands and
runserver's autoreloader, Flask's reloader, and a Scheduler inherited across a fork."""

from __future__ import annotations

import asyncio
import os

import pytest

from leasecron import Scheduler
from leasecron.integrations import asgi
from leasecron.integrations.django import start_decision
from leasecron.integrations.flask import in_reloader_parent


@pytest.mark.parametrize(
    "argv",
    [
        ["/srv/.venv/bin/gunicorn", "site.wsgi", "-w", "3"],
        ["/srv/.venv/bin/uvicorn", "site.asgi:application"],
        ["manage.py", "runserver", "--noreload"],
        ["/srv/manage.py", "runserver", "0.0.0.0:8000"],  # with RUN_MAIN=true below
    ],
)
def test_server_processes_and_runservers_serving_child_start_the_django_scheduler(
    argv: list[str],
) -> None:
    assert start_decision(argv=argv, environ={"RUN_MAIN": "true"}) is None


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["manage.py", "migrate"], "manage.py migrate does not run the scheduler"),
        (["/srv/manage.py", "shell"], "manage.py shell does not run the scheduler"),
        (["django-admin", "collectstatic"], "manage.py collectstatic"),
        (["manage.py", "leasecron_scheduler"], "manage.py leasecron_scheduler"),
        (["/usr/lib/python3/site-packages/django/__main__.py", "test"], "manage.py test"),
        (["manage.py"], "manage.py help"),
        (["manage.py", "runserver"], "autoreloader"),
    ],
)
def test_management_commands_and_the_autoreloader_do_not_start_the_django_scheduler(
    argv: list[str], why: str
) -> None:
    reason = start_decision(argv=argv, environ={})
    assert reason is not None and why in reason


DEBUG_CLI = {"FLASK_RUN_FROM_CLI": "true", "FLASK_DEBUG": "1"}


@pytest.mark.parametrize(
    ("argv", "environ", "parent"),
    [
        (["flask", "run", "--debug"], DEBUG_CLI, True),
        (["flask", "run", "--reload"], {"FLASK_RUN_FROM_CLI": "true"}, True),
        (
            ["flask", "run", "--debug"],
            {**DEBUG_CLI, "WERKZEUG_RUN_MAIN": "true"},
            False,
        ),
        (["flask", "run", "--no-reload"], DEBUG_CLI, False),
        (["flask", "run"], {"FLASK_RUN_FROM_CLI": "true"}, False),
        (["gunicorn", "app:app"], {"FLASK_DEBUG": "1"}, False),
    ],
)
def test_only_the_watching_parent_of_flasks_reloader_skips_the_scheduler(
    argv: list[str], environ: dict[str, str], parent: bool
) -> None:
    assert in_reloader_parent(argv=argv, environ=environ) is parent


def test_an_asgi_app_refuses_to_start_a_scheduler_made_in_the_process_it_was_forked_from() -> None:
    scheduler = Scheduler("web", namespace="ns", identity="pod-a-1")

    async def start() -> None:
        async with asgi.running(scheduler, made_in=os.getpid() + 1):
            raise AssertionError("started")

    with pytest.raises(RuntimeError, match="share its identity"):
        asyncio.run(start())
    assert not scheduler.running
