"""Settings of the example Django project: the parts that matter are the leasecron ones.

    gunicorn -c gunicorn.conf.py django_site.wsgi        # each worker starts the Scheduler
    python manage.py runserver                           # its serving child starts it
    python manage.py leasecron_scheduler                 # or: the Scheduler as its own process

`manage.py migrate`, `shell`, `test` and the runserver autoreloader's parent do not start it.
"""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "django_site.urls"
USE_TZ = True
INSTALLED_APPS = ["leasecron.integrations.django_app"]
DATABASES: dict[str, dict[str, str]] = {}

LEASECRON_SCHEDULER = "jobs.scheduler"
"""The dotted path of the Scheduler (jobs.py, shared with the other examples)."""
LEASECRON_AUTOSTART = os.environ.get("LEASECRON_AUTOSTART", "1") == "1"
"""Start it in each serving process; set to False where `leasecron_scheduler` runs it."""
LEASECRON_ONE_PER_POD = os.environ.get("LEASECRON_ONE_PER_POD") == "1"
"""One Scheduler per pod when gunicorn runs several workers."""
