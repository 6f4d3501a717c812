# syntax=docker/dockerfile:1
# The leasecron operator image (`leasecron operator`; the chart's default command).
#
#   docker build -t leasecron/operator:0.1.0 .
#
# Two stages on the same base: the first installs leasecron and its dependencies into a
# virtual environment at /opt/leasecron; the second copies only that environment, so neither
# pip's caches nor any build tooling reach the final image. Every dependency ships binary
# wheels for linux/amd64 and linux/arm64, so no compiler is needed in either stage.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/leasecron
WORKDIR /src
# Only what the package build reads; see .dockerignore.
COPY pyproject.toml README.md ./
COPY operator/ operator/
# A regular (non-editable) install; byte-code is compiled here because the final image runs
# with a read-only root filesystem. pip itself is removed from the environment afterwards.
RUN /opt/leasecron/bin/pip install . \
    && /opt/leasecron/bin/leasecron --version \
    && /opt/leasecron/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="leasecron operator" \
      org.opencontainers.image.description="Scheduled jobs for many-replica Python apps on Kubernetes, coordinated with Leases." \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/leasecron /opt/leasecron
ENV PATH=/opt/leasecron/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# 65532 is the conventional "nonroot" uid/gid of distroless images; the chart runs as it too.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["leasecron"]
CMD ["operator"]
