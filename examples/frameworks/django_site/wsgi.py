"""The WSGI application gunicorn serves; setting Django up runs leasecron's AppConfig.ready()."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_site.settings")
application = get_wsgi_application()
