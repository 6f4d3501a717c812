"""gunicorn settings for an app with a leasecron Scheduler (Flask or Django, sync workers).

graceful_timeout must exceed the Scheduler's grace_period (running handlers get that long to
finish at SIGTERM) and stay below the pod's terminationGracePeriodSeconds. No preload: each
worker imports the app and makes its own Scheduler (its own identity).
"""

import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
graceful_timeout = 20
preload_app = False
