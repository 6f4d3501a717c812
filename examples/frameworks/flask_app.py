"""Flask with a leasecron Scheduler, served by gunicorn.

    gunicorn -c gunicorn.conf.py flask_app:app                        # one worker per pod
    LEASECRON_ONE_PER_POD=1 gunicorn -c gunicorn.conf.py -w 3 flask_app:app

`init_app` starts the scheduler in a background thread of the worker that imports this
module and stops it when the worker exits gracefully (gunicorn's SIGTERM handling), Leases
released. Do not use gunicorn --preload: the master would import the app and run the
scheduler instead of the workers.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from jobs import POD_LOCK, scheduler, status

from leasecron.integrations import flask as leasecron_flask

app = Flask(__name__)
leasecron_flask.init_app(app, scheduler, pod_lock=POD_LOCK)


@app.get("/leasecron")
def leasecron_status() -> dict[str, Any]:
    return status()
