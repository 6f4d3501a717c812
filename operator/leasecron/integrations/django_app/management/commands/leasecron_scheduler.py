"""`manage.py leasecron_scheduler`: run the project's Scheduler in this process until SIGTERM
or SIGINT, then stop gracefully (handlers finish or are stopped within its grace period,
Leases released). For a sidecar container or a Deployment of its own, with
`LEASECRON_AUTOSTART = False` in the web processes' settings if they should not run one too.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand  # type: ignore[import-untyped]

from leasecron.integrations.django import SCHEDULER_SETTING, load_scheduler


class Command(BaseCommand):  # type: ignore[misc]
    help = f"Run the leasecron Scheduler named by settings.{SCHEDULER_SETTING} until SIGTERM."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--scheduler",
            default=None,
            help=f"dotted path of the Scheduler (default: settings.{SCHEDULER_SETTING})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = load_scheduler(options["scheduler"])
        self.stdout.write(f"leasecron: running {scheduler!r} until SIGTERM or SIGINT")
        scheduler.run_forever()
