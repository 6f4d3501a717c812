# syntax=docker/dockerfile:1
# The leasecron operator image (`leasecron operator`; the chart's default command).
#
#   make image                                   # docker or podman, whichever runs here
#   docker build -t leasecron/operator:0.1.0 .   # the same by hand
#   docker build --build-arg PYTHON_IMAGE=registry.example.com/python:3.11-slim ...
#
# Two stages on the same base: the first installs leasecron[operator] into a virtual
# environment at /opt/leasecron; the second copies only that environment, so neither pip's
# caches nor any build tooling reach the final image. Every version comes from the lock files
# in requirements/ (`make lock`), checked against their hashes, so two builds of the same
# commit get the same dependencies. Every dependency ships binary wheels for linux/amd64 and
# linux/arm64, so no compiler is needed in either stage.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/leasecron
WORKDIR /src
# The locked dependencies first: this layer is reused until a lock file changes.
COPY requirements/build.txt requirements/image.txt requirements/
RUN /opt/leasecron/bin/pip install --require-hashes --only-binary :all: \
        -r requirements/build.txt -r requirements/image.txt
# Only what the package build reads; see .dockerignore.
COPY pyproject.toml README.md ./
COPY operator/ operator/
# leasecron itself, without resolving anything again (--no-deps) and built with the locked
# setuptools (--no-build-isolation). `pip check` fails the build if the lock no longer
# satisfies pyproject.toml. The Kubernetes client's asyncio copy (kubernetes.aio, ~70 MB),
# which leasecron never imports, is removed. Byte-code is compiled here because the final image
# runs with a read-only root filesystem. The build backend and pip leave the environment.
RUN /opt/leasecron/bin/pip install --no-deps --no-build-isolation . \
    && /opt/leasecron/bin/pip check \
    && rm -rf /opt/leasecron/lib/python3*/site-packages/kubernetes/aio \
    && /opt/leasecron/bin/python -m compileall -q /opt/leasecron/lib \
    && /opt/leasecron/bin/leasecron --version \
    && /opt/leasecron/bin/pip uninstall --yes setuptools wheel packaging pip

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="leasecron operator" \
      org.opencontainers.image.description="Scheduled jobs for many-replica Python apps on Kubernetes, coordinated with Leases." \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/leasecron /opt/leasecron
# 65532 is the conventional "nonroot" uid/gid of distroless images; the chart runs as it too.
# Cluster runtimes (containerd, CRI-O, Docker) add no passwd entry for the uid they run a
# container as, so the image carries one: without it getpass.getuser(), which kopf calls to
# name the process, raises KeyError. USER names the process even when a cluster runs the
# image under another uid (runAsUser), which has no entry either.
RUN echo 'nonroot:x:65532:65532:leasecron operator:/tmp:/usr/sbin/nologin' >>/etc/passwd \
    && echo 'nonroot:x:65532:' >>/etc/group
ENV PATH=/opt/leasecron/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    USER=nonroot
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["leasecron"]
CMD ["operator"]
