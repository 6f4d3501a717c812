"""The AppConfig of `leasecron.integrations.django_app`: starts the Scheduler from `ready()`
in the processes that should run it (see `leasecron.integrations.django.start_decision`)."""

from __future__ import annotations

from django.apps import AppConfig  # type: ignore[import-untyped]


class LeasecronConfig(AppConfig):  # type: ignore[misc]
    name = "leasecron.integrations.django_app"
    label = "leasecron"
    verbose_name = "leasecron"

    def ready(self) -> None:
        from leasecron.integrations import django

        django.ready()
