# The API and worker image: one image, the process is chosen by the command.
#
#   docker build -t workspace-data-service .
#   docker run ... workspace-data-service serve --workers 2   # API (uvicorn) on :8000
#   docker run ... workspace-data-service worker              # Temporal worker
#   docker run ... workspace-data-service migrate             # metadata migrations only
#
# Configuration comes only from WDS_* environment variables (docs/operations.md).

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/wds
ENV PATH=/opt/wds/bin:$PATH
WORKDIR /src

# Dependencies first, from pyproject.toml alone, so a code change reuses this layer.
COPY pyproject.toml ./
# base dependencies plus the otel extra (tracing is off unless WDS_OTEL / OTEL_* is set)
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['otel']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY . .
RUN pip install --no-deps . \
    && cd / && python -c "import api.app, worker, wds.cli, storage.migrations"

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}

ENV PATH=/opt/wds/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WDS_DATA_DIR=/var/lib/wds

# An unprivileged user; the data dir is created here so that a fresh named volume
# mounted on it inherits this ownership.
RUN groupadd --system --gid 10001 wds \
    && useradd --system --uid 10001 --gid wds --home-dir /home/wds --create-home --shell /usr/sbin/nologin wds \
    && install -d -o wds -g wds -m 0750 /var/lib/wds

COPY --from=build /opt/wds /opt/wds

USER wds
WORKDIR /home/wds
EXPOSE 8000

ENTRYPOINT ["wds"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
