# cardquota: the admission webhooks and controllers (`cardquota operator`).
#
#   make image                                     # docker build -t cardquota:dev .
#   docker build --build-arg PYTHON_VERSION=3.12 -t cardquota:dev .
#   docker build --build-arg COMPILE=0 -t cardquota:dev .   # the interpreted core only (no C compiler needed)
#
# Two stages: the first builds the wheel — by default with the core compiled by mypyc (setup.py; docs/development.md,
# "Compiled core", says what that buys), which needs gcc and mypy there and nowhere else — and the second installs
# only that wheel and its dependencies, at the versions constraints.txt pins (`make constraints`), into a slim Python
# base, so that two builds of one commit get the same packages. The image runs as a non-root user with no
# writable path but /tmp (mount an emptyDir there with a read-only root filesystem, as manifests/base does).
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ARG COMPILE=1
WORKDIR /src
RUN if [ "$COMPILE" = 1 ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
        && python -m pip install --no-cache-dir --disable-pip-version-check 'mypy>=2.4,<3' types-PyYAML \
           'setuptools>=77'; \
    else python -m pip install --no-cache-dir --disable-pip-version-check 'setuptools>=77'; fi
COPY pyproject.toml setup.py README.md ./
COPY cardquota ./cardquota
COPY operator ./operator
COPY webhooks ./webhooks
RUN CARDQUOTA_COMPILE=$COMPILE python -m pip wheel --no-cache-dir --disable-pip-version-check --no-deps \
        --no-build-isolation --wheel-dir /dist .

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="cardquota" \
      org.opencontainers.image.description="Card-level GPU quota admission webhooks and controllers for Volcano"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist/*.whl /tmp/
COPY constraints.txt /tmp/constraints.txt
RUN python -m pip install --constraint /tmp/constraints.txt /tmp/*.whl && rm -f /tmp/*.whl /tmp/constraints.txt \
    && useradd --uid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin cardquota
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["cardquota", "operator"]
