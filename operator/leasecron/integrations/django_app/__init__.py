"""The installable Django app of leasecron: add `"leasecron.integrations.django_app"` to
INSTALLED_APPS. Its AppConfig starts the Scheduler of `settings.LEASECRON_SCHEDULER` in each
serving process (`leasecron.integrations.django.ready`), and it brings the management command
`manage.py leasecron_scheduler`, which runs that Scheduler as a process of its own.
It has no models and no migrations.
"""
